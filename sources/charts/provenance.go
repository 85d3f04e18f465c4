package charts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"
	pgperrors "github.com/ProtonMail/go-crypto/openpgp/errors"
	"sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/sources"
)

// Signer is who signed a chart's provenance, or an OCI chart or artifact with cosign.
type Signer struct {
	// Key is the OpenPGP fingerprint, "OpenPGP key 0A1B…", or the trusted cosign key,
	// "ECDSA P-256 key SHA256:<base64 of the sha256 of its DER>".
	Key string
	// Identity is the OpenPGP key's primary user ID; empty when it has none (a cosign key
	// has none).
	Identity string
}

// keyring is the trusted OpenPGP keys of a source.
type keyring struct {
	keys   openpgp.EntityList
	digest string
}

const pgpKeyBegin = "-----BEGIN PGP PUBLIC KEY BLOCK-----"

// readKeyring reads every ASCII-armored public key block of data (blocks may follow each
// other, as the values of a Secret concatenated do). Errors never quote the keys.
func readKeyring(data []byte) (*keyring, error) {
	sum := sha256.Sum256(data)
	k := &keyring{digest: hex.EncodeToString(sum[:])}
	text := string(data)
	for n := 1; ; n++ {
		i := strings.Index(text, pgpKeyBegin)
		if i < 0 {
			break
		}
		text = text[i:]
		end := strings.Index(text[len(pgpKeyBegin):], pgpKeyBegin)
		block := text
		if end >= 0 {
			block, text = text[:len(pgpKeyBegin)+end], text[len(pgpKeyBegin)+end:]
		} else {
			text = ""
		}
		list, err := openpgp.ReadArmoredKeyRing(strings.NewReader(block))
		if err != nil {
			return nil, invalid("the trusted keys' OpenPGP key block %d does not read: %v", n, err)
		}
		k.keys = append(k.keys, list...)
	}
	if len(k.keys) == 0 {
		return nil, invalid("the trusted keys hold no ASCII-armored OpenPGP public key")
	}
	return k, nil
}

// provenance is what a verified provenance file says.
type provenance struct {
	name, version string
	files         map[string]string
}

// checkProvenance verifies prov, a Helm provenance file, for the chart name at version
// whose archive, filename, has the sha256 archiveHex.
func checkProvenance(ring *keyring, prov []byte, name, version, filename, archiveHex string) (Signer, error) {
	obj := "chart " + name + " " + version
	block, _ := clearsign.Decode(prov)
	if block == nil || block.ArmoredSignature == nil {
		return Signer{}, &sources.VerificationError{Object: obj, Reason: "has a provenance file that is not an OpenPGP clearsigned message"}
	}
	entity, err := openpgp.CheckDetachedSignature(ring.keys, bytes.NewReader(block.Bytes), block.ArmoredSignature.Body, nil)
	if err != nil {
		reason := "has a provenance file whose signature does not verify: " + err.Error()
		if errors.Is(err, pgperrors.ErrUnknownIssuer) {
			reason = "has a provenance file signed by a key that is not trusted"
		}
		return Signer{}, &sources.VerificationError{Object: obj, Reason: reason}
	}
	s := Signer{Key: fmt.Sprintf("OpenPGP key %X", entity.PrimaryKey.Fingerprint)}
	if id := entity.PrimaryIdentity(); id != nil {
		s.Identity = id.Name
	}
	p, err := parseProvenance(block.Plaintext)
	if err != nil {
		return Signer{}, &sources.VerificationError{Object: obj, Key: s.Key, Reason: "has a provenance file that does not parse: " + err.Error()}
	}
	if p.name != name || p.version != version {
		return Signer{}, &sources.VerificationError{Object: obj, Key: s.Key,
			Reason: fmt.Sprintf("has a provenance file of chart %s %s", p.name, p.version)}
	}
	sum, ok := p.files[filename]
	if !ok {
		return Signer{}, &sources.VerificationError{Object: obj, Key: s.Key, Reason: "has a provenance file that names no " + filename}
	}
	if sum != "sha256:"+archiveHex {
		return Signer{}, &sources.VerificationError{Object: obj, Key: s.Key,
			Reason: fmt.Sprintf("does not match its provenance file: the archive is sha256:%s, the provenance names %s", archiveHex, sum)}
	}
	return s, nil
}

// parseProvenance reads the message of a provenance file: the chart's Chart.yaml, the
// YAML document end "...", then the files and their sums.
func parseProvenance(msg []byte) (provenance, error) {
	parts := bytes.Split(msg, []byte("\n...\n"))
	if len(parts) != 2 {
		return provenance{}, errors.New("not the Chart.yaml and the files' sums separated by \"...\"")
	}
	var meta struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	if err := yaml.Unmarshal(parts[0], &meta); err != nil {
		return provenance{}, fmt.Errorf("the chart's metadata: %v", err)
	}
	var sums struct {
		Files map[string]string `json:"files"`
	}
	if err := yaml.Unmarshal(parts[1], &sums); err != nil {
		return provenance{}, fmt.Errorf("the files' sums: %v", err)
	}
	return provenance{name: meta.Name, version: meta.Version, files: sums.Files}, nil
}

// verifyHTTP reads <archive URL>.prov and checks it.
func (c *Client) verifyHTTP(ctx context.Context, src Source, r Resolved, ring *keyring) (Signer, error) {
	op := "verify chart " + src.Name + " " + r.Version + " of"
	u, err := c.archiveURL(ctx, src, r)
	if err != nil {
		return Signer{}, wrap(ctx, op, src, err)
	}
	prov, err := c.readProv(ctx, src, u+".prov")
	if err != nil {
		var se *statusError
		if errors.As(err, &se) && se.code == http.StatusNotFound {
			return Signer{}, &sources.VerificationError{Object: "chart " + src.chartName() + " " + r.Version,
				Reason: "has no provenance file (" + path.Base(u) + ".prov)"}
		}
		return Signer{}, wrap(ctx, op, src, err)
	}
	filename := src.chartName() + "-" + r.Version + ".tgz"
	s, err := checkProvenance(ring, prov, src.chartName(), r.Version, filename, hexDigest(r.Digest))
	if err != nil && strings.Contains(err.Error(), "names no "+filename) && path.Base(u) != filename {
		s, err = checkProvenance(ring, prov, src.chartName(), r.Version, path.Base(u), hexDigest(r.Digest))
	}
	return s, err
}

func (c *Client) readProv(ctx context.Context, src Source, u string) ([]byte, error) {
	resp, err := c.get(ctx, src, u, "the provenance file", provBytes)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, provBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > provBytes {
		return nil, limitErr("the provenance file", provBytes)
	}
	return data, nil
}

// verifyOCI reads the provenance layer of the manifest r.Digest names and checks it
// against the manifest's chart layer.
func (c *Client) verifyOCI(ctx context.Context, src Source, r Resolved, ring *keyring) (Signer, error) {
	op := "verify chart " + src.Name + " " + r.Version + " of"
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return Signer{}, wrap(ctx, op, src, err)
	}
	m, err := c.manifest(repo, r.Digest, opts)
	if err != nil {
		return Signer{}, wrap(ctx, op, src, err)
	}
	chart, ok := layer(m, ChartLayerMediaType, legacyChartLayerMediaType)
	if !ok {
		return Signer{}, wrap(ctx, op, src, invalid("the manifest %s has no chart layer", r.Digest))
	}
	provLayer, ok := layer(m, ProvLayerMediaType)
	if !ok {
		return Signer{}, &sources.VerificationError{Object: "chart " + src.chartName() + " " + r.Version,
			Reason: "has no provenance layer (" + ProvLayerMediaType + ")"}
	}
	prov, err := readBlob(repo, provLayer, provBytes, opts)
	if err != nil {
		return Signer{}, wrap(ctx, op, src, err)
	}
	filename := src.chartName() + "-" + r.Version + ".tgz"
	return checkProvenance(ring, prov, src.chartName(), r.Version, filename, chart.Digest.Hex)
}
