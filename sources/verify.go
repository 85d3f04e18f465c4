package sources

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/converge-gitops/converge/internal/category"
)

// VerifyMode says which object of a revision must carry a trusted signature. Its values match
// convergev1.VerifyMode.
type VerifyMode string

// The modes of verification.
const (
	// VerifyHEAD checks the commit.
	VerifyHEAD VerifyMode = "HEAD"
	// VerifyTag checks the annotated tag the revision was resolved from.
	VerifyTag VerifyMode = "Tag"
	// VerifyTagAndHEAD checks both.
	VerifyTagAndHEAD VerifyMode = "TagAndHEAD"
)

func (m VerifyMode) commit() bool { return m != VerifyTag }
func (m VerifyMode) tag() bool    { return m == VerifyTag || m == VerifyTagAndHEAD }

// Signer is who signed an object: the key found and the identity the trusted keys give it.
type Signer struct {
	// Object is what was signed, e.g. "commit 0a1b2c3d4e5f" or "tag v1.2.0".
	Object string
	// Key is the OpenPGP fingerprint ("OpenPGP key 0A1B…") or the SSH key fingerprint
	// ("SSH key SHA256:…").
	Key string
	// Identity is the OpenPGP user ID or the principals of the SSH allowed-signers line;
	// empty when the key has none.
	Identity string
}

func (s Signer) String() string {
	msg := s.Object + " signed by " + s.Key
	if s.Identity != "" {
		msg += " (" + s.Identity + ")"
	}
	return msg
}

// Verification is a revision whose signatures were verified.
type Verification struct {
	// Signers has one entry per object verified: the tag first, then the commit.
	Signers []Signer
}

func (v Verification) String() string {
	parts := make([]string, len(v.Signers))
	for i, s := range v.Signers {
		parts[i] = s.String()
	}
	return strings.Join(parts, "; ")
}

// VerificationError says why a revision is not trusted: an object is not signed, is signed by
// a key that is not trusted, or its signature does not verify. It matches
// ErrVerificationFailed.
type VerificationError struct {
	// Object is what failed, e.g. "commit 0a1b2c3d4e5f".
	Object string
	// Key is the key the signature names, when one could be read.
	Key string
	// Reason says what is wrong.
	Reason string
}

func (e *VerificationError) Error() string { return e.Object + " " + e.Reason }

// Is makes errors.Is(err, ErrVerificationFailed) true.
func (e *VerificationError) Is(target error) bool { return target == ErrVerificationFailed }

// FailureCategory is ErrVerificationFailed's: the revision is refused.
func (e *VerificationError) FailureCategory() (category.Category, string) {
	return category.FailRevision, ""
}

// verifyObjects checks the signatures mode asks for: tag is nil when the revision was not
// resolved from an annotated tag.
func verifyObjects(keys *TrustedKeys, mode VerifyMode, commit *object.Commit, tag *object.Tag, ref string) (Verification, error) {
	var v Verification
	if mode.tag() {
		if tag == nil {
			return v, &VerificationError{Object: refObject(ref),
				Reason: "is not an annotated tag: only an annotated tag carries a signature (verify.mode " + string(mode) + ")"}
		}
		if tag.Name != ref {
			// A signed tag of another release moved under this name would replay it.
			return v, &VerificationError{Object: "tag " + ref,
				Reason: fmt.Sprintf("points at a tag object named %q: a signed tag is trusted only under its own name", tag.Name)}
		}
		s, err := keys.check("tag "+tag.Name, tag.PGPSignature, func(o plumbing.EncodedObject) error { return tag.EncodeWithoutSignature(o) })
		if err != nil {
			return v, err
		}
		v.Signers = append(v.Signers, s)
	}
	if mode.commit() {
		s, err := keys.check("commit "+short(commit.Hash.String()), commit.PGPSignature,
			func(o plumbing.EncodedObject) error { return commit.EncodeWithoutSignature(o) })
		if err != nil {
			return v, err
		}
		v.Signers = append(v.Signers, s)
	}
	return v, nil
}

func refObject(ref string) string {
	if ref == "" {
		return "the revision"
	}
	return "ref " + ref
}

func short(sha string) string { return sha[:min(12, len(sha))] }

// check verifies the armored signature sig of the object encode writes without it.
func (k *TrustedKeys) check(obj, sig string, encode func(plumbing.EncodedObject) error) (Signer, error) {
	if strings.TrimSpace(sig) == "" {
		return Signer{}, &VerificationError{Object: obj, Reason: "is not signed"}
	}
	if countBlocks(sig) > 1 {
		return Signer{}, &VerificationError{Object: obj, Reason: "carries more than one signature"}
	}
	payload := &plumbing.MemoryObject{}
	if err := encode(payload); err != nil {
		return Signer{}, fmt.Errorf("%w: encoding %s: %v", ErrFetchFailed, obj, err)
	}
	r, err := payload.Reader()
	if err != nil {
		return Signer{}, fmt.Errorf("%w: encoding %s: %v", ErrFetchFailed, obj, err)
	}
	msg, err := io.ReadAll(r)
	if err != nil {
		return Signer{}, fmt.Errorf("%w: encoding %s: %v", ErrFetchFailed, obj, err)
	}
	switch {
	case strings.HasPrefix(sig, "-----BEGIN PGP SIGNATURE-----"):
		return k.checkPGP(obj, msg, sig)
	case strings.HasPrefix(sig, sshSigBegin):
		return k.checkSSH(obj, msg, sig)
	}
	return Signer{}, &VerificationError{Object: obj, Reason: "carries a signature of a kind not supported (only OpenPGP and SSH are)"}
}

func countBlocks(sig string) int {
	n := 0
	for _, line := range strings.Split(sig, "\n") {
		if strings.HasPrefix(line, "-----BEGIN ") {
			n++
		}
	}
	return n
}

func (k *TrustedKeys) checkPGP(obj string, msg []byte, sig string) (Signer, error) {
	entity, err := openpgp.CheckArmoredDetachedSignature(k.pgp, bytes.NewReader(msg), strings.NewReader(sig), nil)
	if err != nil {
		key := pgpIssuer(sig)
		if key == "" {
			key = "an OpenPGP key that the signature does not name"
		}
		reason := "has a bad OpenPGP signature by " + key + ": " + err.Error()
		if errors.Is(err, pgperrors.ErrUnknownIssuer) {
			reason = "is signed by " + key + ", which is not trusted"
		}
		return Signer{}, &VerificationError{Object: obj, Key: key, Reason: reason}
	}
	s := Signer{Object: obj, Key: fmt.Sprintf("OpenPGP key %X", entity.PrimaryKey.Fingerprint)}
	if id := entity.PrimaryIdentity(); id != nil {
		s.Identity = id.Name
	}
	return s, nil
}

// pgpIssuer names the key an OpenPGP signature says it was made with.
func pgpIssuer(sig string) string {
	block, err := armor.Decode(strings.NewReader(sig))
	if err != nil {
		return ""
	}
	p, err := packet.Read(block.Body)
	if err != nil {
		return ""
	}
	s, ok := p.(*packet.Signature)
	switch {
	case !ok:
		return ""
	case len(s.IssuerFingerprint) > 0:
		return fmt.Sprintf("OpenPGP key %X", s.IssuerFingerprint)
	case s.IssuerKeyId != nil:
		return fmt.Sprintf("OpenPGP key ID %016X", *s.IssuerKeyId)
	}
	return ""
}

func (k *TrustedKeys) checkSSH(obj string, msg []byte, armored string) (Signer, error) {
	sig, err := parseSSHSignature(armored)
	if err != nil {
		return Signer{}, &VerificationError{Object: obj, Reason: "has an unreadable SSH signature: " + err.Error()}
	}
	fp := "SSH key " + ssh.FingerprintSHA256(sig.key)
	if err := sig.acceptedAlgorithm(); err != nil {
		return Signer{}, &VerificationError{Object: obj, Key: fp, Reason: "has an SSH signature by " + fp + " that is not accepted: " + err.Error()}
	}
	var trusted *sshKey
	for i := range k.ssh {
		if bytes.Equal(k.ssh[i].key.Marshal(), sig.key.Marshal()) {
			trusted = &k.ssh[i]
			break
		}
	}
	if trusted == nil {
		return Signer{}, &VerificationError{Object: obj, Key: fp, Reason: "is signed by " + fp + ", which is not trusted"}
	}
	if err := sig.verify(msg); err != nil {
		return Signer{}, &VerificationError{Object: obj, Key: fp, Reason: "has a bad SSH signature by " + fp + ": " + err.Error()}
	}
	return Signer{Object: obj, Key: fp, Identity: trusted.principals}, nil
}
