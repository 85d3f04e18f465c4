package sources

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
// valid-before) is refused rather than trusted more widely than it says. A DSA key is refused.
func parseSSHKeyLine(line string) (key sshKey, ok bool, err error) {
	fields := strings.Fields(line)
	for i := 0; i+1 < len(fields); i++ {
		pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(strings.Join(fields[i:], " ")))
		if err != nil || pub.Type() != fields[i] {
			continue
		}
		if err := acceptedKeyType(pub.Type()); err != nil {
			return sshKey{}, false, err
		}
		if i == 0 {
			return sshKey{key: pub}, true, nil
		}
		signsGit, err := allowedSignersOptions(strings.Join(fields[1:i], " "))
		if err != nil || !signsGit {
			return sshKey{}, false, err
		}
		return sshKey{key: pub, principals: fields[0]}, true, nil
	}
	return sshKey{}, false, fmt.Errorf("neither an OpenPGP key block, an SSH public key nor an allowed-signers line")
}

// allowedSignersOptions reads the options of an allowed-signers line and says whether they
// let its key sign in the namespace git. namespaces is the one option understood; given
// twice, the line is refused, as ssh-keygen refuses it.
func allowedSignersOptions(opts string) (signsGit bool, err error) {
	signsGit, seen := true, false
	for _, opt := range splitOptions(opts) {
		name, value, _ := strings.Cut(opt, "=")
		switch {
		case !strings.EqualFold(name, "namespaces"):
			return false, fmt.Errorf("allowed-signers option %q is not supported", name)
		case seen:
			return false, errors.New("allowed-signers option \"namespaces\" is given more than once")
		}
		seen, signsGit = true, namespacesAllow(strings.Trim(value, `"`), sshSigNamespace)
	}
	return signsGit, nil
}

// maxNamespacePattern is OpenSSH's bound on one pattern of a list (match_pattern_list's
// buffer): a longer pattern makes the whole list match nothing.
const maxNamespacePattern = 1023

// namespacesAllow applies OpenSSH's pattern-list semantics (match_pattern_list, as
// ssh-keygen -Y verify applies it to namespaces="…"): the list is split at commas; a
// pattern that starts with ! and matches refuses ns whatever else the list holds;
// otherwise ns is allowed when some pattern matches it. A pattern matches with * (any run of
// characters) and ? (one character), case-sensitively. So "!git,*" refuses git, and "*"
// and "git" allow it.
func namespacesAllow(list, ns string) bool {
	allowed := false
	for _, pattern := range strings.Split(list, ",") {
		pattern, negated := strings.CutPrefix(pattern, "!")
		if len(pattern) >= maxNamespacePattern {
			return false
		}
		if !matchPattern(ns, pattern) {
			continue
		}
		if negated {
			return false
		}
		allowed = true
	}
	return allowed
}

// matchPattern is OpenSSH's match_pattern: s matches pattern, where * matches any run of
// bytes and ? any one byte. It backtracks to the last * only, so it runs in
// len(s)*len(pattern) steps at most.
func matchPattern(s, pattern string) bool {
	si, pi := 0, 0
	star, starS := -1, 0
	for si < len(s) {
		switch {
		case pi < len(pattern) && pattern[pi] == '*':
			star, starS = pi, si
			pi++
		case pi < len(pattern) && (pattern[pi] == '?' || pattern[pi] == s[si]):
			si++
			pi++
		case star >= 0:
			starS++
			si, pi = starS, star+1
		default:
			return false
		}
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
}

// The DSA key and certificate types (x/crypto/ssh names them too, deprecated).
const (
	sshDSA     = "ssh-dss"
	sshDSACert = "ssh-dss-cert-v01@openssh.com"
)

// acceptedKeyType refuses DSA keys: ssh-dss signs with SHA-1 and is at most 1024 bits
// (OpenSSH disabled it in 7.0 and removed it in 10.0).
func acceptedKeyType(keyType string) error {
	if keyType == sshDSA || keyType == sshDSACert {
		return errors.New("DSA keys (ssh-dss) are not accepted: they sign with SHA-1 and are at most 1024 bits; use an ed25519, ECDSA or RSA key")
	}
	return nil
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
