package charts

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/converge-gitops/converge/sources"
)

// What cosign writes.
const (
	// cosign's classic format: the signature manifest's layers, their signature annotation
	// and the type their simple-signing payload claims.
	cosignSimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSignatureAnnotation    = "dev.cosignproject.cosign/signature"
	cosignSignatureType          = "cosign container image signature"
	// cosign v3's: a Sigstore bundle attached as a referrer, whose DSSE envelope holds an
	// in-toto statement.
	sigstoreBundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	sigstoreBundlePrefix    = "application/vnd.dev.sigstore.bundle"
	inTotoPayloadType       = "application/vnd.in-toto+json"
	cosignSignPredicateType = "https://sigstore.dev/cosign/sign/v1"
)

// Bounds of what a cosign verification reads (the manifests read are capped at
// manifestBytes).
const (
	// maxCosignSignatures caps the signatures checked: layers of the signature manifest,
	// bundles attached, signatures of one envelope.
	maxCosignSignatures = 16
	// cosignPayloadBytes caps a simple-signing payload, and a bundle.
	cosignPayloadBytes = 256 << 10
	// maxCosignKeys caps the trusted keys.
	maxCosignKeys = 64
)

// cosignKey is a trusted cosign public key.
type cosignKey struct {
	pub crypto.PublicKey
	// name is what Signer.Key says: "ECDSA P-256 key SHA256:<base64 of the sha256 of the
	// key's DER>".
	name string
}

// cosignKeyring is the trusted cosign keys of a source.
type cosignKeyring struct {
	keys   []cosignKey
	digest string
}

// readCosignKeys reads the PEM "PUBLIC KEY" blocks of data (PKIX: ECDSA P-256, P-384 or
// P-521, Ed25519, RSA of 2048 bits or more), as `cosign generate-key-pair` writes
// cosign.pub; blocks may follow each other. Errors never quote the keys.
func readCosignKeys(data []byte) (*cosignKeyring, error) {
	sum := sha256.Sum256(data)
	k := &cosignKeyring{digest: hex.EncodeToString(sum[:])}
	rest := data
	for n := 1; ; n++ {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "PUBLIC KEY" {
			return nil, invalid("the cosign keys' PEM block %d is a %q, not a PUBLIC KEY", n, excerpt(block.Type, 40))
		}
		if n > maxCosignKeys {
			return nil, invalid("more than %d cosign keys", maxCosignKeys)
		}
		key, err := parseCosignKey(block.Bytes)
		if err != nil {
			return nil, invalid("the cosign keys' PEM block %d: %v", n, err)
		}
		k.keys = append(k.keys, key)
	}
	if len(k.keys) == 0 {
		return nil, invalid("the cosign keys hold no PEM public key (-----BEGIN PUBLIC KEY-----)")
	}
	return k, nil
}

// parseCosignKey reads a PKIX public key of a kind cosign signs with.
func parseCosignKey(der []byte) (cosignKey, error) {
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return cosignKey{}, fmt.Errorf("not a PKIX public key: %v", err)
	}
	var alg string
	switch p := pub.(type) {
	case *ecdsa.PublicKey:
		switch p.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
			alg = "ECDSA " + p.Curve.Params().Name
		default:
			return cosignKey{}, fmt.Errorf("an ECDSA key of curve %s: P-256, P-384 or P-521 only", p.Curve.Params().Name)
		}
	case ed25519.PublicKey:
		alg = "Ed25519"
	case *rsa.PublicKey:
		if p.N.BitLen() < 2048 {
			return cosignKey{}, fmt.Errorf("an RSA key of %d bits: 2048 at least", p.N.BitLen())
		}
		alg = fmt.Sprintf("RSA %d", p.N.BitLen())
	default:
		return cosignKey{}, fmt.Errorf("a %T: ECDSA, Ed25519 and RSA keys only", pub)
	}
	fp := sha256.Sum256(der)
	return cosignKey{pub: pub, name: alg + " key SHA256:" + base64.RawStdEncoding.EncodeToString(fp[:])}, nil
}

// verifies reports whether sig is the key's signature of payload, as cosign makes and
// checks them: ECDSA (ASN.1) over the payload's SHA-256 — what `cosign verify --key`
// checks by default — or over the hash cosign signs with for the curve (SHA-384 for P-384,
// SHA-512 for P-521); Ed25519 over the payload, or Ed25519ph (cosign's default for
// Ed25519 keys since v2.3); RSA PKCS #1 v1.5 or PSS over its SHA-256.
func (k cosignKey) verifies(payload, sig []byte) bool {
	switch pub := k.pub.(type) {
	case *ecdsa.PublicKey:
		d256 := sha256.Sum256(payload)
		if ecdsa.VerifyASN1(pub, d256[:], sig) {
			return true
		}
		switch pub.Curve {
		case elliptic.P384():
			d := sha512.Sum384(payload)
			return ecdsa.VerifyASN1(pub, d[:], sig)
		case elliptic.P521():
			d := sha512.Sum512(payload)
			return ecdsa.VerifyASN1(pub, d[:], sig)
		}
	case ed25519.PublicKey:
		if ed25519.Verify(pub, payload, sig) {
			return true
		}
		d := sha512.Sum512(payload)
		return ed25519.VerifyWithOptions(pub, d[:], sig, &ed25519.Options{Hash: crypto.SHA512}) == nil
	case *rsa.PublicKey:
		d := sha256.Sum256(payload)
		return rsa.VerifyPKCS1v15(pub, crypto.SHA256, d[:], sig) == nil || rsa.VerifyPSS(pub, crypto.SHA256, d[:], sig, nil) == nil
	}
	return false
}

// signedBy is the trusted key whose signature of payload sig is.
func (k *cosignKeyring) signedBy(payload, sig []byte) (cosignKey, bool) {
	for _, key := range k.keys {
		if key.verifies(payload, sig) {
			return key, true
		}
	}
	return cosignKey{}, false
}

// cosignCheck is one verification of the cosign signatures of a manifest: what it found
// so far, to say why it failed.
type cosignCheck struct {
	keys   *cosignKeyring
	repo   name.Repository
	opts   []remote.Option
	digest string
	// checked counts the signatures read; more says that some were left unread.
	checked int
	more    bool
	// untrusted counts the signatures by no trusted key.
	untrusted int
	// wrong says why the first signature by a trusted key that does not vouch for the
	// digest does not.
	wrong, wrongKey string
	// unreadable says why the first unreadable signature is.
	unreadable string
}

// verifyCosign checks that the manifest r.Digest names is signed with cosign by a key of
// keys, in the classic format or in a Sigstore bundle.
func (c *Client) verifyCosign(ctx context.Context, src Source, r Resolved, keys *cosignKeyring) (Signer, error) {
	op := src.op("verify", "of")
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return Signer{}, wrap(ctx, op, src, err)
	}
	v := &cosignCheck{keys: keys, repo: repo, opts: opts, digest: r.Digest}
	for _, format := range []func() (Signer, bool, error){v.classic, v.bundles} {
		s, ok, err := format()
		if err != nil {
			return Signer{}, wrap(ctx, op, src, err)
		}
		if ok {
			return s, nil
		}
	}
	return Signer{}, v.failure(src.object(r))
}

// object names what r is of src in a verification's error: "chart podinfo 6.5.0",
// "artifact ghcr.io/org/app:v1.2.0", "artifact ghcr.io/org/app@sha256:…".
func (s Source) object(r Resolved) string {
	if !s.IsArtifact() {
		return "chart " + s.chartName() + " " + r.Version
	}
	repo := strings.TrimSuffix(strings.TrimPrefix(s.Repository, "oci://"), "/")
	if r.Version == digestVersion || r.Version == "" {
		return "artifact " + repo + "@" + r.Digest
	}
	return "artifact " + repo + ":" + r.Version
}

// failure says why no signature vouched for the manifest.
func (v *cosignCheck) failure(object string) error {
	e := &sources.VerificationError{Object: object}
	switch {
	case v.wrong != "":
		e.Key, e.Reason = v.wrongKey, "has a cosign signature by "+v.wrongKey+" that "+v.wrong
	case v.untrusted > 0:
		e.Reason = fmt.Sprintf("is signed with cosign, but by none of the trusted keys (%s checked)", signatures(v.untrusted))
	case v.unreadable != "":
		e.Reason = "has no cosign signature that could be read: " + v.unreadable
	default:
		e.Reason = "is not signed: no cosign signature (tag " + sigTag(v.digest) + ") nor Sigstore bundle (referrer of " +
			sigstoreBundleMediaType + ") is attached to " + v.digest
	}
	if v.more {
		e.Reason += fmt.Sprintf(" (only the first %d signatures were checked)", maxCosignSignatures)
	}
	return e
}

// signatures is "1 signature", "2 signatures"...
func signatures(n int) string {
	if n == 1 {
		return "1 signature"
	}
	return fmt.Sprintf("%d signatures", n)
}

// sigTag is the tag of the classic cosign signatures of digest.
func sigTag(digest string) string { return strings.Replace(digest, ":", "-", 1) + ".sig" }

// take counts one more signature read; false when the cap is reached.
func (v *cosignCheck) take() bool {
	if v.checked >= maxCosignSignatures {
		v.more = true
		return false
	}
	v.checked++
	return true
}

// classic reads the signatures of the tag sha256-<hex>.sig: layers of simple-signing
// payloads, each with its signature in an annotation.
func (v *cosignCheck) classic() (Signer, bool, error) {
	m, _, err := getManifest(v.repo.Tag(sigTag(v.digest)), v.opts)
	if code, ok := httpStatus(err); ok && code == http.StatusNotFound {
		return Signer{}, false, nil
	}
	if err != nil {
		return Signer{}, false, err
	}
	for _, l := range m.Layers {
		if l.MediaType != cosignSimpleSigningMediaType || !v.take() {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(l.Annotations[cosignSignatureAnnotation])
		if err != nil || len(sig) == 0 {
			v.unreadable = "a layer of " + sigTag(v.digest) + " has no base64 signature annotation (" + cosignSignatureAnnotation + ")"
			continue
		}
		payload, err := v.blob(l)
		if err != nil {
			return Signer{}, false, err
		}
		if s, ok := v.vouches(payload, sig, checkSimpleSigning); ok {
			return s, true, nil
		}
	}
	return Signer{}, false, nil
}

// vouches checks sig, a signature of payload, and what the payload says of the digest
// (claims).
func (v *cosignCheck) vouches(payload, sig []byte, claims func(payload []byte, digest string) error) (Signer, bool) {
	key, ok := v.keys.signedBy(payload, sig)
	if !ok {
		v.untrusted++
		return Signer{}, false
	}
	if err := claims(payload, v.digest); err != nil {
		if v.wrong == "" {
			v.wrong, v.wrongKey = err.Error(), key.name
		}
		return Signer{}, false
	}
	return Signer{Key: key.name}, true
}

// blob reads a small blob of the repository, at most cosignPayloadBytes, its digest
// checked.
func (v *cosignCheck) blob(d v1.Descriptor) ([]byte, error) {
	data, err := readBlob(v.repo, d, cosignPayloadBytes, v.opts)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(data); d.Digest.Algorithm != "sha256" || hex.EncodeToString(sum[:]) != d.Digest.Hex {
		return nil, fmt.Errorf("%w: the blob %s is not what its digest names", sources.ErrFetchFailed, d.Digest)
	}
	return data, nil
}

// checkSimpleSigning checks that a simple-signing payload is a cosign signature of digest.
func checkSimpleSigning(payload []byte, digest string) error {
	var ss struct {
		Critical struct {
			Image struct {
				Digest string `json:"docker-manifest-digest"`
			} `json:"image"`
			Type string `json:"type"`
		} `json:"critical"`
	}
	switch {
	case json.Unmarshal(payload, &ss) != nil:
		return fmt.Errorf("has a payload that is not simple-signing JSON")
	case ss.Critical.Type != cosignSignatureType:
		return fmt.Errorf("is of type %q, not %q", excerpt(ss.Critical.Type, 80), cosignSignatureType)
	case ss.Critical.Image.Digest != digest:
		return fmt.Errorf("names another digest (%s), not %s", excerpt(ss.Critical.Image.Digest, 80), digest)
	}
	return nil
}

// bundles reads the Sigstore bundles attached to the manifest as referrers (the
// referrers API, or the tag sha256-<hex> of registries without it). A registry that
// reports a referrer's config media type as its artifact type (the empty config) is read
// too: the manifest's own artifact type decides.
func (v *cosignCheck) bundles() (Signer, bool, error) {
	idx, err := remote.Referrers(v.repo.Digest(v.digest), v.opts...)
	if code, ok := httpStatus(err); ok && code == http.StatusNotFound {
		return Signer{}, false, nil
	}
	if err != nil {
		return Signer{}, false, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return Signer{}, false, err
	}
	read := 0
	for _, d := range im.Manifests {
		switch d.ArtifactType {
		case sigstoreBundleMediaType, "", OCIEmptyConfigMediaType:
		default:
			continue
		}
		if read++; read > 2*maxCosignSignatures {
			v.more = true
			break
		}
		m, _, err := getManifest(v.repo.Digest(d.Digest.String()), v.opts)
		if err != nil {
			return Signer{}, false, err
		}
		if m.ArtifactType != sigstoreBundleMediaType && m.Config.ArtifactType != sigstoreBundleMediaType {
			continue // another kind of referrer
		}
		if !v.take() {
			break
		}
		if s, ok, err := v.bundle(m); ok || err != nil {
			return s, ok, err
		}
	}
	return Signer{}, false, nil
}

// bundle checks the bundle layer of a referrer's manifest m.
func (v *cosignCheck) bundle(m *v1.Manifest) (Signer, bool, error) {
	for _, l := range m.Layers {
		if !strings.HasPrefix(string(l.MediaType), sigstoreBundlePrefix) {
			continue
		}
		data, err := v.blob(l)
		if err != nil {
			return Signer{}, false, err
		}
		s, ok := v.envelope(data)
		return s, ok, nil
	}
	v.unreadable = "a Sigstore bundle referrer has no bundle layer"
	return Signer{}, false, nil
}

// envelope checks the DSSE envelope of a bundle: a signature by a trusted key of its
// payload's pre-authentication encoding, the payload an in-toto statement naming the
// digest.
func (v *cosignCheck) envelope(data []byte) (Signer, bool) {
	var b struct {
		DSSE *struct {
			Payload     string `json:"payload"`
			PayloadType string `json:"payloadType"`
			Signatures  []struct {
				Sig string `json:"sig"`
			} `json:"signatures"`
		} `json:"dsseEnvelope"`
	}
	if err := json.Unmarshal(data, &b); err != nil || b.DSSE == nil {
		v.unreadable = "a Sigstore bundle holds no DSSE envelope (a message signature is for blobs, not images)"
		return Signer{}, false
	}
	payload, err := base64.StdEncoding.DecodeString(b.DSSE.Payload)
	if err != nil || b.DSSE.PayloadType != inTotoPayloadType {
		v.unreadable = "a Sigstore bundle's envelope holds no base64 in-toto statement"
		return Signer{}, false
	}
	pae := dssePAE(b.DSSE.PayloadType, payload)
	for i, s := range b.DSSE.Signatures {
		if i > 0 && !v.take() {
			break
		}
		sig, err := base64.StdEncoding.DecodeString(s.Sig)
		if err != nil {
			v.unreadable = "a Sigstore bundle's signature is not base64"
			continue
		}
		if signer, ok := v.vouches(pae, sig, func([]byte, string) error { return checkStatement(payload, v.digest) }); ok {
			return signer, true
		}
	}
	return Signer{}, false
}

// dssePAE is the pre-authentication encoding a DSSE signature signs.
func dssePAE(payloadType string, payload []byte) []byte {
	var b bytes.Buffer
	_, _ = fmt.Fprintf(&b, "DSSEv1 %d %s %d ", len(payloadType), payloadType, len(payload))
	b.Write(payload)
	return b.Bytes()
}

// checkStatement checks that an in-toto statement is cosign's signature of digest.
func checkStatement(payload []byte, digest string) error {
	var st struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Digest map[string]string `json:"digest"`
		} `json:"subject"`
	}
	switch {
	case json.Unmarshal(payload, &st) != nil:
		return fmt.Errorf("holds a statement that is not in-toto JSON")
	case st.PredicateType != cosignSignPredicateType:
		return fmt.Errorf("is an attestation of predicate type %q, not a signature (%s)", excerpt(st.PredicateType, 80), cosignSignPredicateType)
	}
	var named []string
	for _, s := range st.Subject {
		if "sha256:"+s.Digest["sha256"] == digest {
			return nil
		}
		named = append(named, "sha256:"+s.Digest["sha256"])
	}
	return fmt.Errorf("names another digest (%s), not %s", excerpt(strings.Join(named, ", "), 160), digest)
}
