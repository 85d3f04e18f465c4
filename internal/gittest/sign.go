package gittest

import (
	"bytes"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"os/exec"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"golang.org/x/crypto/ssh"
)

// SignFunc returns the armored signature of payload, the way git would store it.
type SignFunc func(payload []byte) (string, error)

// OpenPGPKey is a new OpenPGP key for name <email>: its signer and its armored public key.
func OpenPGPKey(t testing.TB, name, email string) (SignFunc, string) {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", email, &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	var pub bytes.Buffer
	w, err := armor.Encode(&pub, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	sign := func(payload []byte) (string, error) {
		var sig bytes.Buffer
		if err := openpgp.ArmoredDetachSign(&sig, e, bytes.NewReader(payload), nil); err != nil {
			return "", err
		}
		return sig.String() + "\n", nil
	}
	return sign, pub.String() + "\n"
}

// SSHSigningKey is a new ed25519 key: its signer (git's gpg.format=ssh), its private key as
// an OpenSSH PEM (for `git -c user.signingkey=…`) and its public key.
func SSHSigningKey(t testing.TB) (SignFunc, []byte, ssh.PublicKey) {
	t.Helper()
	private, public := NewSSHKey(t, "")
	signer, err := ssh.ParsePrivateKey(private)
	if err != nil {
		t.Fatal(err)
	}
	return func(payload []byte) (string, error) { return sshSign(signer, payload) }, private, public
}

// sshSign makes an SSHSIG signature in namespace git, as `ssh-keygen -Y sign -n git` does.
func sshSign(signer ssh.Signer, payload []byte) (string, error) {
	h := sha512.Sum512(payload)
	signed := append([]byte("SSHSIG"), ssh.Marshal(struct {
		Namespace, Reserved, HashAlg string
		Hash                         []byte
	}{"git", "", "sha512", h[:]})...)
	sig, err := signer.Sign(rand.Reader, signed)
	if err != nil {
		return "", err
	}
	blob := append([]byte("SSHSIG"), ssh.Marshal(struct {
		Version                     uint32
		PublicKey                   []byte
		Namespace, Reserved, HashAl string
		Signature                   []byte
	}{1, signer.PublicKey().Marshal(), "git", "", "sha512", ssh.Marshal(sig)})...)
	enc := base64.StdEncoding.EncodeToString(blob)
	var b strings.Builder
	b.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(enc) > 70 {
		b.WriteString(enc[:70] + "\n")
		enc = enc[70:]
	}
	b.WriteString(enc + "\n-----END SSH SIGNATURE-----\n")
	return b.String(), nil
}

// SignedCommit adds a commit writing files on top of branch, signed with sign (unsigned when
// sign is nil), and returns its SHA.
func (r *Repo) SignedCommit(t testing.TB, branch string, sign SignFunc, files map[string]string) string {
	t.Helper()
	unsigned := r.Commit(t, branch, files)
	if sign == nil {
		return unsigned
	}
	raw := rawGit(t, r.Dir, nil, "cat-file", "commit", unsigned)
	header, body, ok := strings.Cut(raw, "\n\n")
	if !ok {
		t.Fatalf("gittest: commit %s has no message", unsigned)
	}
	sig, err := sign([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	signed := header + "\ngpgsig " + strings.ReplaceAll(strings.TrimSuffix(sig, "\n"), "\n", "\n ") + "\n\n" + body
	sha := strings.TrimSpace(rawGit(t, r.Dir, strings.NewReader(signed), "hash-object", "-t", "commit", "-w", "--stdin"))
	Git(t, r.Dir, "update-ref", "refs/heads/"+branch, sha, unsigned)
	return sha
}

// SignedTag creates the annotated tag name pointing at commit, signed with sign, and returns
// the SHA of the tag object.
func (r *Repo) SignedTag(t testing.TB, name, commit string, sign SignFunc) string {
	t.Helper()
	unsigned := r.AnnotatedTag(t, name, commit)
	raw := rawGit(t, r.Dir, nil, "cat-file", "tag", unsigned)
	sig, err := sign([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	sha := strings.TrimSpace(rawGit(t, r.Dir, strings.NewReader(raw+sig), "hash-object", "-t", "tag", "-w", "--stdin"))
	Git(t, r.Dir, "update-ref", "refs/tags/"+name, sha)
	return sha
}

// rawGit runs git and returns its standard output byte for byte.
func rawGit(t testing.TB, dir string, stdin *strings.Reader, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, env()
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}
