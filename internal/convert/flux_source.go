package convert

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// gitSource converts a Flux GitRepository into spec.source; its notes go on c's object.
func (c *conv) gitSource(repo *unstructured.Unstructured) convergev1.GitSource {
	rc := c.at(keyOf(repo).String(), "spec.", "spec.source.")
	var src convergev1.GitSource
	mapFields(rc, asMap(repo.Object["spec"]), &src, gitRepositoryRules, gitRepositoryLost)
	if src.Ref == (convergev1.GitRef{}) {
		src.Ref.Branch = "master"
		rc.note("ref", "GitRepository without spec.ref: Flux follows master, and so does this SyncTarget")
	}
	return src
}

var gitRepositoryRules = []rule[*convergev1.GitSource]{
	{"url", func(_ *conv, v any, s *convergev1.GitSource) { s.URL = asString(v) }},
	{"ref", func(c *conv, v any, s *convergev1.GitSource) { s.Ref = c.fluxRef(asMap(v)) }},
	{"secretRef", func(_ *conv, v any, s *convergev1.GitSource) { s.SecretRef = localRef(v) }},
	{"interval", func(c *conv, v any, s *convergev1.GitSource) { s.Interval = c.duration("interval", v) }},
	{"verify", func(c *conv, v any, s *convergev1.GitSource) { s.Verify = c.fluxVerify(asMap(v)) }},
	noteOnly[*convergev1.GitSource]("timeout", "", "converge bounds a fetch with its own timeouts"),
	noteOnly[*convergev1.GitSource]("suspend", "", "suspend the SyncTarget instead (spec.suspend)"),
	noteOnly[*convergev1.GitSource]("sparseCheckout", "", "converge fetches the whole tree of a revision"),
	{"provider", func(c *conv, v any, _ *convergev1.GitSource) {
		if p := asString(v); p != "" && p != "generic" {
			c.lost("provider", "secretRef", "converge authenticates with the Secret of secretRef only")
		}
	}},
}

var gitRepositoryLost = map[string]string{
	"ignore":            "converge renders every file of spec.path; move what must be left out of the path, or out of kustomization.yaml's resources",
	"include":           "converge renders one repository per SyncTarget",
	"recurseSubmodules": "converge does not fetch submodules",
	"proxySecretRef":    "converge uses the proxy of its environment (HTTPS_PROXY)",
}

// fluxRef picks the ref Flux would follow: commit, then name, semver, tag, branch.
func (c *conv) fluxRef(m map[string]any) convergev1.GitRef {
	var set []string
	for _, k := range []string{"commit", "name", "semver", "tag", "branch"} {
		if str(m, k) != "" {
			set = append(set, k)
		}
	}
	if len(set) == 0 {
		return convergev1.GitRef{}
	}
	if len(set) > 1 {
		c.note("ref", "spec.ref of the GitRepository sets %v; Flux follows %s, and so does converge (exactly one is allowed)", set, set[0])
	}
	v := str(m, set[0])
	switch set[0] {
	case "commit":
		return convergev1.GitRef{Commit: v}
	case "name":
		return convergev1.GitRef{Name: v}
	case "semver":
		return convergev1.GitRef{SemVer: v}
	case "tag":
		return convergev1.GitRef{Tag: v}
	}
	return convergev1.GitRef{Branch: v}
}

func (c *conv) fluxVerify(m map[string]any) *convergev1.VerifySpec {
	name := str(m, "secretRef", "name")
	if name == "" {
		c.lost("verify", "", "converge verifies with keys of a Secret only")
		return nil
	}
	mode := convergev1.VerifyMode(str(m, "mode"))
	switch mode {
	case convergev1.VerifyHEAD, convergev1.VerifyTag, convergev1.VerifyTagAndHEAD:
	case "head", "":
		mode = convergev1.VerifyHEAD
	default:
		c.lost("verify.mode", "verify", "converge verifies HEAD, Tag or TagAndHEAD")
		mode = convergev1.VerifyHEAD
	}
	return &convergev1.VerifySpec{Mode: mode, SecretRef: convergev1.LocalObjectReference{Name: name}}
}
