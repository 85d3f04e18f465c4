package sources

import (
	"crypto/dsa" //nolint:staticcheck // DSA keys are made here to check that they are refused
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"

	"github.com/converge-gitops/converge/internal/gittest"
)

// sshsigSign makes an armored SSHSIG signature of payload by signer in namespace, with the
// signature algorithm algo ("" for the key's default), as ssh-keygen -Y sign does.
func sshsigSign(t testing.TB, signer ssh.Signer, namespace, algo string, payload []byte) string {
	t.Helper()
	h := sha512.Sum512(payload)
	signed := append([]byte(sshSigMagic), ssh.Marshal(sshSignedData{Namespace: namespace, HashAlg: "sha512", Hash: h[:]})...)
	var sig *ssh.Signature
	var err error
	if algo == "" {
		sig, err = signer.Sign(rand.Reader, signed)
	} else {
		sig, err = signer.(ssh.AlgorithmSigner).SignWithAlgorithm(rand.Reader, signed, algo)
	}
	if err != nil {
		t.Fatal(err)
	}
	blob := append([]byte(sshSigMagic), ssh.Marshal(sshSigWire{Version: 1, PublicKey: signer.PublicKey().Marshal(),
		Namespace: namespace, HashAlg: "sha512", Signature: ssh.Marshal(sig)})...)
	return sshSigBegin + "\n" + base64.StdEncoding.EncodeToString(blob) + "\n" + sshSigEnd + "\n"
}

// checkPayload verifies sig over payload as it verifies a commit.
func checkPayload(keys *TrustedKeys, sig string, payload []byte) (Signer, error) {
	return keys.check("commit x", sig, func(o plumbing.EncodedObject) error {
		w, err := o.Writer()
		if err != nil {
			return err
		}
		_, err = w.Write(payload)
		return errors.Join(err, w.Close())
	})
}

func ed25519Signer(t testing.TB) ssh.Signer {
	t.Helper()
	_, private, _ := gittest.SSHSigningKey(t)
	signer, err := ssh.ParsePrivateKey(private)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

// namespaceCases are allowed-signers namespaces="…" values and whether ssh-keygen -Y verify
// -n git accepts a signature by the line's key.
var namespaceCases = []struct {
	namespaces string
	signsGit   bool
}{
	{"git", true},
	{"*", true},
	{"file,git", true},
	{"g?t", true},
	{"gi*", true},
	{"*t", true},
	{"!file,git", true},
	{"git,", true},
	{"!git,*", false}, // a negated match refuses, whatever else the list says
	{"*,!git", false},
	{"git,!g*", false},
	{"!file", false}, // no positive match
	{"file", false},
	{"GIT", false}, // case-sensitive
	{"gi", false},
	{"git?", false},
	{"", false},
}

// TestAllowedSignersNamespaces: an allowed-signers line signs commits only when its
// namespaces pattern list, read as OpenSSH reads it, lets it sign in the namespace git;
// "!git,*" does not.
func TestAllowedSignersNamespaces(t *testing.T) {
	signer := ed25519Signer(t)
	_, pgp := gittest.OpenPGPKey(t, "Other", "other@example.com") // so that the Secret holds a key in every case
	payload := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nmessage\n")
	sig := sshsigSign(t, signer, "git", "", payload)
	for _, tt := range namespaceCases {
		t.Run(tt.namespaces, func(t *testing.T) {
			g := NewWithT(t)
			line := `alice@example.com namespaces="` + tt.namespaces + `" ` + authorized(signer.PublicKey())
			keys, err := TrustedKeysFromSecret(map[string][]byte{"signers": []byte(line), "pgp": []byte(pgp)})
			g.Expect(err).NotTo(HaveOccurred())
			s, err := checkPayload(keys, sig, payload)
			if !tt.signsGit {
				g.Expect(err).To(MatchError(ErrVerificationFailed))
				g.Expect(err.Error()).To(ContainSubstring("which is not trusted"))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Identity).To(Equal("alice@example.com"))
		})
	}
}

// TestAllowedSignersNamespacesAsSSHKeygen checks namespaceCases against ssh-keygen -Y
// verify itself, so that the table is OpenSSH's behaviour and not our reading of it.
func TestAllowedSignersNamespacesAsSSHKeygen(t *testing.T) {
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Fatal("ssh-keygen is needed (apt-get install openssh-client)")
	}
	signer := ed25519Signer(t)
	payload := []byte("signed payload\n")
	dir := t.TempDir()
	sigFile, msgFile := filepath.Join(dir, "sig"), filepath.Join(dir, "msg")
	NewWithT(t).Expect(os.WriteFile(sigFile, []byte(sshsigSign(t, signer, "git", "", payload)), 0o600)).To(Succeed())
	NewWithT(t).Expect(os.WriteFile(msgFile, payload, 0o600)).To(Succeed())
	for i, tt := range namespaceCases {
		allowed := filepath.Join(dir, "allowed"+string(rune('a'+i)))
		line := `alice@example.com namespaces="` + tt.namespaces + `" ` + authorized(signer.PublicKey()) + "\n"
		NewWithT(t).Expect(os.WriteFile(allowed, []byte(line), 0o600)).To(Succeed())
		msg, err := os.Open(msgFile)
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "alice@example.com", "-n", "git", "-s", sigFile)
		cmd.Stdin = msg
		out, err := cmd.CombinedOutput()
		_ = msg.Close()
		NewWithT(t).Expect(err == nil).To(Equal(tt.signsGit), "namespaces=%q: ssh-keygen says %s", tt.namespaces, out)
	}
}

// TestAllowedSignersNamespacesOnce: a line that gives namespaces twice is refused, as
// ssh-keygen refuses it, rather than read one way or the other.
func TestAllowedSignersNamespacesOnce(t *testing.T) {
	g := NewWithT(t)
	line := `alice namespaces="git",namespaces="file" ` + authorized(ed25519Signer(t).PublicKey())
	_, err := TrustedKeysFromSecret(map[string][]byte{"a": []byte(line)})
	g.Expect(err).To(MatchError(ErrInvalidSource))
	g.Expect(err.Error()).To(ContainSubstring(`trusted keys "a": line 1: allowed-signers option "namespaces" is given more than once`))
}

// TestMatchPattern compares matchPattern with a transcription of OpenSSH's recursive
// match_pattern on every pattern of up to 4 characters over g, i, t, * and ?, and every
// string of up to 3 characters over g, i, t.
func TestMatchPattern(t *testing.T) {
	var patterns, strs []string
	var grow func(prefix string, alphabet string, n int, into *[]string)
	grow = func(prefix, alphabet string, n int, into *[]string) {
		*into = append(*into, prefix)
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			grow(prefix+string(c), alphabet, n-1, into)
		}
	}
	grow("", "git*?", 4, &patterns)
	grow("", "git", 3, &strs)
	for _, p := range patterns {
		for _, s := range strs {
			if got, want := matchPattern(s, p), opensshMatchPattern(s, p); got != want {
				t.Errorf("matchPattern(%q, %q) = %v, OpenSSH says %v", s, p, got, want)
			}
		}
	}
	if !matchPattern("git", strings.Repeat("*", 10000)+"t") || matchPattern("git", strings.Repeat("*?", 5000)) {
		t.Error("long patterns")
	}
}

// opensshMatchPattern is match_pattern of OpenSSH's match.c, transcribed.
func opensshMatchPattern(s, pattern string) bool {
	for {
		if pattern == "" {
			return s == ""
		}
		if pattern[0] == '*' {
			pattern = strings.TrimLeft(pattern, "*")
			if pattern == "" {
				return true
			}
			for i := 0; i < len(s); i++ {
				if (pattern[0] == '?' || s[i] == pattern[0]) && opensshMatchPattern(s[i+1:], pattern[1:]) {
					return true
				}
			}
			return false
		}
		if s == "" || (pattern[0] != '?' && pattern[0] != s[0]) {
			return false
		}
		s, pattern = s[1:], pattern[1:]
	}
}

// dsaSigner is a new 1024-bit DSA key, the only size OpenSSH ever made.
func dsaSigner(t testing.TB) ssh.Signer {
	t.Helper()
	var key dsa.PrivateKey
	if err := dsa.GenerateParameters(&key.Parameters, rand.Reader, dsa.L1024N160); err != nil {
		t.Fatal(err)
	}
	if err := dsa.GenerateKey(&key, rand.Reader); err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(&key)
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

// TestSSHRefusesDSA: a DSA key is not a trusted key (as a public key line or an allowed-signers
// line), and a DSA signature is refused even by a key set that would hold its key.
func TestSSHRefusesDSA(t *testing.T) {
	signer := dsaSigner(t)
	g := NewWithT(t)
	g.Expect(signer.PublicKey().Type()).To(Equal("ssh-dss"))
	for name, line := range map[string]string{
		"public key":      authorized(signer.PublicKey()),
		"allowed signers": `alice namespaces="git" ` + authorized(signer.PublicKey()),
	} {
		_, err := TrustedKeysFromSecret(map[string][]byte{"k": []byte("# ops\n" + line + "\n")})
		g.Expect(err).To(MatchError(ErrInvalidSource), name)
		g.Expect(err.Error()).To(ContainSubstring(`trusted keys "k": line 2: DSA keys (ssh-dss) are not accepted`), name)
		g.Expect(err.Error()).NotTo(ContainSubstring("AAAA"), name)
	}

	payload := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nmessage\n")
	keys := &TrustedKeys{ssh: []sshKey{{key: signer.PublicKey(), principals: "alice"}}} // as the keys once read
	_, err := checkPayload(keys, sshsigSign(t, signer, "git", "", payload), payload)
	g.Expect(err).To(MatchError(ErrVerificationFailed))
	g.Expect(err.Error()).To(ContainSubstring("has an SSH signature by SSH key " + ssh.FingerprintSHA256(signer.PublicKey()) +
		" that is not accepted: DSA keys (ssh-dss) are not accepted"))
}

// TestSSHRefusesRSASHA1: an RSA key signs with rsa-sha2-256 or rsa-sha2-512; a signature
// with SHA-1 (ssh-rsa) by the same trusted key is refused.
func TestSSHRefusesRSASHA1(t *testing.T) {
	g := NewWithT(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	g.Expect(err).NotTo(HaveOccurred())
	signer, err := ssh.NewSignerFromKey(key)
	g.Expect(err).NotTo(HaveOccurred())
	keys := trusted(t, map[string]string{"k": authorized(signer.PublicKey())})
	payload := []byte("payload\n")
	for _, algo := range []string{ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSASHA512} {
		_, err := checkPayload(keys, sshsigSign(t, signer, "git", algo, payload), payload)
		g.Expect(err).NotTo(HaveOccurred(), algo)
	}
	_, err = checkPayload(keys, sshsigSign(t, signer, "git", ssh.KeyAlgoRSA, payload), payload)
	g.Expect(err).To(MatchError(ErrVerificationFailed))
	g.Expect(err.Error()).To(ContainSubstring("RSA signatures with SHA-1 (ssh-rsa) are not accepted"))
}

// TestSSHSignatureNamespace: a signature made in another namespace than git (a file
// signature, say) does not sign a commit.
func TestSSHSignatureNamespace(t *testing.T) {
	g := NewWithT(t)
	signer := ed25519Signer(t)
	keys := trusted(t, map[string]string{"k": authorized(signer.PublicKey())})
	payload := []byte("payload\n")
	_, err := checkPayload(keys, sshsigSign(t, signer, "file", "", payload), payload)
	g.Expect(err).To(MatchError(ErrVerificationFailed))
	g.Expect(err.Error()).To(ContainSubstring(`signature is for namespace "file", not "git"`))
}
