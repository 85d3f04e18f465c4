package render

import (
	"bytes"
	"fmt"
	"path"
)

// SOPS decryption happens where files are read (confinedFS.readFile): a SOPS-encrypted
// file is decrypted in memory the first time it is read and only its plaintext is cached,
// so kustomize, the plain-manifest walk and secretGenerator files/envs all see plaintext,
// and no decrypted byte is ever written anywhere.
//
// Why not the sops module: github.com/getsops/sops/v3's decrypt package, and every package
// that walks a sops.Tree (the root package, aes, stores/*), import its keyservice, which
// imports the AWS, GCP, Azure, HuaweiCloud and Vault clients (over 100 modules, and gRPC).
// Only age and OpenPGP are supported here, so the documented format is decrypted directly
// on filippo.io/age and github.com/ProtonMail/go-crypto; testdata/sops holds files
// encrypted by the real sops code, which the tests decrypt.

// sopsMarkers are in every SOPS file; a file without all of them is not parsed.
var sopsMarkers = [][]byte{[]byte("sops"), []byte("mac"), []byte("lastmodified")}

// decryptSOPS returns b decrypted when it is a SOPS file, with the plaintext of every
// value it decrypted (for redaction), and b itself otherwise — unless b, not a SOPS file,
// holds SOPS ciphertext (ErrCiphertext: see sops_ciphertext.go). keys nil means the
// SyncTarget sets no decryption: an encrypted file is then an error, never passed on as
// ciphertext. Errors say what is wrong, never a value.
func decryptSOPS(name string, b []byte, keys *Keys, limits Limits) (out []byte, plain []string, err error) {
	doc, ok, err := parseSOPSFile(name, b, limits.MaxDepth)
	if !ok {
		if err := refuseCiphertext(name, b, limits.MaxDepth); err != nil {
			return nil, nil, err
		}
		return b, nil, nil
	}
	if err != nil {
		return nil, nil, classErr(ErrDecryption, "SOPS-encrypted file: %s", err.Error())
	}
	if keys == nil {
		return nil, nil, classErr(ErrDecryption, "the file is SOPS-encrypted and no decryption is configured (spec.decryption)")
	}
	out, plain, err = doc.decrypt(keys)
	if err != nil {
		return nil, nil, classErr(ErrDecryption, "%s", err.Error())
	}
	return out, plain, nil
}

// parseSOPSFile parses b, the content of file name, as a SOPS file of the format its name
// says; ok is false when it is not one.
func parseSOPSFile(name string, b []byte, maxDepth int) (doc *sopsDoc, ok bool, err error) {
	for _, m := range sopsMarkers {
		if !bytes.Contains(b, m) {
			return nil, false, nil
		}
	}
	return parseSOPS(sopsFormatOf(path.Base(name)), b, maxDepth)
}

// decrypt opens the data key with keys, decrypts every document, checks the MAC and
// writes the plaintext in the file's own format.
func (d *sopsDoc) decrypt(keys *Keys) ([]byte, []string, error) {
	key, err := keys.dataKey(d.meta)
	if err != nil {
		return nil, nil, err
	}
	td, err := newTreeDecrypter(key, d.meta)
	if err != nil {
		return nil, nil, err
	}
	plain := make([]*sopsMap, len(d.docs))
	for i, doc := range d.docs {
		v, err := td.walk(doc, nil)
		if err != nil {
			return nil, nil, err
		}
		plain[i] = v.(*sopsMap)
	}
	if err := td.checkMAC(d.meta); err != nil {
		return nil, nil, err
	}
	out, err := d.emit(plain)
	return out, td.plaintexts, err
}

func (d *sopsDoc) emit(docs []*sopsMap) ([]byte, error) {
	switch d.format {
	case formatYAML:
		return emitYAML(docs)
	case formatDotenv:
		return emitDotenv(docs[0])
	case formatBinary:
		v, _ := docs[0].get("data")
		switch x := v.(type) {
		case string:
			return []byte(x), nil
		case []byte:
			return x, nil
		}
		return nil, fmt.Errorf("the data of a SOPS-encrypted binary file is not a string")
	}
	var buf bytes.Buffer
	if err := emitJSON(&buf, docs[0]); err != nil {
		return nil, err
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}
