package charts

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources"
)

// cosignSigner is a key cosign signs with, made for a test.
type cosignSigner struct {
	key crypto.Signer
	// ph: an Ed25519 key signs as Ed25519ph (cosign's default for Ed25519 since v2.3).
	ph bool
	// public is its public key as cosign.pub holds it.
	public []byte
}

func newCosignSigner(t testing.TB, kind string) *cosignSigner {
	t.Helper()
	var key crypto.Signer
	var err error
	switch kind {
	case "p256":
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case "p384":
		key, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case "ed25519", "ed25519ph":
		_, key, err = ed25519.GenerateKey(rand.Reader)
	case "rsa":
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	}
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	return &cosignSigner{key: key, ph: kind == "ed25519ph", public: pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})}
}

// sign signs payload as cosign does with the key: ECDSA over the hash of the curve's
// default (SHA-256 for P-256, SHA-384 for P-384), Ed25519 or Ed25519ph, RSA PKCS #1 v1.5
// over SHA-256.
func (s *cosignSigner) sign(t testing.TB, payload []byte) []byte {
	t.Helper()
	var sig []byte
	var err error
	switch k := s.key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve == elliptic.P384() {
			d := sha512.Sum384(payload)
			sig, err = ecdsa.SignASN1(rand.Reader, k, d[:])
		} else {
			d := sha256.Sum256(payload)
			sig, err = ecdsa.SignASN1(rand.Reader, k, d[:])
		}
	case ed25519.PrivateKey:
		if s.ph {
			d := sha512.Sum512(payload)
			sig, err = k.Sign(nil, d[:], &ed25519.Options{Hash: crypto.SHA512})
		} else {
			sig, err = k.Sign(nil, payload, crypto.Hash(0))
		}
	case *rsa.PrivateKey:
		d := sha256.Sum256(payload)
		sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, d[:])
	}
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

// simpleSigning is the payload `cosign sign` signs for the manifest digest of repo.
func simpleSigning(repo name.Repository, digest string) []byte {
	return fmt.Appendf(nil, `{"critical":{"identity":{"docker-reference":%q},"image":{"docker-manifest-digest":%q},"type":"cosign container image signature"},"optional":null}`,
		repo.Name(), digest)
}

// classicSig is one signature of a .sig manifest: the payload and its signature.
type classicSig struct{ payload, sig []byte }

// writeClassic writes the signatures of digest as cosign does: an empty OCI image with a
// simple-signing layer per signature, its signature in an annotation, tagged
// sha256-<hex>.sig.
func writeClassic(t testing.TB, repo name.Repository, digest string, sigs ...classicSig) {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for _, s := range sigs {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:       static.NewLayer(s.payload, cosignSimpleSigningMediaType),
			Annotations: map[string]string{cosignSignatureAnnotation: base64.StdEncoding.EncodeToString(s.sig)},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := remote.Write(repo.Tag(strings.Replace(digest, ":", "-", 1)+".sig"), img); err != nil {
		t.Fatal(err)
	}
}

// statement is the in-toto statement `cosign sign` (v3) signs for digest, of predicate
// type predicateType.
func statement(digest, predicateType string) []byte {
	return fmt.Appendf(nil, `{"_type":"https://in-toto.io/Statement/v1","subject":[{"digest":{"sha256":%q}}],"predicateType":%q,"predicate":{}}`,
		strings.TrimPrefix(digest, "sha256:"), predicateType)
}

// writeBundle attaches a Sigstore bundle to digest as cosign v3 does: a referrer manifest
// of artifact type the bundle's, an empty config, the bundle as its layer, its DSSE
// envelope holding stmt signed by s.
func writeBundle(t testing.TB, repo name.Repository, digest string, s *cosignSigner, stmt []byte) {
	t.Helper()
	sig := s.sign(t, dssePAE(inTotoPayloadType, stmt))
	bundle, _ := json.Marshal(map[string]any{
		"mediaType":            sigstoreBundleMediaType,
		"verificationMaterial": map[string]any{"publicKey": map[string]string{"hint": "test"}, "tlogEntries": []any{}},
		"dsseEnvelope": map[string]any{"payload": base64.StdEncoding.EncodeToString(stmt), "payloadType": inTotoPayloadType,
			"signatures": []map[string]string{{"sig": base64.StdEncoding.EncodeToString(sig), "keyid": ""}}},
	})
	subject, err := remote.Head(repo.Digest(digest))
	if err != nil {
		t.Fatal(err)
	}
	cfg := writeBlob(t, repo, blob{[]byte("{}"), OCIEmptyConfigMediaType, nil})
	cfg.ArtifactType = sigstoreBundleMediaType
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: sigstoreBundleMediaType, Config: cfg,
		Layers:      []v1.Descriptor{writeBlob(t, repo, blob{bundle, sigstoreBundleMediaType, nil})},
		Subject:     &v1.Descriptor{MediaType: subject.MediaType, Digest: subject.Digest, Size: subject.Size},
		Annotations: map[string]string{"dev.sigstore.bundle.content": "dsse-envelope", "dev.sigstore.bundle.predicateType": cosignSignPredicateType}}
	body, _ := json.Marshal(m)
	putRaw(t, repo, "", body, types.OCIManifestSchema1)
}

// pushArtifactAt pushes a small artifact of content under path:tag and returns its digest.
func pushArtifactAt(t testing.TB, reg *ociRegistry, path, tag, content string) string {
	t.Helper()
	return putImage(t, reg.repo(t, path), tag, blob{[]byte("{}"), ArtifactConfigMediaType, nil},
		[]blob{{tarGz(t, map[string]string{"cm.yaml": content}), ArtifactLayerMediaType, nil}}, nil)
}

// TestCosignClassicSignatures: an artifact signed in cosign's classic format by a
// trusted key (ECDSA P-256 or P-384, Ed25519 or Ed25519ph, RSA) verifies; unsigned,
// signed by another key, or signed over another digest is refused as an untrusted commit
// is.
func TestCosignClassicSignatures(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	signers := map[string]*cosignSigner{}
	for _, kind := range []string{"p256", "p384", "ed25519", "ed25519ph", "rsa"} {
		signers[kind] = newCosignSigner(t, kind)
	}
	stranger := newCosignSigner(t, "p256")
	var trusted []byte
	for _, s := range signers {
		trusted = append(trusted, s.public...)
	}
	repo := reg.repo(t, "config/app")
	c := newClient(t)
	verify := func(tag string, keys []byte) (Signer, error) {
		src := artifactSource(reg, "config/app")
		src.Tag, src.CosignKeys = tag, keys
		return c.VerifySigner(t.Context(), src, mustResolve(t, c, src))
	}
	for kind, s := range signers {
		digest := pushArtifactAt(t, reg, "config/app", kind, kind)
		writeClassic(t, repo, digest, classicSig{simpleSigning(repo, digest), s.sign(t, simpleSigning(repo, digest))})
		signer, err := verify(kind, trusted)
		g.Expect(err).NotTo(HaveOccurred(), kind)
		g.Expect(signer.Key).To(MatchRegexp(`^(ECDSA P-256|ECDSA P-384|Ed25519|RSA 2048) key SHA256:[A-Za-z0-9+/]{43}$`), kind)
		only, err := verify(kind, s.public)
		g.Expect(err).NotTo(HaveOccurred(), kind)
		g.Expect(only).To(Equal(signer), kind)
	}
	g.Expect(signers["p384"].public).NotTo(BeEmpty())
	p256, _ := verify("p256", signers["p256"].public)
	g.Expect(p256.Key).To(HavePrefix("ECDSA P-256 key SHA256:"))

	pushArtifactAt(t, reg, "config/app", "unsigned", "unsigned")
	strange := pushArtifactAt(t, reg, "config/app", "stranger", "stranger")
	writeClassic(t, repo, strange, classicSig{simpleSigning(repo, strange), stranger.sign(t, simpleSigning(repo, strange))})
	replayed := pushArtifactAt(t, reg, "config/app", "replayed", "replayed")
	p256Digest := mustResolve(t, c, Source{Kind: KindArtifact, Repository: "oci://" + hostOf(reg.open) + "/config/app", Tag: "p256"}).Digest
	writeClassic(t, repo, replayed, classicSig{simpleSigning(repo, p256Digest), signers["p256"].sign(t, simpleSigning(repo, p256Digest))})
	many := pushArtifactAt(t, reg, "config/app", "many", "many")
	var sigs []classicSig
	for range maxCosignSignatures + 2 {
		sigs = append(sigs, classicSig{simpleSigning(repo, many), stranger.sign(t, simpleSigning(repo, many))})
	}
	writeClassic(t, repo, many, sigs...)
	for tag, reason := range map[string]string{
		"unsigned": "is not signed: no cosign signature (tag sha256-",
		"stranger": "is signed with cosign, but by none of the trusted keys (1 signature checked)",
		"replayed": "that names another digest (" + p256Digest + "), not " + replayed,
		"many":     "(16 signatures checked) (only the first 16 signatures were checked)",
	} {
		_, err := verify(tag, trusted)
		g.Expect(err).To(MatchError(sources.ErrVerificationFailed), tag)
		var ve *sources.VerificationError
		g.Expect(errors.As(err, &ve)).To(BeTrue(), tag)
		g.Expect(ve.Object).To(Equal("artifact "+hostOf(reg.open)+"/config/app:"+tag), tag)
		g.Expect(ve.Reason).To(ContainSubstring(reason), tag)
	}

	// A Helm chart in a registry is verified with cosign keys alike.
	chartDigest := reg.push(t, "small", "1.0.0", packageChart(t, "small", small("1.0.0")), nil)
	chartRepo := reg.repo(t, "charts/small")
	writeClassic(t, chartRepo, chartDigest, classicSig{simpleSigning(chartRepo, chartDigest), signers["p256"].sign(t, simpleSigning(chartRepo, chartDigest))})
	chart := Source{Repository: "oci://" + hostOf(reg.open) + "/charts", Name: "small", Version: "1.0.0", CosignKeys: signers["p256"].public}
	g.Expect(c.Verify(t.Context(), chart, mustResolve(t, c, chart))).To(Succeed())
	chart.CosignKeys = stranger.public
	g.Expect(c.Verify(t.Context(), chart, mustResolve(t, c, chart))).To(MatchError(ContainSubstring("chart small 1.0.0 is signed with cosign, but by none of the trusted keys")))
}

// TestCosignBundles: cosign v3's Sigstore bundle attached as a referrer verifies with a
// trusted key, on a registry with the referrers API and on one without (the tag
// sha256-<hex>); another key's, an attestation of another predicate type and a statement
// of another digest are refused.
func TestCosignBundles(t *testing.T) {
	trusted, stranger := newCosignSigner(t, "p256"), newCosignSigner(t, "ed25519")
	referrers := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true)))
	t.Cleanup(referrers.Close)
	for name, reg := range map[string]*ociRegistry{"fallback tag": newOCIRegistry(t), "referrers API": {open: referrers}} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			repo := reg.repo(t, "config/app")
			signed := pushArtifactAt(t, reg, "config/app", "signed", "signed")
			writeBundle(t, repo, signed, trusted, statement(signed, cosignSignPredicateType))
			for tag, sign := range map[string]func(digest string){
				"stranger":    func(d string) { writeBundle(t, repo, d, stranger, statement(d, cosignSignPredicateType)) },
				"attestation": func(d string) { writeBundle(t, repo, d, trusted, statement(d, "https://slsa.dev/provenance/v1")) },
				"replayed":    func(d string) { writeBundle(t, repo, d, trusted, statement(signed, cosignSignPredicateType)) },
			} {
				sign(pushArtifactAt(t, reg, "config/app", tag, tag))
			}
			c := newClient(t)
			src := artifactSource(reg, "config/app")
			src.CosignKeys = trusted.public
			src.Tag = "signed"
			s, err := c.VerifySigner(t.Context(), src, mustResolve(t, c, src))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s.Key).To(HavePrefix("ECDSA P-256 key SHA256:"))
			for tag, reason := range map[string]string{
				"stranger":    "is signed with cosign, but by none of the trusted keys",
				"attestation": `is an attestation of predicate type "https://slsa.dev/provenance/v1", not a signature`,
				"replayed":    "names another digest (" + signed + ")",
			} {
				src.Tag = tag
				err := c.Verify(t.Context(), src, mustResolve(t, c, src))
				g.Expect(err).To(MatchError(sources.ErrVerificationFailed), tag)
				g.Expect(err).To(MatchError(ContainSubstring(reason)), tag)
			}
		})
	}
}

// TestCosignKeys: keys that are not PEM public keys of a kind cosign signs with are
// refused, without quoting them.
func TestCosignKeys(t *testing.T) {
	g := NewWithT(t)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	private, _ := x509.MarshalPKCS8PrivateKey(ecKey)
	p224, _ := ecdsa.GenerateKey(elliptic.P224(), rand.Reader)
	p224DER, _ := x509.MarshalPKIXPublicKey(p224.Public())
	for message, keys := range map[string][]byte{
		"is a \"PRIVATE KEY\", not a PUBLIC KEY": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: private}),
		"hold no PEM public key":                 []byte("not a key"),
		"curve P-224":                            pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: p224DER}),
		"not a PKIX public key":                  pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("garbage")}),
	} {
		_, err := readCosignKeys(keys)
		g.Expect(err).To(MatchError(sources.ErrInvalidSource), message)
		g.Expect(err).To(MatchError(ContainSubstring(message)))
		g.Expect(err.Error()).NotTo(ContainSubstring(base64.StdEncoding.EncodeToString(private)[:20]))
	}
	k, err := readCosignKeys(append(newCosignSigner(t, "p256").public, newCosignSigner(t, "ed25519").public...))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(k.keys).To(HaveLen(2))
	g.Expect(k.keys[1].name).To(HavePrefix("Ed25519 key SHA256:"))
}
