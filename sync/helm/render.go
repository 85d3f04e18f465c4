package helm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
)

// Defaults of Options' bounds.
const (
	DefaultMaxLookups     = 100
	DefaultMaxOutputBytes = 64 << 20
)

// ErrRenderBound marks a render stopped by a bound: the context's deadline, MaxOutputBytes or
// MaxLookups.
var ErrRenderBound = errors.New("render bound exceeded")

// Options of one render.
type Options struct {
	ReleaseName, Namespace string
	// Values from BuildValues; coalesced over the chart's values.yaml by Render.
	Values map[string]any
	// IsUpgrade is .Release.IsUpgrade; .Release.IsInstall is its negation.
	IsUpgrade bool
	// Revision is .Release.Revision (>= 1; 0 means 1).
	Revision int
	// KubeVersion is .Capabilities.KubeVersion, e.g. "v1.35.0"; "" is Helm's default.
	KubeVersion string
	// APIVersions are added to Helm's default .Capabilities.APIVersions, e.g. "apps/v1",
	// "monitoring.coreos.com/v1/ServiceMonitor", as helm template --api-versions adds them.
	APIVersions []string
	// FromCluster says KubeVersion and APIVersions were discovered from the cluster the
	// release goes to: APIVersions then replace Helm's defaults, as in helm install.
	FromCluster bool
	// Lookup answers the template function lookup; nil answers an empty map, as helm template.
	Lookup Lookup
	// MaxLookups bounds lookup calls per render (0 = DefaultMaxLookups).
	MaxLookups int
	// MaxOutputBytes bounds the rendered manifests in all (0 = DefaultMaxOutputBytes).
	MaxOutputBytes int64
	// SkipCRDs leaves the crds/ of the chart and its subcharts out.
	SkipCRDs bool
	// DisableHooks leaves hooks (test hooks included) out.
	DisableHooks bool
}

// Lookup answers the template function lookup: name == "" lists (returns {"items": [...]},
// like Helm). It must be read-only.
type Lookup func(ctx context.Context, apiVersion, kind, namespace, name string) (map[string]any, error)

func (o Options) withDefaults() Options {
	if o.MaxLookups <= 0 {
		o.MaxLookups = DefaultMaxLookups
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if o.Revision <= 0 {
		o.Revision = 1
	}
	return o
}

// Render runs the chart's templates as Helm's install (or upgrade, with IsUpgrade) does: the
// chart's dependencies enabled by conditions and tags, import-values, values.schema.json,
// kubeVersion checked, NOTES of the top chart only. It stops when ctx ends, when the output
// exceeds MaxOutputBytes or lookups exceed MaxLookups. Nothing outside the chart is read;
// lookup goes only through opts.Lookup; there is no DNS (getHostByName answers "") and no env.
func Render(ctx context.Context, c *Chart, opts Options) (*Release, error) {
	opts = opts.withDefaults()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("render of chart %s: %w", c.Name(), err)
	}
	if err := chartutil.ValidateReleaseName(opts.ReleaseName); err != nil {
		return nil, fmt.Errorf("release name %q: %w", opts.ReleaseName, err)
	}
	ch := cloneChart(c.chart)
	caps, err := capabilities(ch, opts)
	if err != nil {
		return nil, err
	}
	vals := deepCopyMap(opts.Values)
	if err := subchartTables(ch, vals); err != nil {
		return nil, err
	}
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return nil, fmt.Errorf("chart %s: dependencies: %w", ch.Name(), err)
	}
	release := common.ReleaseOptions{
		Name: opts.ReleaseName, Namespace: opts.Namespace, Revision: opts.Revision,
		IsInstall: !opts.IsUpgrade, IsUpgrade: opts.IsUpgrade,
	}
	renderVals, err := util.ToRenderValuesWithSchemaValidation(ch, vals, release, caps, true)
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", ch.Name(), err)
	}
	if coalesced, ok := renderVals["Values"].(common.Values); ok {
		if err := validateSchemas(ch, coalesced); err != nil {
			return nil, fmt.Errorf("chart %s: values don't meet the specifications of the schema(s) in the following chart(s):\n%w", ch.Name(), err)
		}
	}
	files, err := execute(ctx, ch, renderVals, opts)
	if err != nil {
		return nil, fmt.Errorf("render of chart %s: %w", ch.Name(), err)
	}
	return collect(ch, files, opts)
}

// subchartTables refuses values that give a subchart's key anything but a map, before
// Helm's coalescing does: its error quotes the value (a Secret's, from valuesFrom) in a
// form redaction does not match.
func subchartTables(ch *chartv2.Chart, vals map[string]any) error {
	subs := map[string]*chartv2.Chart{}
	for _, sub := range ch.Dependencies() {
		subs[sub.Name()] = sub
	}
	for _, d := range ch.Metadata.Dependencies {
		if d.Alias != "" {
			subs[d.Alias] = subs[d.Name]
		}
	}
	for _, key := range slices.Sorted(maps.Keys(subs)) {
		sub := subs[key]
		v, ok := vals[key]
		if !ok || v == nil {
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("chart %s: values of subchart %s: want a map, got %T", ch.Name(), key, v)
		}
		if sub == nil {
			continue
		}
		if err := subchartTables(sub, m); err != nil {
			return err
		}
	}
	return nil
}

func capabilities(ch *chartv2.Chart, opts Options) (*common.Capabilities, error) {
	caps := common.DefaultCapabilities.Copy()
	if opts.KubeVersion != "" {
		kv, err := common.ParseKubeVersion(opts.KubeVersion)
		if err != nil {
			return nil, fmt.Errorf("kube version %q: %w", opts.KubeVersion, err)
		}
		caps.KubeVersion = *kv
	}
	versions := make(common.VersionSet, 0, len(caps.APIVersions)+len(opts.APIVersions))
	if !opts.FromCluster {
		versions = append(versions, caps.APIVersions...)
	}
	caps.APIVersions = append(versions, opts.APIVersions...)
	if kv := ch.Metadata.KubeVersion; kv != "" && !chartutil.IsCompatibleRange(kv, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart %s requires kubeVersion %s, incompatible with Kubernetes %s", ch.Name(), kv, caps.KubeVersion.Version)
	}
	return caps, nil
}

// MaxOverdueRenders bounds the template goroutines still running after their Render returned
// at its deadline (a loop whose body calls no function cannot be interrupted in Helm's
// engine). While that many run, Render refuses to start another, so a hostile chart retried
// on every reconcile cannot pile them up.
const MaxOverdueRenders = 2

var overdue atomic.Int64

// OverdueRenders is the number of template goroutines still running past their deadline: a
// render worker that has any is ended rather than reused.
func OverdueRenders() int64 { return overdue.Load() }

type engineResult struct {
	files map[string]string
	err   error
}

// execute runs Helm's engine in a goroutine, so that a template that does not end cannot hold
// the caller past ctx; the guard's functions stop the goroutine at its next function call.
func execute(ctx context.Context, ch *chartv2.Chart, vals common.Values, opts Options) (map[string]string, error) {
	if n := OverdueRenders(); n >= MaxOverdueRenders {
		return nil, fmt.Errorf("%w: %d renders are still running past their deadline (a template loop calling no function cannot be interrupted); not starting another", ErrRenderBound, n)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newGuard(ctx, opts)
	e := engine.Engine{CustomTemplateFuncs: g.funcs()}
	done := make(chan engineResult, 1)
	go func() {
		files, err := e.RenderWithContext(ctx, ch, vals)
		done <- engineResult{files: files, err: err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, g.explain(r.err)
		}
		return r.files, g.checkTotal(r.files)
	case <-ctx.Done():
		overdue.Add(1)
		go func() {
			<-done
			overdue.Add(-1)
		}()
		return nil, fmt.Errorf("%w: template execution did not end before the render deadline: %w", ErrRenderBound, ctx.Err())
	}
}

// cloneChart copies what rendering modifies (metadata, dependency list, values), so the
// loaded chart stays as it was; templates and files are shared, read-only.
func cloneChart(c *chartv2.Chart) *chartv2.Chart {
	out := *c
	md := *c.Metadata
	md.Dependencies = nil
	for _, d := range c.Metadata.Dependencies {
		dc := *d
		md.Dependencies = append(md.Dependencies, &dc)
	}
	out.Metadata = &md
	out.Values = deepCopyMap(c.Values)
	var deps []*chartv2.Chart
	for _, d := range c.Dependencies() {
		deps = append(deps, cloneChart(d))
	}
	out.SetDependencies(deps...)
	return &out
}

func deepCopyMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = deepCopyValue(v)
	}
	return out
}

func deepCopyValue(v any) any {
	switch t := v.(type) {
	case map[string]any:
		return deepCopyMap(t)
	case []any:
		out := make([]any, len(t))
		for i, x := range t {
			out[i] = deepCopyValue(x)
		}
		return out
	default:
		return v
	}
}
