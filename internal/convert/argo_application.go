package convert

import (
	"net/url"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// inClusterServer is the API server address Argo CD gives its own cluster.
const inClusterServer = "https://kubernetes.default.svc"

// application converts an Argo CD Application into a SyncTarget named after it.
func (c *converter) application(u *unstructured.Unstructured) {
	cv := newConv(c, u)
	st := newSyncTarget(u)
	if !cv.appSpec(asMap(u.Object["spec"]), &st.Spec) {
		return
	}
	cv.object(st, cv.from)
}

// appSpec maps an Application's spec (or an ApplicationSet's template spec) onto s; false
// when it cannot be converted at all.
func (c *conv) appSpec(spec map[string]any, s *convergev1.SyncTargetSpec) bool {
	src, single := asMap(spec["source"]), false
	if src == nil {
		srcs := asSlice(spec["sources"])
		if len(srcs) != 1 {
			c.lost("sources", "", "converge deploys one source per SyncTarget: make a SyncTarget per source, or keep the values files beside the chart")
			return false
		}
		src, single = asMap(srcs[0]), true
	}
	sc := c.at("", c.in+"source.", c.out)
	t := &appSource{spec: s, chart: str(src, "chart") != ""}
	// Argo CD's OCI source: an artifact of a registry, unless a chart of it is named.
	t.oci = !t.chart && strings.HasPrefix(str(src, "repoURL"), "oci://")
	field := "source"
	switch {
	case t.chart:
		s.Chart, field = &convergev1.ChartSource{}, "chart"
	case t.oci:
		if why := ociURLRefusal(str(src, "repoURL")); why != "" {
			sc.lost("repoURL", "", why)
			return false
		}
		s.OCI, field = &convergev1.OCISource{}, "oci"
	}
	if single {
		c.note(field, "spec.sources (%s) has a single source, converted as spec.%s", c.kindName(), field)
	}
	mapFields(sc, src, t, appSourceRules, appSourceLost)
	if t.oci && s.OCI.Ref == (convergev1.OCIRef{}) {
		s.OCI.Ref = sc.ociRevision("")
	}
	mapFields(c, spec, s, appRules, appLost)
	if asMap(get(spec, "syncPolicy", "automated")) == nil {
		c.note("", "%ssyncPolicy.automated (%s) is not set: Argo CD synced by hand; converge always syncs (set suspend: true to keep it from deploying)", c.in, c.kindName())
	}
	return true
}

// appSource is what the rules of an Application's source fill: spec.chart when it names
// a chart, spec.oci when it is an OCI artifact, spec.source otherwise.
type appSource struct {
	spec  *convergev1.SyncTargetSpec
	chart bool
	oci   bool
}

var appSourceRules = []rule[*appSource]{
	{"repoURL", func(c *conv, v any, t *appSource) {
		switch {
		case t.chart:
			t.spec.Chart.Repository = c.chartRepository(asString(v))
		case t.oci:
			t.spec.OCI.URL = asString(v)
		default:
			t.spec.Source.URL = asString(v)
		}
	}},
	{"targetRevision", func(c *conv, v any, t *appSource) {
		switch {
		case t.chart:
			t.spec.Chart.Version = asString(v)
		case t.oci:
			t.spec.OCI.Ref = c.ociRevision(asString(v))
		default:
			t.spec.Source.Ref = c.revision(asString(v))
		}
	}},
	{"path", func(_ *conv, v any, t *appSource) { t.spec.Path = relPath(asString(v)) }},
	{"chart", func(_ *conv, v any, t *appSource) { t.spec.Chart.Name = asString(v) }},
	{"helm", func(c *conv, v any, t *appSource) {
		c.argoHelm(asMap(v), t.spec)
		if t.oci {
			c.note("oci", "%shelm (%s): spec.oci renders a chart directory at spec.path of the artifact; a chart pushed with helm push is a chart of a registry: follow it as spec.chart (repository: the URL without its last segment, name: that segment)", c.in, c.kindName())
		}
	}},
	{"kustomize", func(c *conv, v any, _ *appSource) {
		mapFields(c.at("", c.in+"kustomize.", c.out), asMap(v), t0, nil, kustomizeLost)
	}},
	{"directory", func(c *conv, v any, _ *appSource) {
		if !asBool(asMap(v)["recurse"]) {
			c.note("path", "%sdirectory (%s): converge reads the YAML of every subdirectory of the path too", c.in, c.kindName())
		}
		for _, k := range sortedKeys(asMap(v)) {
			if k != "recurse" {
				c.lost("directory."+k, "path", "converge renders the kustomization.yaml or every YAML file of the path")
			}
		}
	}},
	ignored[*appSource]("name"),
}

// t0 is the target of rules that map nothing.
var t0 = &struct{}{}

var appSourceLost = map[string]string{
	"plugin": "converge runs no config management plugins: render in CI and commit the output, or use kustomize",
	"ref":    "converge deploys one source per SyncTarget",
}

var kustomizeLost = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"namePrefix", "nameSuffix", "images", "commonLabels", "commonAnnotations",
		"replicas", "patches", "components", "namespace", "forceCommonLabels", "forceCommonAnnotations",
		"labelWithoutSelector", "commonAnnotationsEnvsubst", "apiVersions", "kubeVersion", "version"} {
		m[k] = "converge runs the kustomization.yaml found at the path: put it in a kustomization.yaml in Git"
	}
	return m
}()

var appRules = []rule[*convergev1.SyncTargetSpec]{
	ignored[*convergev1.SyncTargetSpec]("source"),
	ignored[*convergev1.SyncTargetSpec]("sources"),
	ignored[*convergev1.SyncTargetSpec]("info"),
	{"destination", func(c *conv, v any, s *convergev1.SyncTargetSpec) { c.destination(asMap(v), s) }},
	{"syncPolicy", func(c *conv, v any, s *convergev1.SyncTargetSpec) {
		mapFields(c.at("", c.in+"syncPolicy.", c.out), asMap(v), s, syncPolicyRules, nil)
	}},
	{"revisionHistoryLimit", func(_ *conv, v any, s *convergev1.SyncTargetSpec) {
		n, ok := v.(int64)
		if f, isFloat := v.(float64); isFloat {
			n, ok = int64(f), true
		}
		if ok && n >= 1 {
			n = min(n, 100)
			l := int32(n)
			s.HistoryLimit = &l
		}
	}},
	{"project", func(c *conv, v any, _ *convergev1.SyncTargetSpec) {
		if asString(v) == "default" {
			return
		}
		c.note("serviceAccountName", "%sproject %q (%s): converge has no projects; restrict what a SyncTarget may change with serviceAccountName and RBAC", c.in, asString(v), c.kindName())
	}},
}

var appLost = map[string]string{
	"ignoreDifferences": "converge corrects every drift of the fields it applies: leave such fields out of Git, or annotate the object converge.dev/reconcile: disabled",
}

var syncPolicyRules = []rule[*convergev1.SyncTargetSpec]{
	{"automated", func(c *conv, v any, s *convergev1.SyncTargetSpec) {
		m := asMap(v)
		s.Prune = asBool(m["prune"])
		s.AllowEmpty = asBool(m["allowEmpty"])
		if b, ok := m["selfHeal"].(bool); !ok || !b {
			c.note("", "%sautomated.selfHeal (%s) is off: converge always corrects drift (annotate an object converge.dev/reconcile: disabled to leave it alone)", c.in, c.kindName())
		}
		if e, ok := m["enabled"].(bool); ok && !e {
			s.Suspend = true
		}
	}},
	{"syncOptions", func(c *conv, v any, _ *convergev1.SyncTargetSpec) { c.syncOptions(strings1(v)) }},
	noteOnly[*convergev1.SyncTargetSpec]("retry", "", "converge retries a failed revision with its own backoff, after rolling it back"),
	{"managedNamespaceMetadata", func(c *conv, _ any, _ *convergev1.SyncTargetSpec) {
		c.lost("managedNamespaceMetadata", "targetNamespace", "converge creates no namespace of its own: put the Namespace, with its labels, in Git")
	}},
}

// syncOptions comments each option: most are how converge always works.
func (c *conv) syncOptions(opts []string) {
	for _, o := range opts {
		name, val, _ := strings.Cut(o, "=")
		switch name {
		case "CreateNamespace":
			if val == "true" {
				c.lost("syncOptions", "targetNamespace", "CreateNamespace: converge creates no namespace of its own: put the Namespace in Git")
			}
		case "ServerSideApply", "ApplyOutOfSyncOnly", "PruneLast", "Validate", "RespectIgnoreDifferences", "PrunePropagationPolicy":
			c.note("", "%ssyncOptions %s (%s): converge always applies server-side, in stages, and prunes last", c.in, name, c.kindName())
		default:
			c.note("", "%ssyncOptions %s (%s): no equivalent in converge", c.in, name, c.kindName())
		}
	}
}

// destination maps Argo CD's cluster and namespace: the in-cluster server is the local
// cluster, another is a kubeconfig Secret named after the cluster, to be created.
func (c *conv) destination(d map[string]any, s *convergev1.SyncTargetSpec) {
	s.TargetNamespace = str(d, "namespace")
	server, name := str(d, "server"), str(d, "name")
	if (server == "" || server == inClusterServer) && (name == "" || name == "in-cluster") {
		return
	}
	if strings.Contains(name+server, "{{") {
		c.templatedDestination(name, s)
		return
	}
	cluster := name
	if cluster == "" {
		cluster = serverName(server)
	}
	s.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: cluster}}
	c.note("kubeConfig", "%sdestination (%s) is another cluster: create the Secret %s holding a kubeconfig of it under the key value (Argo CD's cluster Secret holds no kubeconfig)", c.in, c.kindName(), cluster)
}

// templatedDestination: an ApplicationSet's cluster name is the name of a kubeconfig
// Secret (secretName, set by the set for a clusters generator); a server URL is not.
func (c *conv) templatedDestination(name string, s *convergev1.SyncTargetSpec) {
	if c.clusters {
		s.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "{{ .secretName }}"}}
		c.note("kubeConfig", "the cluster of a clusters generator is its kubeconfig Secret, secretName")
		return
	}
	if name != "" {
		s.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: name}}
		c.note("kubeConfig", "%sdestination.name (%s) must now be the name of a kubeconfig Secret", c.in, c.kindName())
		return
	}
	c.lost("destination.server", "", "a server URL given by a parameter has no equivalent: converge reaches another cluster through a kubeconfig Secret; give each parameter set the Secret's name and set kubeConfig.secretRef.name to it (none for the local cluster)")
}

// serverName makes a Secret name of an API server URL: its host.
func serverName(server string) string {
	if u, err := url.Parse(server); err == nil && u.Host != "" {
		return dnsLabel(u.Hostname())
	}
	return dnsLabel(server)
}

// chartRepository is Argo CD's repoURL of a chart: a registry without a scheme is OCI.
func (c *conv) chartRepository(repo string) string {
	if strings.Contains(repo, "://") {
		return repo
	}
	c.note("chart.repository", "%srepoURL (%s) has no scheme: read as an OCI registry", c.in, c.kindName())
	return "oci://" + repo
}

var (
	shaRe    = regexp.MustCompile(`^([0-9a-f]{40}|[0-9a-f]{64})$`)
	tagRe    = regexp.MustCompile(`^v?[0-9]+(\.[0-9]+){1,2}([-+][0-9A-Za-z.-]+)?$`)
	semverRe = regexp.MustCompile(`[*^~<>=|]|(^|\.)[xX](\.|$)| - `)
)

var ociDigestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ociRevision reads Argo CD's targetRevision of an OCI source: a digest, a semver range
// or a tag; the guess is said in a comment.
func (c *conv) ociRevision(rev string) convergev1.OCIRef {
	var ref convergev1.OCIRef
	var as string
	switch {
	case rev == "":
		c.note("oci.ref", "%stargetRevision (%s) is not set: the tag latest is followed; check it", c.in, c.kindName())
		return convergev1.OCIRef{Tag: "latest"}
	case rev == "HEAD":
		ref, as = convergev1.OCIRef{Tag: "latest"}, "the tag latest: check it"
	case strings.Contains(rev, "{{"):
		ref, as = convergev1.OCIRef{Tag: rev}, "a tag"
	case ociDigestRe.MatchString(rev):
		ref, as = convergev1.OCIRef{Digest: rev}, "a digest"
	case semverRe.MatchString(rev):
		ref, as = convergev1.OCIRef{SemVer: rev}, "a semver range"
	default:
		ref, as = convergev1.OCIRef{Tag: rev}, "a tag"
	}
	c.note("oci.ref", "%stargetRevision %q (%s) read as %s", c.in, rev, c.kindName(), as)
	return ref
}

// revision reads Argo CD's targetRevision, which may be a branch, a tag, a commit or a
// semver range; the guess is said in a comment.
func (c *conv) revision(rev string) convergev1.GitRef {
	var ref convergev1.GitRef
	var as string
	switch {
	case rev == "" || rev == "HEAD":
		ref, as = convergev1.GitRef{Branch: "main"}, "the default branch, assumed to be main: check it"
	case strings.Contains(rev, "{{") && strings.Contains(rev, "head_sha"):
		ref, as = convergev1.GitRef{Commit: rev}, "the pull request's head commit"
	case strings.Contains(rev, "{{"):
		ref, as = convergev1.GitRef{Branch: rev}, "a branch"
	case strings.HasPrefix(rev, "refs/"):
		ref, as = convergev1.GitRef{Name: rev}, "a ref"
	case shaRe.MatchString(rev):
		ref, as = convergev1.GitRef{Commit: rev}, "a commit"
	case semverRe.MatchString(rev):
		ref, as = convergev1.GitRef{SemVer: rev}, "a semver range"
	case tagRe.MatchString(rev):
		ref, as = convergev1.GitRef{Tag: rev}, "a tag"
	default:
		ref, as = convergev1.GitRef{Branch: rev}, "a branch"
	}
	c.note("source.ref", "%stargetRevision %q (%s) read as %s", c.in, rev, c.kindName(), as)
	return ref
}
