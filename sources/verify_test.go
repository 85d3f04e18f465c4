package sources

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"

	"github.com/converge-gitops/converge/internal/gittest"
)

// signers are the keys of the verification tests: two OpenPGP and two SSH keys.
type signers struct {
	pgpA, pgpB, sshA, sshB gittest.SignFunc
	pgpAPub, pgpBPub       string
	sshAPub, sshBPub       ssh.PublicKey
}

func newSigners(t *testing.T) *signers {
	s := &signers{}
	s.pgpA, s.pgpAPub = gittest.OpenPGPKey(t, "Alice", "alice@example.com")
	s.pgpB, s.pgpBPub = gittest.OpenPGPKey(t, "Bob", "bob@example.com")
	s.sshA, _, s.sshAPub = gittest.SSHSigningKey(t)
	s.sshB, _, s.sshBPub = gittest.SSHSigningKey(t)
	return s
}

func authorized(k ssh.PublicKey) string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(k)))
}

func trusted(t *testing.T, data map[string]string) *TrustedKeys {
	t.Helper()
	m := map[string][]byte{}
	for k, v := range data {
		m[k] = []byte(v)
	}
	keys, err := TrustedKeysFromSecret(m)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func verify(t *testing.T, f *fixture, ref Ref, mode VerifyMode, keys *TrustedKeys) (Verification, error) {
	t.Helper()
	src := f.src
	src.Ref = ref
	rev, err := Resolve(ctxTimeout(t, time.Minute), src)
	if err != nil {
		t.Fatal(err)
	}
	v := &Verifier{Cache: f.cache}
	return v.Verify(ctxTimeout(t, time.Minute), src, rev, mode, keys)
}

func TestVerifyCommits(t *testing.T) {
	s := newSigners(t)
	f := newFixture(t)
	files := map[string]string{"a.yaml": "a: 1\n"}
	both := trusted(t, map[string]string{
		"pgp":             s.pgpAPub,
		"allowed_signers": "alice@example.com,ops@example.com " + authorized(s.sshAPub) + "\n",
	})
	tests := []struct {
		name    string
		sign    gittest.SignFunc
		want    []string
		wantErr []string
	}{
		{name: "OpenPGP, trusted", sign: s.pgpA, want: []string{"commit ", "signed by OpenPGP key ", "(Alice <alice@example.com>)"}},
		{name: "SSH, trusted", sign: s.sshA,
			want: []string{"signed by SSH key " + ssh.FingerprintSHA256(s.sshAPub), "(alice@example.com,ops@example.com)"}},
		{name: "unsigned", wantErr: []string{"is not signed"}},
		{name: "OpenPGP, unknown key", sign: s.pgpB, wantErr: []string{"is signed by OpenPGP key ", "which is not trusted"}},
		{name: "SSH, unknown key", sign: s.sshB,
			wantErr: []string{"is signed by SSH key " + ssh.FingerprintSHA256(s.sshBPub) + ", which is not trusted"}},
		{name: "forged: SSH signature of another payload", sign: func([]byte) (string, error) { return s.sshA([]byte("other")) },
			wantErr: []string{"has a bad SSH signature by SSH key " + ssh.FingerprintSHA256(s.sshAPub)}},
		{name: "forged: OpenPGP signature of another payload", sign: func([]byte) (string, error) { return s.pgpA([]byte("other")) },
			wantErr: []string{"has a bad OpenPGP signature by OpenPGP key "}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			files["n"] = string(rune('a' + i))
			sha := f.repo.SignedCommit(t, "main", tt.sign, files)
			v, err := verify(t, f, Ref{Branch: "main"}, VerifyHEAD, both)
			if tt.wantErr != nil {
				g.Expect(err).To(MatchError(ErrVerificationFailed))
				g.Expect(kindOf(t, err)).To(Equal(ErrVerificationFailed))
				g.Expect(err.Error()).To(HavePrefix("commit " + sha[:12] + " "))
				for _, w := range tt.wantErr {
					g.Expect(err.Error()).To(ContainSubstring(w))
				}
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v.String()).To(HavePrefix("commit " + sha[:12] + " signed by"))
			for _, w := range tt.want {
				g.Expect(v.String()).To(ContainSubstring(w))
			}
		})
	}
}

func TestVerifyTags(t *testing.T) {
	s := newSigners(t)
	f := newFixture(t)
	keys := trusted(t, map[string]string{"keys": s.pgpAPub + authorized(s.sshAPub) + "\n"})
	unsignedCommit := f.repo.Commit(t, "main", map[string]string{"a.yaml": "a: 1\n"})
	f.repo.SignedTag(t, "v1.0.0", unsignedCommit, s.sshA)
	f.repo.Tag(t, "v1.0.1", unsignedCommit) // lightweight
	signedCommit := f.repo.SignedCommit(t, "main", s.pgpA, map[string]string{"a.yaml": "a: 2\n"})
	f.repo.SignedTag(t, "v2.0.0", signedCommit, s.pgpA)
	f.repo.SignedTag(t, "v3.0.0", signedCommit, s.pgpB)
	f.repo.SetRef(t, "refs/tags/v4.0.0", f.repo.SignedTag(t, "v0.9.0", signedCommit, s.pgpA)) // a replayed tag

	tests := []struct {
		name    string
		ref     Ref
		mode    VerifyMode
		want    string
		wantErr string
	}{
		{name: "signed tag of an unsigned commit, Tag", ref: Ref{Tag: "v1.0.0"}, mode: VerifyTag,
			want: "tag v1.0.0 signed by SSH key " + ssh.FingerprintSHA256(s.sshAPub)},
		{name: "signed tag of an unsigned commit, TagAndHEAD", ref: Ref{Tag: "v1.0.0"}, mode: VerifyTagAndHEAD,
			wantErr: "commit " + unsignedCommit[:12] + " is not signed"},
		{name: "both signed, TagAndHEAD", ref: Ref{SemVer: ">=2.0.0 <3"}, mode: VerifyTagAndHEAD,
			want: "tag v2.0.0 signed by OpenPGP key"},
		{name: "tag by an unknown key", ref: Ref{Tag: "v3.0.0"}, mode: VerifyTag, wantErr: "tag v3.0.0 is signed by OpenPGP key"},
		{name: "a signed tag under another name", ref: Ref{Tag: "v4.0.0"}, mode: VerifyTag,
			wantErr: `tag v4.0.0 points at a tag object named "v0.9.0"`},
		{name: "lightweight tag", ref: Ref{Tag: "v1.0.1"}, mode: VerifyTag, wantErr: "tag v1.0.1 is a lightweight tag"},
		{name: "branch in Tag mode", ref: Ref{Branch: "main"}, mode: VerifyTag, wantErr: "ref main is not a tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			v, err := verify(t, f, tt.ref, tt.mode, keys)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ErrVerificationFailed))
				g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v.String()).To(HavePrefix(tt.want))
		})
	}
}

func TestVerifyKeyRotation(t *testing.T) {
	g := NewWithT(t)
	s := newSigners(t)
	f := newFixture(t)
	rotating := trusted(t, map[string]string{"old.asc": s.pgpAPub, "new": authorized(s.sshBPub)})
	rotated := trusted(t, map[string]string{"new": authorized(s.sshBPub)})
	g.Expect(rotating.Digest()).NotTo(Equal(rotated.Digest()))

	f.repo.SignedCommit(t, "old", s.pgpA, map[string]string{"a": "1"})
	f.repo.SignedCommit(t, "new", s.sshB, map[string]string{"a": "2"})
	for _, branch := range []string{"old", "new"} {
		_, err := verify(t, f, Ref{Branch: branch}, VerifyHEAD, rotating)
		g.Expect(err).NotTo(HaveOccurred(), branch)
	}
	_, err := verify(t, f, Ref{Branch: "new"}, VerifyHEAD, rotated)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = verify(t, f, Ref{Branch: "old"}, VerifyHEAD, rotated)
	g.Expect(err).To(MatchError(ContainSubstring("which is not trusted")))
}

// TestVerifyGitSSHSignature verifies a commit signed by git itself with gpg.format=ssh
// (through ssh-keygen), so that the SSH format read is git's, not only our own.
func TestVerifyGitSSHSignature(t *testing.T) {
	for _, bin := range []string{"git", "ssh-keygen"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is needed (apt-get install openssh-client git)", bin)
		}
	}
	g := NewWithT(t)
	f := newFixture(t)
	_, private, public := gittest.SSHSigningKey(t)
	keyFile := filepath.Join(t.TempDir(), "id_ed25519")
	g.Expect(os.WriteFile(keyFile, private, 0o600)).To(Succeed())
	base := f.repo.Commit(t, "main", map[string]string{"a": "1"})
	tree := gittest.Git(t, f.repo.Dir, "rev-parse", base+"^{tree}")
	sha := gittest.Git(t, f.repo.Dir, "-c", "gpg.format=ssh", "-c", "user.signingkey="+keyFile,
		"commit-tree", "-S", "-p", base, "-m", "signed by git", tree)
	f.repo.ForcePush(t, "main", sha)

	v, err := verify(t, f, Ref{Branch: "main"}, VerifyHEAD, trusted(t, map[string]string{"k": authorized(public)}))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(v.String()).To(Equal("commit " + sha[:12] + " signed by SSH key " + ssh.FingerprintSHA256(public)))
}

// TestVerifyRemembers: verifying a revision again with the same keys costs no request; other
// keys verify anew.
func TestVerifyRemembers(t *testing.T) {
	g := NewWithT(t)
	s := newSigners(t)
	f := newFixture(t)
	f.repo.SignedCommit(t, "main", s.sshA, map[string]string{"a": "1"})
	keys := trusted(t, map[string]string{"k": authorized(s.sshAPub)})
	rev, err := Resolve(ctxTimeout(t, time.Minute), f.src)
	g.Expect(err).NotTo(HaveOccurred())
	v := &Verifier{Cache: f.cache}
	f.srv.ResetStats()
	for range 3 {
		_, err := v.Verify(ctxTimeout(t, time.Minute), f.src, rev, VerifyHEAD, keys)
		g.Expect(err).NotTo(HaveOccurred())
	}
	g.Expect(f.srv.Stats().UploadPack).To(Equal(int64(1)))
	_, err = v.Verify(ctxTimeout(t, time.Minute), f.src, rev, VerifyHEAD, trusted(t, map[string]string{"k": s.pgpAPub}))
	g.Expect(err).To(MatchError(ErrVerificationFailed))
	g.Expect(f.srv.Stats().UploadPack).To(Equal(int64(2)))
}

func TestTrustedKeysFromSecret(t *testing.T) {
	s := newSigners(t)
	ssh := authorized(s.sshAPub)
	tests := []struct {
		name    string
		data    map[string]string
		ssh     int
		pgp     int
		wantErr string
	}{
		{name: "keys of every kind in one value",
			data: map[string]string{"keys": "# ops\n\n" + s.pgpAPub + s.pgpBPub + ssh + "\nbob@example.com " + ssh + "\n"}, ssh: 2, pgp: 2},
		{name: "allowed-signers namespaces with git", data: map[string]string{"a": `bob namespaces="file,git" ` + ssh}, ssh: 1},
		{name: "allowed-signers namespaces without git: not a signer", data: map[string]string{
			"a": `bob namespaces="file" ` + ssh, "b": s.pgpAPub}, pgp: 1},
		{name: "empty", data: map[string]string{"a": "\n# nothing\n"}, wantErr: "holds no OpenPGP or SSH public key"},
		{name: "garbage", data: map[string]string{"a": ssh + "\nnot a key at all\n"},
			wantErr: `trusted keys "a": line 2: neither an OpenPGP key block`},
		{name: "unsupported option", data: map[string]string{"a": `bob cert-authority ` + ssh},
			wantErr: `allowed-signers option "cert-authority" is not supported`},
		{name: "unterminated OpenPGP block", data: map[string]string{"a": strings.Split(s.pgpAPub, "-----END")[0]},
			wantErr: "OpenPGP key block has no end line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			m := map[string][]byte{}
			for k, v := range tt.data {
				m[k] = []byte(v)
			}
			keys, err := TrustedKeysFromSecret(m)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ErrInvalidSource))
				g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
				g.Expect(err.Error()).NotTo(ContainSubstring("AAAA")) // no key material
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(keys.ssh).To(HaveLen(tt.ssh))
			g.Expect(keys.pgp).To(HaveLen(tt.pgp))
		})
	}
}

// TestVerifyFetchesNoTree: from a server that filters, verifying fetches the commit and tag
// alone, so that a large tree costs nothing (here, a tree over the checkout cap verifies).
func TestVerifyFetchesNoTree(t *testing.T) {
	g := NewWithT(t)
	s := newSigners(t)
	f := newFixture(t)
	f.cache = newTestCache(t, CacheOptions{MaxBytes: 4 << 10, MaxFiles: 1})
	gittest.Git(t, f.repo.Dir, "config", "uploadpack.allowFilter", "true")
	sha := f.repo.SignedCommit(t, "main", s.sshA, map[string]string{"big": strings.Repeat("x", 2<<20)})
	f.repo.SignedTag(t, "v1.0.0", sha, s.sshA)
	keys := trusted(t, map[string]string{"k": authorized(s.sshAPub)})
	_, err := verify(t, f, Ref{Tag: "v1.0.0"}, VerifyTagAndHEAD, keys)
	g.Expect(err).NotTo(HaveOccurred())

	_, err = f.cache.Checkout(ctxTimeout(t, time.Minute), f.src, Revision{Ref: "main", Commit: sha})
	g.Expect(err).To(MatchError(ErrLimitExceeded)) // what the same fetch without the filter does
}

// FuzzSignatures: a signature from the repository (hostile input) and a trusted keys Secret
// value are parsed without panicking; a signature that does not verify is a
// VerificationError, and one that verifies names a trusted key.
func FuzzSignatures(f *testing.F) {
	sshSign, _, sshPub := gittest.SSHSigningKey(f)
	pgpSign, pgpPub := gittest.OpenPGPKey(f, "Alice", "alice@example.com")
	keys, err := TrustedKeysFromSecret(map[string][]byte{"k": []byte(pgpPub + authorized(sshPub) + "\n")})
	if err != nil {
		f.Fatal(err)
	}
	payload := []byte("tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nmessage\n")
	for _, sign := range []gittest.SignFunc{sshSign, pgpSign} {
		sig, err := sign(payload)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(sig, payload)
	}
	f.Add("-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n", payload)
	f.Fuzz(func(t *testing.T, sig string, payload []byte) {
		_, _ = TrustedKeysFromSecret(map[string][]byte{"k": []byte(sig)})
		s, err := keys.check("commit x", sig, func(o plumbing.EncodedObject) error {
			w, err := o.Writer()
			if err != nil {
				return err
			}
			_, err = w.Write(payload)
			return errors.Join(err, w.Close())
		})
		var ve *VerificationError
		switch {
		case err == nil && !strings.HasPrefix(s.Key, "SSH key "+ssh.FingerprintSHA256(sshPub)) && !strings.HasPrefix(s.Key, "OpenPGP key "):
			t.Fatalf("verified by %q, not a trusted key", s.Key)
		case err != nil && !errors.As(err, &ve):
			t.Fatalf("not a VerificationError: %v", err)
		}
	})
}

// TestVerifyHostileSigners: through the whole fetch and verification of a commit, a key whose
// allowed-signers line says namespaces="!git,*" does not sign it, and neither does a DSA key,
// even one a key set would hold.
func TestVerifyHostileSigners(t *testing.T) {
	f := newFixture(t)
	ed, dss := ed25519Signer(t), dsaSigner(t)
	signWith := func(s ssh.Signer) gittest.SignFunc {
		return func(payload []byte) (string, error) { return sshsigSign(t, s, "git", "", payload), nil }
	}
	_, pgp := gittest.OpenPGPKey(t, "Other", "other@example.com")
	negated := trusted(t, map[string]string{"pgp": pgp,
		"allowed_signers": `alice namespaces="!git,*" ` + authorized(ed.PublicKey()) + "\n"})
	withDSA := &TrustedKeys{ssh: []sshKey{{key: dss.PublicKey()}}, digest: "dsa"} // as the keys once read

	tests := []struct {
		name    string
		sign    gittest.SignFunc
		keys    *TrustedKeys
		wantErr string
	}{
		{name: "negated namespace", sign: signWith(ed), keys: negated,
			wantErr: "is signed by SSH key " + ssh.FingerprintSHA256(ed.PublicKey()) + ", which is not trusted"},
		{name: "DSA signer", sign: signWith(dss), keys: withDSA, wantErr: "that is not accepted: DSA keys (ssh-dss) are not accepted"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			sha := f.repo.SignedCommit(t, "main", tt.sign, map[string]string{"n": string(rune('a' + i))})
			_, err := verify(t, f, Ref{Branch: "main"}, VerifyHEAD, tt.keys)
			g.Expect(err).To(MatchError(ErrVerificationFailed))
			g.Expect(err.Error()).To(HavePrefix("commit " + sha[:12] + " "))
			g.Expect(err.Error()).To(ContainSubstring(tt.wantErr))
		})
	}
}
