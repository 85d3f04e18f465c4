package convert

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// helmRepository fills the repository, credentials and interval of ch from a Flux
// HelmRepository (type default, an index.yaml server, or oci).
func (c *conv) helmRepository(repo *unstructured.Unstructured, ch *convergev1.ChartSource) {
	rc := c.at(keyOf(repo).String(), "spec.", "spec.chart.")
	mapFields(rc, asMap(repo.Object["spec"]), ch, helmRepositoryRules, chartRepositoryLost)
}

var chartRepositoryLost = map[string]string{
	"certSecretRef":  "converge reads a CA from the ca.crt key of the chart's secretRef; client certificates are not supported",
	"insecure":       "converge talks to chart repositories over TLS (or plain http:// URLs)",
	"proxySecretRef": "converge uses the proxy of its environment (HTTPS_PROXY)",
	"layerSelector":  "converge reads the Helm chart layer of an OCI artifact",
}

var chartSourceCommonRules = []rule[*convergev1.ChartSource]{
	{"secretRef", func(_ *conv, v any, ch *convergev1.ChartSource) { ch.SecretRef = localRef(v) }},
	{"interval", func(c *conv, v any, ch *convergev1.ChartSource) {
		if ch.Interval == nil {
			ch.Interval = c.duration("interval", v)
		}
	}},
	{"provider", func(c *conv, v any, _ *convergev1.ChartSource) {
		if p := asString(v); p != "" && p != "generic" {
			c.lost("provider", "secretRef", "converge authenticates with the Secret of secretRef only, not with a cloud provider's identity")
		}
	}},
	noteOnly[*convergev1.ChartSource]("timeout", "", "converge bounds a fetch with its own timeouts"),
	noteOnly[*convergev1.ChartSource]("suspend", "", "suspend the SyncTarget instead (spec.suspend)"),
	noteOnly[*convergev1.ChartSource]("accessFrom", "", "converge reads a chart from the SyncTarget's own namespace"),
}

var helmRepositoryRules = append([]rule[*convergev1.ChartSource]{
	{"url", func(_ *conv, v any, ch *convergev1.ChartSource) { ch.Repository = asString(v) }},
	{"type", func(c *conv, v any, _ *convergev1.ChartSource) {
		if t := asString(v); t != "" && t != "default" && t != "oci" {
			c.lost("type", "repository", "converge reads HTTP and OCI chart repositories")
		}
	}},
	noteOnly[*convergev1.ChartSource]("passCredentials", "secretRef", "converge sends the credentials to the repository's host only"),
}, chartSourceCommonRules...)

// chartRef converts the OCIRepository a HelmRelease's spec.chartRef names: its URL is
// the chart itself, oci://<registry>/<repository>/<chart>.
func (c *conv) chartRef(u *unstructured.Unstructured, ref map[string]any, st *convergev1.SyncTarget) ([]string, bool) {
	kind, ns := str(ref, "kind"), str(ref, "namespace")
	if ns == "" {
		ns = u.GetNamespace()
	}
	if kind != "OCIRepository" {
		c.lost("chartRef", "", "converge reads charts from chart repositories, OCI registries and Git; a chartRef to a "+kind+" is not supported")
		return nil, false
	}
	src := c.s.c.lookup(fluxSourceGroup, kind, ns, str(ref, "name"))
	if src == nil {
		c.lost("chartRef", "", "the OCIRepository is not in the input: nothing tells where the chart is")
		return nil, false
	}
	rc := c.at(keyOf(src).String(), "spec.", "spec.chart.")
	if why := ociURLRefusal(str(asMap(src.Object["spec"]), "url")); why != "" {
		rc.lost("url", "", why)
		c.lost("chartRef", "", "the OCIRepository cannot be converted (see its problem), and the HelmRelease is not either")
		return nil, false
	}
	st.Spec.Chart = &convergev1.ChartSource{}
	mapFields(rc, asMap(src.Object["spec"]), st.Spec.Chart, ociRepositoryRules, chartRepositoryLost)
	if st.Spec.Chart.Version == "" && st.Spec.Chart.Digest == "" {
		rc.note("version", "an OCIRepository without spec.ref follows the tag latest; converge follows the highest semver tag")
	}
	return []string{keyOf(src).String()}, true
}

var ociRepositoryRules = append([]rule[*convergev1.ChartSource]{
	{"url", func(_ *conv, v any, ch *convergev1.ChartSource) {
		u := asString(v)
		i := strings.LastIndex(u, "/")
		if i > len("oci://") {
			ch.Repository, ch.Name = u[:i], u[i+1:]
		}
	}},
	{"ref", func(c *conv, v any, ch *convergev1.ChartSource) { c.ociRef(asMap(v), ch) }},
	noteOnly[*convergev1.ChartSource]("verify", "verify", "converge verifies OpenPGP provenance files (spec.chart.verify), not cosign signatures: check the chart's signing"),
}, chartSourceCommonRules...)

// ociRef maps an OCIRepository's ref: digest, else semver, else tag.
func (c *conv) ociRef(m map[string]any, ch *convergev1.ChartSource) {
	switch {
	case str(m, "digest") != "":
		ch.Digest = str(m, "digest")
	case str(m, "semver") != "":
		ch.Version = str(m, "semver")
	case str(m, "tag") != "":
		ch.Version = str(m, "tag")
	}
	if str(m, "semverFilter") != "" {
		c.lost("ref.semverFilter", "version", "converge matches versions with the range of spec.chart.version only")
	}
}
