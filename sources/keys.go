package sources

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"golang.org/x/crypto/ssh"
)

// TrustedKeys are the keys a revision may be signed with: OpenPGP public keys and SSH public
// keys, each SSH key with the principals its allowed-signers line names.
type TrustedKeys struct {
	pgp openpgp.EntityList
	ssh []sshKey
	// digest identifies the set of keys, for caching verifications.
	digest string
}

type sshKey struct {
	key        ssh.PublicKey
	principals string
}

// Digest identifies the keys: equal digests, equal keys.
func (k *TrustedKeys) Digest() string { return k.digest }

const (
	pgpKeyBegin = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
	pgpKeyEnd   = "-----END PGP PUBLIC KEY BLOCK-----"
)

// TrustedKeysFromSecret reads the trusted keys of spec.source.verify from the values of its
// Secret. Any value may hold ASCII-armored OpenPGP public key blocks (one or more), SSH public
// keys ("ssh-ed25519 AAAA… comment") and allowed-signers lines ("principals [options] keytype
// base64"), one a line; empty lines and lines starting with # are skipped. It fails with
// ErrInvalidSource on anything else, or when no key at all is found; the error names the
// Secret key and line, never their content.
func TrustedKeysFromSecret(data map[string][]byte) (*TrustedKeys, error) {
	names := make([]string, 0, len(data))
	for name := range data {
		names = append(names, name)
	}
	sort.Strings(names)
	k := &TrustedKeys{}
	h := sha256.New()
	for _, name := range names {
		_, _ = fmt.Fprintf(h, "%d:%s;%d:", len(name), name, len(data[name]))
		h.Write(data[name])
		if err := k.add(data[name]); err != nil {
			return nil, fmt.Errorf("%w: trusted keys %q: %v", ErrInvalidSource, name, err)
		}
	}
	if len(k.pgp) == 0 && len(k.ssh) == 0 {
		return nil, fmt.Errorf("%w: the trusted keys secret holds no OpenPGP or SSH public key", ErrInvalidSource)
	}
	k.digest = hex.EncodeToString(h.Sum(nil))
	return k, nil
}

// add reads the keys of one Secret value.
func (k *TrustedKeys) add(value []byte) error {
	lines := strings.Split(strings.ReplaceAll(string(value), "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case line == pgpKeyBegin:
			end := i + 1
			for end < len(lines) && strings.TrimSpace(lines[end]) != pgpKeyEnd {
				end++
			}
			if end == len(lines) {
				return fmt.Errorf("line %d: OpenPGP key block has no end line", i+1)
			}
			block := strings.Join(lines[i:end+1], "\n")
			list, err := openpgp.ReadArmoredKeyRing(bytes.NewReader([]byte(block)))
			if err != nil {
				return fmt.Errorf("line %d: OpenPGP key block: %v", i+1, err)
			}
			k.pgp = append(k.pgp, list...)
			i = end
		default:
			key, ok, err := parseSSHKeyLine(line)
			if err != nil {
				return fmt.Errorf("line %d: %v", i+1, err)
			}
			if ok {
				k.ssh = append(k.ssh, key)
			}
		}
	}
	return nil
}

// parseSSHKeyLine reads an SSH public key line or an allowed-signers line; ok is false for an
// allowed-signers line whose namespaces leave out git (not a signer of commits). Of the options
// only namespaces is understood: a line with others (cert-authority, valid-after,
// valid-before) is refused rather than trusted more widely than it says.
func parseSSHKeyLine(line string) (key sshKey, ok bool, err error) {
	fields := strings.Fields(line)
	for i := 0; i+1 < len(fields); i++ {
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.Join(fields[i:], " ")))
		if err != nil || pub.Type() != fields[i] {
			continue
		}
		if i == 0 {
			return sshKey{key: pub}, true, nil
		}
		for _, opt := range splitOptions(strings.Join(fields[1:i], " ")) {
			name, value, _ := strings.Cut(opt, "=")
			if !strings.EqualFold(name, "namespaces") {
				return sshKey{}, false, fmt.Errorf("allowed-signers option %q is not supported", name)
			}
			if !slices.ContainsFunc(strings.Split(strings.Trim(value, `"`), ","), func(ns string) bool {
				return ns == sshSigNamespace || ns == "*"
			}) {
				return sshKey{}, false, nil
			}
		}
		return sshKey{key: pub, principals: fields[0]}, true, nil
	}
	return sshKey{}, false, fmt.Errorf("neither an OpenPGP key block, an SSH public key nor an allowed-signers line")
}

// splitOptions splits allowed-signers options at the commas outside double quotes.
func splitOptions(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			quoted = !quoted
		case ',':
			if !quoted {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
