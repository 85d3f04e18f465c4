package convert

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxReleaseName is the longest Helm release name.
const maxReleaseName = 53

// helmRelease converts a Flux HelmRelease and its chart's source into a SyncTarget.
func (c *converter) helmRelease(u *unstructured.Unstructured) {
	cv := newConv(c, u)
	st := newSyncTarget(u)
	st.Spec.Helm = &convergev1.HelmSpec{}
	spec := asMap(u.Object["spec"])
	from, ok := cv.helmChart(u, spec, st)
	if !ok {
		return
	}
	ph := &phases{}
	mapFields(cv, spec, &helmTarget{spec: &st.Spec, phases: ph}, helmReleaseRules, helmReleaseLost)
	cv.helmPhases(ph, st.Spec.Helm)
	if st.Spec.Helm.ReleaseName == "" && st.Spec.TargetNamespace != "" {
		// Flux names the release <targetNamespace>-<name>: keep the name of the objects.
		if name := st.Spec.TargetNamespace + "-" + u.GetName(); len(name) <= maxReleaseName {
			st.Spec.Helm.ReleaseName = name
		} else {
			cv.note("helm.releaseName", "Flux shortens a release name longer than 53 characters with a hash; set the release name the chart was installed with")
		}
	}
	cv.note("helm", "converge keeps no Helm release Secrets: it renders the chart and applies the objects; set removeReleaseSecrets: true to delete the Secrets of the Flux release once converge manages its objects")
	cv.object(st, append([]string{cv.from}, from...)...)
}

// helmTarget is what the rules of a HelmRelease fill.
type helmTarget struct {
	spec   *convergev1.SyncTargetSpec
	phases *phases
}

// phases are the settings of install and upgrade that converge merges into one.
type phases struct {
	installCRDs, upgradeCRDs   string
	installHooks, upgradeHooks bool
}

type helmRule = rule[*helmTarget]

var helmReleaseRules = []helmRule{
	ignored[*helmTarget]("chart"),
	ignored[*helmTarget]("chartRef"),
	ignored[*helmTarget]("persistentClient"),
	{"values", func(_ *conv, v any, t *helmTarget) { t.spec.Helm.Values = toJSON(v) }},
	{"valuesFrom", func(_ *conv, v any, t *helmTarget) { t.spec.Helm.ValuesFrom = valuesFrom(v) }},
	{"releaseName", func(_ *conv, v any, t *helmTarget) { t.spec.Helm.ReleaseName = asString(v) }},
	{"targetNamespace", func(_ *conv, v any, t *helmTarget) { t.spec.TargetNamespace = asString(v) }},
	{"serviceAccountName", func(_ *conv, v any, t *helmTarget) { t.spec.ServiceAccountName = asString(v) }},
	{"suspend", func(_ *conv, v any, t *helmTarget) { t.spec.Suspend = asBool(v) }},
	{"timeout", func(c *conv, v any, t *helmTarget) { t.spec.Timeout = c.duration("timeout", v) }},
	{"dependsOn", func(_ *conv, v any, t *helmTarget) { t.spec.DependsOn = dependencies(v) }},
	{"kubeConfig", func(c *conv, v any, t *helmTarget) { t.spec.KubeConfig = c.kubeConfig(v) }},
	{"install", func(c *conv, v any, t *helmTarget) {
		mapFields(c.at("", "spec.install.", "spec."), asMap(v), &phase{&t.phases.installCRDs, &t.phases.installHooks}, phaseRules, phaseLost)
	}},
	{"upgrade", func(c *conv, v any, t *helmTarget) {
		mapFields(c.at("", "spec.upgrade.", "spec."), asMap(v), &phase{&t.phases.upgradeCRDs, &t.phases.upgradeHooks}, phaseRules, phaseLost)
	}},
	noteOnly[*helmTarget]("storageNamespace", "helm", "converge keeps no release Secrets, so there is no storage namespace"),
	noteOnly[*helmTarget]("interval", "chart", "converge has no periodic re-apply: it watches the applied objects and corrects drift at once; spec.chart.interval is the poll of the chart repository"),
	noteOnly[*helmTarget]("test", "helm", "converge does not run Helm tests on every release: run `converge test`"),
	noteOnly[*helmTarget]("driftDetection", "", "converge always detects and corrects drift"),
	noteOnly[*helmTarget]("maxHistory", "historyLimit", "converge keeps no release Secrets; spec.historyLimit caps the sync history"),
	noteOnly[*helmTarget]("rollback", "rollback", "converge rolls a failed revision back to the last healthy one automatically"),
	noteOnly[*helmTarget]("uninstall", "prune", "deleting the SyncTarget prunes its objects when spec.prune is true"),
}

var helmReleaseLost = map[string]string{
	"postRenderers":  "converge renders the chart as it is: use a SyncTarget of a Git path whose kustomization.yaml uses helmCharts, or patch the chart",
	"commonMetadata": "no equivalent: set the labels in the chart's values",
}

// phase is install or upgrade.
type phase struct {
	crds  *string
	hooks *bool
}

var phaseRules = []rule[*phase]{
	{"crds", func(_ *conv, v any, p *phase) { *p.crds = asString(v) }},
	{"disableHooks", func(_ *conv, v any, p *phase) { *p.hooks = asBool(v) }},
	{"skipCRDs", func(_ *conv, v any, p *phase) {
		if asBool(v) {
			*p.crds = string(convergev1.CRDsSkip)
		}
	}},
	noteOnly[*phase]("remediation", "rollback", "converge rolls a failed revision back to the last healthy one automatically"),
	noteOnly[*phase]("timeout", "timeout", "converge bounds applying and health checking one revision with spec.timeout"),
	noteOnly[*phase]("disableWait", "wait", "set spec.wait: false to apply without health checks"),
	noteOnly[*phase]("disableWaitForJobs", "wait", "set spec.wait: false to apply without health checks"),
	noteOnly[*phase]("cleanupOnFail", "rollback", "a failed revision is rolled back to the last healthy one, whose objects stay"),
	noteOnly[*phase]("strategy", "rollback", "converge rolls a failed revision back automatically"),
	noteOnly[*phase]("disableOpenAPIValidation", "", "converge dry-runs every object against the API server first"),
	noteOnly[*phase]("disableSchemaValidation", "", "converge validates the values against the chart's schema"),
}

var phaseLost = map[string]string{
	"createNamespace": "converge creates no namespace of its own: put the Namespace in the source, or create it",
	"replace":         "no equivalent: converge applies with server-side apply",
	"force":           "no equivalent: converge never deletes and recreates an object whose immutable fields changed",
	"preserveValues":  "converge renders with the values of the SyncTarget only",
}

// helmPhases merges install and upgrade into converge's single CRD policy and hooks switch.
func (c *conv) helmPhases(p *phases, h *convergev1.HelmSpec) {
	in, up := p.installCRDs, p.upgradeCRDs
	switch {
	case up == string(convergev1.CRDsCreateReplace):
		h.CRDs = convergev1.CRDsCreateReplace
		if in == string(convergev1.CRDsSkip) {
			c.note("helm.crds", "Flux skipped the CRDs on install and replaced them on upgrade; converge creates and upgrades them")
		}
	case in == string(convergev1.CRDsSkip):
		h.CRDs = convergev1.CRDsSkip
		if up == string(convergev1.CRDsCreate) {
			c.note("helm.crds", "Flux skipped the CRDs on install and created them on upgrade; converge skips them")
		}
	default:
		// Flux's default: created on install, left alone on upgrade.
		h.CRDs = convergev1.CRDsCreate
		if in == string(convergev1.CRDsCreateReplace) {
			c.note("helm.crds", "Flux replaced the CRDs on install only; converge creates them when missing and never changes them")
		}
	}
	if p.installHooks != p.upgradeHooks {
		c.note("helm.disableHooks", "Flux disabled the hooks on install or on upgrade only; converge has one switch for both")
	}
	h.DisableHooks = p.installHooks && p.upgradeHooks
}

func valuesFrom(v any) []convergev1.ValuesReference {
	var out []convergev1.ValuesReference
	for _, x := range asSlice(v) {
		m := asMap(x)
		out = append(out, convergev1.ValuesReference{
			Kind: str(m, "kind"), Name: str(m, "name"), ValuesKey: str(m, "valuesKey"),
			TargetPath: str(m, "targetPath"), Optional: asBool(m["optional"]),
		})
	}
	return out
}

// helmChart fills spec.chart (or spec.source and path for a chart in Git) from the
// HelmRelease's chart or chartRef and the source it names. It returns the sources read,
// and false when the HelmRelease cannot be converted.
func (c *conv) helmChart(u *unstructured.Unstructured, spec map[string]any, st *convergev1.SyncTarget) ([]string, bool) {
	if ref := asMap(spec["chartRef"]); ref != nil {
		return c.chartRef(u, ref, st)
	}
	cs := asMap(get(spec, "chart", "spec"))
	ref := asMap(cs["sourceRef"])
	kind, ns := str(ref, "kind"), str(ref, "namespace")
	if ns == "" {
		ns = u.GetNamespace()
	}
	if kind != "HelmRepository" && kind != "GitRepository" {
		c.lost("chart.spec.sourceRef", "", "converge reads charts from HTTP or OCI chart repositories and Git; a "+kind+" source is not supported")
		return nil, false
	}
	src := c.s.c.lookup(fluxSourceGroup, kind, ns, str(ref, "name"))
	if src == nil {
		c.lost("chart.spec.sourceRef", "", "the "+kind+" is not in the input: nothing tells where the chart is")
		return nil, false
	}
	if ns != u.GetNamespace() {
		c.note("", "the %s is in namespace %s; converge reads a chart's credentials from the SyncTarget's namespace", kind, ns)
	}
	cc := c.at("", "spec.chart.spec.", "spec.")
	if kind == "GitRepository" {
		st.Spec.Source = c.gitSource(src)
		mapFields(cc, cs, &st.Spec, gitChartRules, chartSpecLost)
	} else {
		st.Spec.Chart = &convergev1.ChartSource{}
		c.helmRepository(src, st.Spec.Chart)
		mapFields(cc, cs, &st.Spec, repoChartRules, chartSpecLost)
	}
	return []string{keyOf(src).String()}, true
}

var chartSpecLost = map[string]string{
	"verify":                   "converge verifies OpenPGP provenance files only (spec.chart.verify), not cosign signatures",
	"ignoreMissingValuesFiles": "a values file converge cannot find is an error",
}

var chartCommonRules = []rule[*convergev1.SyncTargetSpec]{
	ignored[*convergev1.SyncTargetSpec]("sourceRef"),
	noteOnly[*convergev1.SyncTargetSpec]("reconcileStrategy", "", "converge renders a chart anew whenever its version or the Git revision changes"),
}

var repoChartRules = append([]rule[*convergev1.SyncTargetSpec]{
	{"chart", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.Chart.Name = asString(v) }},
	{"version", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.Chart.Version = asString(v) }},
	{"interval", func(c *conv, v any, s *convergev1.SyncTargetSpec) { s.Chart.Interval = c.duration("interval", v) }},
	{"valuesFiles", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.Helm.ValuesFiles = strings1(v) }},
}, chartCommonRules...)

var gitChartRules = append([]rule[*convergev1.SyncTargetSpec]{
	{"chart", func(_ *conv, v any, s *convergev1.SyncTargetSpec) { s.Path = relPath(asString(v)) }},
	noteOnly[*convergev1.SyncTargetSpec]("version", "source.ref", "the version of a chart in Git is the revision of spec.source.ref"),
	noteOnly[*convergev1.SyncTargetSpec]("interval", "source.interval", "the chart is polled with its Git repository"),
	{"valuesFiles", func(_ *conv, v any, s *convergev1.SyncTargetSpec) {
		// Flux reads them relative to the repository's root, converge relative to
		// spec.path (set already: "chart" sorts before "valuesFiles").
		for _, f := range strings1(v) {
			s.Helm.ValuesFiles = append(s.Helm.ValuesFiles, fromDir(s.Path, relPath(f)))
		}
	}},
}, chartCommonRules...)

func strings1(v any) []string {
	var out []string
	for _, x := range asSlice(v) {
		if s := asString(x); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// fromDir is the path of file (relative to the repository's root) relative to dir.
func fromDir(dir, file string) string {
	if dir == "" {
		return file
	}
	d := strings.Split(dir, "/")
	f := strings.Split(file, "/")
	i := 0
	for i < len(d) && i < len(f)-1 && d[i] == f[i] {
		i++
	}
	return strings.Repeat("../", len(d)-i) + strings.Join(f[i:], "/")
}
