package charttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// CosignKey is an ECDSA P-256 key that signs artifacts as `cosign sign --key` does.
type CosignKey struct {
	key *ecdsa.PrivateKey
}

// NewCosignKey makes a key.
func NewCosignKey() (*CosignKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &CosignKey{key: k}, nil
}

// PublicPEM is the public key as cosign.pub holds it.
func (k *CosignKey) PublicPEM() ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(&k.key.PublicKey)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// Sign signs the artifact of digest in repository (oci://host:port/path, plain HTTP on
// loopback) in cosign's classic format: a simple-signing payload naming the digest, in
// an image tagged sha256-<hex>.sig, its signature in the layer's annotation.
func (k *CosignKey) Sign(repository, digest string) error {
	repo, err := name.NewRepository(strings.TrimPrefix(repository, "oci://"))
	if err != nil {
		return err
	}
	payload := fmt.Appendf(nil, `{"critical":{"identity":{"docker-reference":%q},"image":{"docker-manifest-digest":%q},"type":"cosign container image signature"},"optional":null}`,
		repo.Name(), digest)
	sum := sha256.Sum256(payload)
	sig, err := ecdsa.SignASN1(rand.Reader, k.key, sum[:])
	if err != nil {
		return err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:       static.NewLayer(payload, "application/vnd.dev.cosign.simplesigning.v1+json"),
		Annotations: map[string]string{"dev.cosignproject.cosign/signature": base64.StdEncoding.EncodeToString(sig)},
	})
	if err != nil {
		return err
	}
	return remote.Write(repo.Tag(strings.Replace(digest, ":", "-", 1)+".sig"), img)
}
