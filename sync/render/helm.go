package render

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"runtime/debug"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/internal/crdkinds"
	"github.com/converge-gitops/converge/sync/helm"
)

// ErrHelm classes the errors of a chart's render: loading, values, templates.
var ErrHelm = errors.New("helm chart render failed")

// HookAnnotation marks Helm's hook objects (helm.sh/hook), ArgoHookAnnotation Argo CD's
// (argocd.argoproj.io/hook), in a chart, plain YAML or a kustomization alike: a deploy
// runs them apart (see sync/hooks).
const (
	HookAnnotation     = "helm.sh/hook"
	ArgoHookAnnotation = "argocd.argoproj.io/hook"
)

// IsHook says whether o is a hook object.
func IsHook(o *unstructured.Unstructured) bool {
	a := o.GetAnnotations()
	_, helmHook := a[HookAnnotation]
	_, argoHook := a[ArgoHookAnnotation]
	return helmHook || argoHook
}

// HelmOptions render a Helm chart: the directory at Options.Path holding Chart.yaml (and no
// kustomization), read with Helm's SDK, confined to it (see sync/helm).
type HelmOptions struct {
	// ReleaseName and Namespace are .Release.Name and .Release.Namespace; objects a
	// template leaves without a namespace get Namespace (unless cluster-scoped).
	ReleaseName, Namespace string
	// ValuesFiles are read in order after the chart's values.yaml: paths relative to the
	// chart directory, confined to Root (a chart in Git may take them from elsewhere in
	// the repository).
	ValuesFiles []string
	// Values are further layers (spec.helm.valuesFrom), after ValuesFiles.
	Values []helm.ValuesSource
	// Inline are spec.helm.values, as JSON; they win.
	Inline []byte
	// IsUpgrade is .Release.IsUpgrade (IsInstall is its opposite); Revision is .Release.Revision.
	IsUpgrade bool
	Revision  int
	// SkipCRDs leaves the chart's crds/ out; DisableHooks its hooks. IncludeTests keeps
	// its test hooks (left out otherwise: the daemon never runs them).
	SkipCRDs, DisableHooks, IncludeTests bool
	// Lookup answers the template function lookup, read-only; nil answers nothing.
	Lookup helm.Lookup `json:"-"`
	// APIVersions are added to .Capabilities.APIVersions; KubeVersion is
	// .Capabilities.KubeVersion (as helm template --api-versions and --kube-version).
	APIVersions []string
	KubeVersion string
	// ShowValues fills Result.Values with the values of the render as a person may see
	// them (see helm.ShownValues): for a caller that shows them, never the daemon's own
	// renders.
	ShowValues bool
	// FromCluster says APIVersions and KubeVersion are those of the cluster the release
	// goes to, as helm install discovers them: APIVersions replace Helm's defaults, and
	// the API versions the chart's own CustomResourceDefinitions serve are added, since
	// they are applied in the first stage, before anything that may use them.
	FromCluster bool
}

// isChart reports whether directory rel holds a Chart.yaml.
func isChart(cfs *confinedFS, rel string) (bool, error) {
	r, err := cfs.resolve(path.Join(rel, "Chart.yaml"))
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return !r.info.IsDir(), nil
}

// renderChart renders the chart in directory start of the checkout rooted at root.
func renderChart(ctx context.Context, cfs *confinedFS, root string, start resolved, display string, o *HelmOptions) ([]item, error) {
	layers := make([]helm.ValuesSource, 0, len(o.ValuesFiles)+len(o.Values))
	for _, f := range o.ValuesFiles {
		p := path.Join(display, filepath.ToSlash(f))
		r, err := cfs.resolve(p)
		if err != nil {
			return nil, fileErr(p, err)
		}
		b, err := cfs.readFile(r, p)
		if err != nil {
			return nil, fileErr(p, err)
		}
		layers = append(layers, helm.ValuesSource{Name: p, Data: b})
	}
	layers = append(layers, o.Values...)
	values, err := helm.BuildValues(layers, o.Inline)
	if err != nil {
		return nil, fileErr(display, fmt.Errorf("%w: %w", ErrHelm, err))
	}
	chart, err := helm.LoadChart(filepath.Join(root, filepath.FromSlash(start.rel)))
	if err != nil {
		return nil, fileErr(display, fmt.Errorf("%w: %w", ErrHelm, err))
	}
	if o.ShowValues {
		if err := cfs.showValues(chart, layers, o.Inline); err != nil {
			return nil, fileErr(display, fmt.Errorf("%w: %w", ErrHelm, err))
		}
	}
	kube := o.KubeVersion
	if kube == "" {
		kube = defaultKubeVersion()
	}
	hopts := helm.Options{ReleaseName: o.ReleaseName, Namespace: o.Namespace,
		Values: values, IsUpgrade: o.IsUpgrade, Revision: max(o.Revision, 1), KubeVersion: kube,
		APIVersions: o.APIVersions, FromCluster: o.FromCluster, Lookup: o.Lookup, SkipCRDs: o.SkipCRDs, DisableHooks: o.DisableHooks}
	rel, err := helm.Render(ctx, chart, hopts)
	if err == nil && o.FromCluster {
		// The chart's CRDs are installed before its templates are applied: a template asking
		// for their API sees it, as on a cluster where they are already installed.
		if extra := newCRDVersions(rel, o.APIVersions); len(extra) > 0 {
			hopts.APIVersions = append(append([]string(nil), o.APIVersions...), extra...)
			rel, err = helm.Render(ctx, chart, hopts)
		}
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fileErr(display, fmt.Errorf("%w: %w", ErrHelm, err))
	}
	return chartItems(rel, display, o), nil
}

// newCRDVersions are the group versions, and the kinds in them, that the
// CustomResourceDefinitions of rel serve and known does not list.
func newCRDVersions(rel *helm.Release, known []string) []string {
	have := make(map[string]bool, len(known))
	for _, v := range known {
		have[v] = true
	}
	var out []string
	add := func(v string) {
		if !have[v] {
			have[v] = true
			out = append(out, v)
		}
	}
	for _, obj := range append(append([]*unstructured.Unstructured(nil), rel.CRDs...), rel.Objects...) {
		for _, gvk := range crdkinds.Served(obj) {
			add(gvk.GroupVersion().String())
			add(gvk.GroupVersion().String() + "/" + gvk.Kind)
		}
	}
	return out
}

// chartItems are the objects of a rendered chart: CRDs, manifests and hooks (tests only
// when asked), each without a namespace given the release's.
func chartItems(rel *helm.Release, display string, o *HelmOptions) []item {
	var objs []*unstructured.Unstructured
	objs = append(objs, rel.CRDs...)
	objs = append(objs, rel.Objects...)
	for _, h := range rel.Hooks {
		if isTestHook(h) && !o.IncludeTests {
			continue
		}
		objs = append(objs, h.Object)
	}
	items := make([]item, 0, len(objs))
	for i, obj := range objs {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(o.Namespace)
		}
		items = append(items, item{obj: obj, file: display, what: fmt.Sprintf("object %d of the chart", i+1)})
	}
	return items
}

// isTestHook reports whether h runs only for `helm test`.
func isTestHook(h helm.Hook) bool {
	for _, e := range h.Events {
		if e == "test" || e == "test-success" {
			return true
		}
	}
	return false
}

// HookLabel marks the hook objects of a chart with a hash of the name (or generateName)
// the chart gives them, so that every object a hook ever made is found again for its
// delete policy, whatever name it got.
const HookLabel = "converge.dev/hook"

// nameGenerated names a hook object named by metadata.generateName, as server-side apply
// needs a name: the prefix and a hash of its content, stable for equal content. Every hook
// object gets HookLabel.
func nameGenerated(obj *unstructured.Unstructured) {
	if !IsHook(obj) {
		return
	}
	base := obj.GetName()
	if base == "" {
		base = obj.GetGenerateName()
	}
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[HookLabel] = shortHash(obj.GetKind() + "/" + base)
	obj.SetLabels(labels)
	if obj.GetName() != "" || base == "" {
		return
	}
	b, _ := json.Marshal(obj.Object)
	obj.SetName(base + shortHash(string(b))[:8])
	obj.SetGenerateName("")
}

// shortHash is 16 hex digits of the sha256 of s.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// defaultKubeVersion is .Capabilities.KubeVersion when the caller names none: the
// Kubernetes release of the client-go converge is built with (v0.X.Y is Kubernetes
// v1.X.Y), not Helm's own fallback of an old release that real charts refuse.
func defaultKubeVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "k8s.io/client-go" && strings.HasPrefix(d.Version, "v0.") {
				return "v1." + strings.TrimPrefix(d.Version, "v0.")
			}
		}
	}
	return "v1.35.0"
}

// ChartValues are the values of a chart's render as a person may see them (see
// helm.ShownValues), as YAML: Supplied are those converge passes to the chart, Computed
// those merged with the chart's own. Values a Secret gave are masked, and every value
// read from a Secret in the tree or decrypted from a SOPS file is redacted. Each is cut
// to MaxShownValuesBytes.
type ChartValues struct {
	Supplied, Computed string
	// Cut says one of them was cut short.
	Cut bool
}

// MaxShownValuesBytes caps each text of ChartValues.
const MaxShownValuesBytes = 256 << 10

// showValues keeps the values of the chart's render as shown, for Result.Values.
func (c *confinedFS) showValues(chart *helm.Chart, layers []helm.ValuesSource, inline []byte) error {
	supplied, computed, err := helm.ShownValues(chart, layers, inline)
	if err != nil {
		return err
	}
	out := &ChartValues{}
	sensitive := c.secretValues()
	for _, side := range []struct {
		vals map[string]any
		to   *string
	}{{supplied, &out.Supplied}, {computed, &out.Computed}} {
		b, err := sigsyaml.Marshal(redactTree(side.vals, sensitive))
		if err != nil {
			return fmt.Errorf("values cannot be shown: %w", err)
		}
		text := string(b)
		if len(text) > MaxShownValuesBytes {
			text, out.Cut = cutAtLine(text, MaxShownValuesBytes), true
		}
		*side.to = text
	}
	c.mu.Lock()
	c.shown = out
	c.mu.Unlock()
	return nil
}

// redactTree redacts the sensitive values in every string under v, in place.
func redactTree(v any, sensitive []string) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = redactTree(e, sensitive)
		}
	case []any:
		for i, e := range t {
			t[i] = redactTree(e, sensitive)
		}
	case string:
		return redact(t, sensitive)
	}
	return v
}

// cutAtLine cuts text to at most n bytes, at the end of a line.
func cutAtLine(text string, n int) string {
	text = text[:n]
	if i := strings.LastIndexByte(text, '\n'); i > 0 {
		text = text[:i+1]
	}
	return text
}
