// Command generate writes the SOPS interoperability fixtures of converge's sync/render
// tests: files encrypted by the real sops code (github.com/getsops/sops/v3), for
// THROWAWAY TEST KEYS that it generates too. Run it from its own module:
//
//	cd sync/render/testdata/sops/generate && go run . ..
//
// It is kept out of converge's module so that sops and its cloud KMS clients stay out
// of converge's dependencies.
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"
	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/getsops/sops/v3"
	"github.com/getsops/sops/v3/aes"
	sopsage "github.com/getsops/sops/v3/age"
	"github.com/getsops/sops/v3/cmd/sops/common"
	"github.com/getsops/sops/v3/config"
	"github.com/getsops/sops/v3/pgp"
	"github.com/getsops/sops/v3/stores/dotenv"
	"github.com/getsops/sops/v3/stores/json"
	"github.com/getsops/sops/v3/stores/yaml"
	"github.com/getsops/sops/v3/version"
)

type fixture struct {
	name, plain                 string
	store                       store
	age, pgp                    bool
	encryptedRegex, unencSuffix string
	macOnlyEncrypted            bool
}

func main() {
	out := os.Args[1]
	must(os.MkdirAll(filepath.Join(out, "keys"), 0o755))
	id, err := age.GenerateX25519Identity()
	must(err)
	ent, err := openpgp.NewEntity("converge test key", "THROWAWAY TEST KEY", "test@example.invalid",
		&packet.Config{RSABits: 2048, Time: func() time.Time { return time.Now() }})
	must(err)
	gnupg := filepath.Join(os.TempDir(), "sops-fixture-gnupg")
	must(os.MkdirAll(gnupg, 0o700))
	var pub bytes.Buffer
	must(ent.Serialize(&pub))
	must(os.WriteFile(filepath.Join(gnupg, "pubring.gpg"), pub.Bytes(), 0o600))
	var sec bytes.Buffer
	w, err := armor.Encode(&sec, openpgp.PrivateKeyType, nil)
	must(err)
	must(ent.SerializePrivate(w, nil))
	must(w.Close())
	must(os.WriteFile(filepath.Join(out, "keys", "test.agekey"), []byte("# THROWAWAY TEST KEY, generated for converge's tests; protects nothing.\n# public key: "+id.Recipient().String()+"\n"+id.String()+"\n"), 0o644))
	must(os.WriteFile(filepath.Join(out, "keys", "test.asc"), sec.Bytes(), 0o644))
	fp := fmt.Sprintf("%X", ent.PrimaryKey.Fingerprint)

	ys := yaml.NewStore(&config.YAMLStoreConfig{})
	js := json.NewStore(&config.JSONStoreConfig{})
	ds := dotenv.NewStore(&config.DotenvStoreConfig{})
	bs := json.NewBinaryStore(&config.JSONBinaryStoreConfig{})
	for _, f := range []fixture{
		{name: "secret.yaml", plain: "plain/secret.yaml", store: ys, age: true, pgp: true, encryptedRegex: "^(data|stringData)$"},
		{name: "configmap.yaml", plain: "plain/configmap.yaml", store: ys, age: true},
		{name: "multi.yaml", plain: "plain/multi.yaml", store: ys, pgp: true, unencSuffix: "_unencrypted"},
		{name: "values.json", plain: "plain/values.json", store: js, age: true, macOnlyEncrypted: true, encryptedRegex: "^(data|password)$"},
		{name: "app.env", plain: "plain/app.env", store: ds, age: true, pgp: true},
		{name: "tls.crt", plain: "plain/tls.crt", store: bs, age: true},
	} {
		plain, err := os.ReadFile(filepath.Join(out, f.plain))
		must(err)
		plainBranches, err := f.store.LoadPlainFile(plain)
		must(err)
		var group sops.KeyGroup
		if f.age {
			k, err := sopsage.MasterKeyFromRecipient(id.Recipient().String())
			must(err)
			group = append(group, k)
		}
		if f.pgp {
			k := pgp.NewMasterKeyFromFingerprint(fp)
			pgp.PubRing(filepath.Join(gnupg, "pubring.gpg")).ApplyToMasterKey(k)
			group = append(group, k)
		}
		tree := sops.Tree{Branches: plainBranches, Metadata: sops.Metadata{
			KeyGroups: []sops.KeyGroup{group}, Version: version.Version,
			EncryptedRegex: f.encryptedRegex, UnencryptedSuffix: f.unencSuffix, MACOnlyEncrypted: f.macOnlyEncrypted,
		}}
		dataKey, errs := tree.GenerateDataKey()
		if len(errs) > 0 {
			panic(fmt.Sprint(errs))
		}
		must(common.EncryptTree(common.EncryptTreeOpts{DataKey: dataKey, Tree: &tree, Cipher: aes.NewCipher()}))
		enc, err := f.store.EmitEncryptedFile(tree)
		must(err)
		must(os.WriteFile(filepath.Join(out, f.name), enc, 0o644))
	}
}

type store interface {
	LoadPlainFile([]byte) (sops.TreeBranches, error)
	EmitEncryptedFile(sops.Tree) ([]byte, error)
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
