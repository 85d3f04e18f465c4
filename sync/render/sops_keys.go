package render

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/ProtonMail/go-crypto/openpgp"
	pgparmor "github.com/ProtonMail/go-crypto/openpgp/armor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Keys are the private keys a render decrypts SOPS files with. The zero value holds
// none: decryption is on, and every encrypted file fails with the recipients it was
// encrypted for. Keys never print their material.
type Keys struct {
	age []age.Identity
	pgp openpgp.EntityList
	// ageRecipients and pgpFingerprints are the public sides, for error messages.
	ageRecipients   []string
	pgpFingerprints []string
	// data is the Secret data the keys were parsed from, for a render worker to parse
	// them again (see Pool); never formatted or logged.
	data map[string][]byte
}

// AgeKeySuffix and PGPKeySuffix end the keys of the decryption Secret whose values are
// age identities and ASCII-armored OpenPGP private keys.
const (
	AgeKeySuffix = ".agekey"
	PGPKeySuffix = ".asc"
)

// ParseKeys reads the private keys of a decryption Secret's data: values under keys
// ending in .agekey are age identity files (one or more AGE-SECRET-KEY-1… lines,
// comments allowed), values under keys ending in .asc are ASCII-armored OpenPGP private
// keys (not passphrase-protected). Other keys are ignored. Errors name the Secret key,
// never its value.
func ParseKeys(data map[string][]byte) (*Keys, error) {
	names := make([]string, 0, len(data))
	for name := range data {
		names = append(names, name)
	}
	sort.Strings(names)
	k := &Keys{data: data}
	for _, name := range names {
		var err error
		switch {
		case strings.HasSuffix(name, AgeKeySuffix):
			err = k.addAge(data[name])
		case strings.HasSuffix(name, PGPKeySuffix):
			err = k.addPGP(data[name])
		}
		if err != nil {
			return nil, fmt.Errorf("%w: key %q: %w", ErrDecryption, name, err)
		}
	}
	return k, nil
}

func (k *Keys) addAge(b []byte) error {
	ids, err := age.ParseIdentities(bytes.NewReader(b))
	if err != nil {
		return errors.New("not an age identity file (AGE-SECRET-KEY-1… lines)")
	}
	for _, id := range ids {
		k.age = append(k.age, id)
		if x, ok := id.(interface{ Recipient() *age.X25519Recipient }); ok {
			k.ageRecipients = append(k.ageRecipients, x.Recipient().String())
		}
	}
	return nil
}

func (k *Keys) addPGP(b []byte) error {
	el, err := openpgp.ReadArmoredKeyRing(bytes.NewReader(b))
	if err != nil {
		return errors.New("not an ASCII-armored OpenPGP key")
	}
	for _, e := range el {
		if e.PrivateKey == nil {
			return fmt.Errorf("OpenPGP key %X is a public key; the private key is needed", e.PrimaryKey.Fingerprint)
		}
		if e.PrivateKey.Encrypted {
			return fmt.Errorf("OpenPGP key %X is passphrase-protected, which is not supported", e.PrimaryKey.Fingerprint)
		}
		for _, s := range e.Subkeys {
			if s.PrivateKey != nil && s.PrivateKey.Encrypted {
				return fmt.Errorf("OpenPGP key %X has a passphrase-protected subkey, which is not supported", e.PrimaryKey.Fingerprint)
			}
		}
		k.pgp = append(k.pgp, e)
		k.pgpFingerprints = append(k.pgpFingerprints, fmt.Sprintf("%X", e.PrimaryKey.Fingerprint))
	}
	return nil
}

// String lists the public sides of the keys, never the keys.
func (k *Keys) String() string {
	if k == nil || len(k.ageRecipients)+len(k.pgpFingerprints) == 0 {
		return "no keys"
	}
	return describeRecipients(k.ageRecipients, k.pgpFingerprints, nil)
}

// dataKey decrypts the file's data key with the first of its age or OpenPGP recipients
// one of the keys opens. It fails listing the recipients when none does.
func (k *Keys) dataKey(m *sopsMetadata) ([]byte, error) {
	if len(m.KeyGroups) > 0 {
		return nil, errors.New("key groups (Shamir secret sharing) are not supported")
	}
	if n := len(m.Age) + len(m.PGP); n > maxRecipients {
		// Each one the keys match costs a private-key operation.
		return nil, fmt.Errorf("encrypted for %d age and OpenPGP recipients, more than %d", n, maxRecipients)
	}
	if k != nil && len(k.age) > 0 {
		for _, a := range m.Age {
			if key, err := ageDataKey(a.Enc, k.age); err == nil {
				return checkDataKey(key)
			}
		}
	}
	if k != nil && len(k.pgp) > 0 {
		for _, p := range m.PGP {
			if key, err := pgpDataKey(p.Enc, k.pgp); err == nil {
				return checkDataKey(key)
			}
		}
	}
	var ages, pgps []string
	for _, a := range m.Age {
		ages = append(ages, a.Recipient)
	}
	for _, p := range m.PGP {
		pgps = append(pgps, p.Fingerprint)
	}
	return nil, fmt.Errorf("no key for this file: it is encrypted for %s; the decryption Secret holds %s",
		describeRecipients(ages, pgps, otherRecipients(m)), k.String())
}

func checkDataKey(key []byte) ([]byte, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("the data key is %d bytes, not 32", len(key))
	}
	return key, nil
}

// maxRecipients bounds the age and OpenPGP recipients of one file: a file listing
// thousands, each crafted for the SyncTarget's key, would cost as many private-key
// operations. Real files list a handful.
const maxRecipients = 64

// maxDataKey bounds what is read of a decrypted data key (32 bytes).
const maxDataKey = 1 << 10

func ageDataKey(enc string, ids []age.Identity) ([]byte, error) {
	r, err := age.Decrypt(armor.NewReader(strings.NewReader(enc)), ids...)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(r, maxDataKey))
}

func pgpDataKey(enc string, ring openpgp.EntityList) ([]byte, error) {
	block, err := pgparmor.Decode(strings.NewReader(enc))
	if err != nil {
		return nil, err
	}
	md, err := openpgp.ReadMessage(block.Body, ring, nil, nil)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(md.UnverifiedBody, maxDataKey))
}

// otherRecipients lists the cloud KMS and Vault keys a file was encrypted for, which
// converge does not use.
func otherRecipients(m *sopsMetadata) []string {
	var out []string
	for _, x := range m.KMS {
		out = append(out, "AWS KMS "+x.ARN)
	}
	for _, x := range m.GCPKMS {
		out = append(out, "GCP KMS "+x.ResourceID)
	}
	for _, x := range m.AzureKV {
		out = append(out, "Azure Key Vault "+x.VaultURL+" "+x.Name)
	}
	for _, x := range m.Vault {
		out = append(out, "Vault "+x.Address+" "+x.Key)
	}
	return out
}

func describeRecipients(ages, pgps, others []string) string {
	var parts []string
	if len(ages) > 0 {
		parts = append(parts, "age recipients "+strings.Join(ages, ", "))
	}
	if len(pgps) > 0 {
		parts = append(parts, "OpenPGP fingerprints "+strings.Join(pgps, ", "))
	}
	parts = append(parts, others...)
	if len(parts) == 0 {
		return "no recipients"
	}
	return strings.Join(parts, "; ")
}

// SecretGetter reads the data of a Secret.
type SecretGetter func(ctx context.Context, namespace, name string) (map[string][]byte, error)

// KeysFor returns the Keys a SyncTarget's spec.decryption gives, reading its Secret (in
// the SyncTarget's namespace) with get: nil when the SyncTarget decrypts nothing, an
// empty Keys when it names no Secret. Its errors are *Error of class ErrDecryption and
// keep get's error in their chain (a missing Secret is apierrors.IsNotFound).
func KeysFor(ctx context.Context, st *convergev1.SyncTarget, get SecretGetter) (*Keys, error) {
	dec := st.Spec.Decryption
	if dec == nil {
		return nil, nil
	}
	if dec.Provider != "sops" {
		return nil, &Error{Err: fmt.Errorf("%w: unsupported decryption provider %q", ErrDecryption, dec.Provider)}
	}
	if dec.SecretRef == nil {
		return &Keys{}, nil
	}
	data, err := get(ctx, st.Namespace, dec.SecretRef.Name)
	if err != nil {
		return nil, &Error{Err: fmt.Errorf("%w: reading the decryption Secret %s/%s: %w", ErrDecryption, st.Namespace, dec.SecretRef.Name, err)}
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, &Error{Err: fmt.Errorf("decryption Secret %s/%s: %w", st.Namespace, dec.SecretRef.Name, err)}
	}
	return keys, nil
}
