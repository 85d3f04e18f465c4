package convert

import (
	"net/url"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// ociArtifact converts a Flux OCIRepository that a Kustomization reads into spec.oci; its
// notes go on c's object. False when its URL cannot be carried over.
func (c *conv) ociArtifact(repo *unstructured.Unstructured) (*convergev1.OCISource, bool) {
	rc := c.at(keyOf(repo).String(), "spec.", "spec.oci.")
	spec := asMap(repo.Object["spec"])
	if why := ociURLRefusal(str(spec, "url")); why != "" {
		rc.lost("url", "", why)
		return nil, false
	}
	src := &convergev1.OCISource{}
	mapFields(rc, spec, src, ociArtifactRules, ociArtifactLost)
	if src.Ref == (convergev1.OCIRef{}) {
		src.Ref.Tag = "latest"
		rc.note("ref", "OCIRepository without spec.ref: Flux follows the tag latest, and so does this SyncTarget")
	}
	return src, true
}

// ociURLRefusal says why a registry URL of the input is not carried over, "" when it is:
// it is no oci:// URL, or it holds credentials, which would be written into the output.
// The URL is never quoted.
func ociURLRefusal(raw string) string {
	if !strings.HasPrefix(raw, "oci://") {
		return "not an oci:// URL: an OCI artifact is read from oci://host/repository"
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Host == "":
		return "not a URL of the form oci://host/repository"
	case u.User != nil:
		return "the URL holds credentials, which converge does not copy into its output: take them out of the URL, and put them in the Secret of secretRef"
	}
	return ""
}

var ociArtifactRules = []rule[*convergev1.OCISource]{
	{"url", func(_ *conv, v any, s *convergev1.OCISource) { s.URL = asString(v) }},
	{"ref", func(c *conv, v any, s *convergev1.OCISource) { s.Ref = c.fluxOCIRef(asMap(v)) }},
	{"layerSelector", func(c *conv, v any, s *convergev1.OCISource) { s.LayerMediaType = c.layerSelector(asMap(v)) }},
	{"secretRef", func(_ *conv, v any, s *convergev1.OCISource) { s.SecretRef = localRef(v) }},
	{"interval", func(c *conv, v any, s *convergev1.OCISource) { s.Interval = c.duration("interval", v) }},
	{"verify", func(c *conv, v any, s *convergev1.OCISource) { s.Verify = c.fluxOCIVerify(asMap(v)) }},
	{"provider", func(c *conv, v any, _ *convergev1.OCISource) {
		if p := asString(v); p != "" && p != "generic" {
			c.lost("provider", "secretRef", "converge authenticates to a registry with the Secret of secretRef only, not with a cloud provider's workload identity: keep a registry token in a Secret (refreshed by a CronJob or External Secrets) and name it in secretRef")
		}
	}},
	{"insecure", func(c *conv, v any, _ *convergev1.OCISource) {
		if asBool(v) {
			c.lost("insecure", "url", "converge reaches a registry over TLS only (plain HTTP to a registry on a loopback address aside)")
		}
	}},
	noteOnly[*convergev1.OCISource]("timeout", "", "converge bounds a fetch with its own timeouts"),
	noteOnly[*convergev1.OCISource]("suspend", "", "suspend the SyncTarget instead (spec.suspend)"),
}

var ociArtifactLost = map[string]string{
	"ignore":             "converge renders every file of spec.path; move what must be left out of the path, or out of kustomization.yaml's resources",
	"certSecretRef":      "converge reads a CA from the ca.crt key of the Secret of secretRef; client certificates are not supported",
	"proxySecretRef":     "converge uses the proxy of its environment (HTTPS_PROXY)",
	"serviceAccountName": "converge does not read a ServiceAccount's imagePullSecrets or its cloud identity: name the registry's Secret in secretRef",
}

// fluxOCIRef picks the ref Flux would follow: digest, then semver, then tag.
func (c *conv) fluxOCIRef(m map[string]any) convergev1.OCIRef {
	var set []string
	for _, k := range sortedKeys(m) {
		switch k {
		case "digest", "semver", "tag":
			if str(m, k) != "" {
				set = append(set, k)
			}
		case "semverFilter":
			c.lost("ref.semverFilter", "ref", "converge matches tags with the range of ref.semver only")
		default:
			c.lost("ref."+k, "ref", "no equivalent in converge")
		}
	}
	if len(set) == 0 {
		return convergev1.OCIRef{}
	}
	// sorted: digest, semver, tag, which is Flux's order too.
	if len(set) > 1 {
		c.note("ref", "spec.ref of the OCIRepository sets %v; Flux follows %s, and so does converge (exactly one is allowed)", set, set[0])
	}
	v := str(m, set[0])
	switch set[0] {
	case "digest":
		return convergev1.OCIRef{Digest: v}
	case "semver":
		return convergev1.OCIRef{SemVer: v}
	}
	return convergev1.OCIRef{Tag: v}
}

// layerSelector reads the media type of the layer to extract; Flux's copy operation, which
// hands the layer on as it is, has no equivalent.
func (c *conv) layerSelector(m map[string]any) string {
	for _, k := range sortedKeys(m) {
		switch k {
		case "mediaType":
		case "operation":
			switch str(m, k) {
			case "", "extract":
			case "copy":
				c.lost("layerSelector.operation", "layerMediaType", "converge extracts the layer, a tar+gzip archive; Flux's copy handed it on unextracted: push the files as a tar+gzip layer")
			default:
				c.lost("layerSelector.operation", "layerMediaType", "converge extracts the layer, a tar+gzip archive")
			}
		default:
			c.lost("layerSelector."+k, "layerMediaType", "no equivalent in converge")
		}
	}
	return str(m, "mediaType")
}

// fluxOCIVerify carries over a cosign verification with public keys; keyless (Sigstore)
// and notation verification are lost, and then nothing is verified.
func (c *conv) fluxOCIVerify(m map[string]any) *convergev1.OCIVerify {
	for _, k := range sortedKeys(m) {
		if k != "provider" && k != "secretRef" && k != "matchOIDCIdentity" {
			c.lost("verify."+k, "verify", "no equivalent in converge")
		}
	}
	if p := str(m, "provider"); p != "" && p != string(convergev1.CosignProvider) {
		c.lost("verify.provider", "", "converge checks cosign signatures only, not notation's: the converted SyncTarget deploys artifacts without checking their signatures; sign them with cosign and a key pair, and set spec.oci.verify")
		return nil
	}
	name := str(m, "secretRef", "name")
	if name == "" {
		c.lost("verify", "", "keyless verification (Sigstore's Fulcio certificates and Rekor log, matched by matchOIDCIdentity) has no equivalent: converge checks cosign signatures against public keys of a Secret; the converted SyncTarget deploys artifacts without checking their signatures until spec.oci.verify is set")
		return nil
	}
	if _, ok := m["matchOIDCIdentity"]; ok {
		c.note("verify", "spec.verify.matchOIDCIdentity (OCIRepository) applies to keyless signatures only: with a secretRef, Flux ignored it, and so does converge")
	}
	c.note("verify.secretRef", "converge trusts the PEM public key of every value of this Secret; Flux read the keys ending in .pub")
	return &convergev1.OCIVerify{Provider: convergev1.CosignProvider, SecretRef: convergev1.LocalObjectReference{Name: name}}
}
