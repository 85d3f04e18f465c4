package render

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/converge-gitops/converge/internal/testcharts"
	"github.com/converge-gitops/converge/sync/helm"
)

// The test binary is also the render worker of the pools these tests start.
func TestMain(m *testing.M) {
	ServeWorkerIfAsked()
	os.Exit(m.Run())
}

func newPool(t testing.TB, opts PoolOptions) *Pool {
	t.Helper()
	p, err := NewPool(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func writeFiles(t testing.TB, root, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		write(t, root, filepath.ToSlash(filepath.Join(dir, name)), content)
	}
}

// TestPoolRendersAsRenderDoes: plain manifests with SOPS and substitution, a kustomization
// and a chart with values, lookup and a custom kind's scope come back from a worker as
// the same objects, digest included, as an in-process Render.
func TestPoolRendersAsRenderDoes(t *testing.T) {
	k := newTestKeys(t)
	root := chartRepo(t)
	write(t, root, "plain/secret.yaml", string(ageOnly(k).encrypt(t, "secret.yaml", []byte(sopsSecretYAML))))
	write(t, root, "plain/cm.yaml", cm("plain", "${greeting}"))
	write(t, root, "plain/widget.yaml", "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n")
	write(t, root, "kust/kustomization.yaml", "resources: [cm.yaml]\nnamePrefix: k-\n")
	write(t, root, "kust/cm.yaml", cm("one", "1"))
	write(t, root, "charts/podinfo/templates/looked.yaml",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: looked\ndata:\n  uid: {{ (lookup \"v1\" \"Namespace\" \"\" \"shop\").metadata.uid | quote }}\n")
	lookup := func(_ context.Context, apiVersion, kind, namespace, name string) (map[string]any, error) {
		return map[string]any{"metadata": map[string]any{"uid": "uid-of-" + kind + "-" + name, "generation": int64(3)}}, nil
	}
	scope := func(gvk schema.GroupVersionKind) (bool, error) { return gvk.Kind != "Widget", nil }
	cases := map[string]Options{
		"plain": {Root: root, Path: "plain", OwnerName: "web", OwnerNamespace: "shop", TargetNamespace: "shop",
			Decryption: testKeyring(t, k), Substitute: &Substitution{Vars: map[string]string{"greeting": "hi"}}, IsNamespaced: scope},
		"kustomize": {Root: root, Path: "kust", OwnerName: "web", OwnerNamespace: "shop"},
		"chart": {Root: root, Path: "charts/podinfo", OwnerName: "web", OwnerNamespace: "shop",
			Helm: &HelmOptions{ReleaseName: "web", Namespace: "shop", ValuesFiles: []string{"../../env/prod.yaml"},
				Values: []helm.ValuesSource{{Name: "ConfigMap/ui[values.yaml]", Data: []byte("ui:\n  message: hello\n")}},
				Inline: []byte(`{"replicaCount":4}`), Lookup: lookup}},
	}
	p := newPool(t, PoolOptions{})
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			want, err := Render(context.Background(), opts)
			g.Expect(err).NotTo(HaveOccurred())
			got, err := p.Render(context.Background(), "shop", opts)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Digest).To(Equal(want.Digest))
			g.Expect(got.Chart).To(Equal(want.Chart))
			g.Expect(got.Kustomized).To(Equal(want.Kustomized))
			g.Expect(ids(got.Objects)).To(Equal(ids(want.Objects)))
			for i := range got.Objects {
				g.Expect(got.Objects[i].Object).To(Equal(want.Objects[i].Object))
			}
		})
	}
	g := NewWithT(t)
	res, err := p.Render(context.Background(), "shop", cases["chart"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(findObject(t, res, "ConfigMap", "looked")["data"]).To(Equal(map[string]any{"uid": "uid-of-Namespace-shop"}))
	res, err = p.Render(context.Background(), "shop", cases["plain"])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(byName(res.Objects, "w").GetNamespace()).To(BeEmpty(), "Widget is cluster-scoped by the caller's answer")
}

// A render asked to keep its sensitive values returns, across the worker boundary, every
// value it decrypted and every value of a Secret in its files; one not asked keeps none.
func TestPoolKeepsSensitiveValuesWhenAsked(t *testing.T) {
	g := NewWithT(t)
	k := newTestKeys(t)
	root := t.TempDir()
	write(t, root, "app/cm.yaml", string(ageOnly(k).encrypt(t, "cm.yaml", []byte(cm("cfg", "decrypted-plaintext")))))
	write(t, root, "app/secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  password: plain-secret-value\n")
	opts := Options{Root: root, Path: "app", OwnerName: "web", OwnerNamespace: "shop", Decryption: testKeyring(t, k)}
	p := newPool(t, PoolOptions{})
	res, err := p.Render(context.Background(), "shop", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Sensitive).To(BeEmpty())
	opts.KeepSensitive = true
	res, err = p.Render(context.Background(), "shop", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Sensitive).To(ContainElements("decrypted-plaintext", "plain-secret-value"))
	g.Expect(res.Objects).To(HaveLen(2))
}

// TestPoolKeepsErrorClasses: a failed render in a worker is the same *Error as in
// process: file, document, message and class.
func TestPoolKeepsErrorClasses(t *testing.T) {
	root, _ := newRepo(t)
	write(t, root, "bad/a.yaml", cm("a", "1")+"---\nkind: [\n")
	write(t, root, "sops/secret.yaml", string(ageOnly(newTestKeys(t)).encrypt(t, "secret.yaml", []byte(sopsSecretYAML))))
	p := newPool(t, PoolOptions{})
	for _, c := range []struct {
		path  string
		class error
	}{{"bad", ErrInvalidDocument}, {"sops", ErrDecryption}, {"missing", ErrNotFound}} {
		g := NewWithT(t)
		_, want := Render(context.Background(), Options{Root: root, Path: c.path})
		_, err := p.Render(context.Background(), "shop", Options{Root: root, Path: c.path})
		g.Expect(err).To(MatchError(c.class))
		g.Expect(err.Error()).To(Equal(want.Error()))
		var re, wre *Error
		g.Expect(errors.As(err, &re)).To(BeTrue())
		g.Expect(errors.As(want, &wre)).To(BeTrue())
		g.Expect([]any{re.File, re.Document}).To(Equal([]any{wre.File, wre.Document}))
	}
}

// hostileChart writes a chart and returns the options rendering it.
func hostileChart(t *testing.T, files map[string]string, values string) Options {
	root := t.TempDir()
	writeFiles(t, root, "chart", files)
	h := &HelmOptions{ReleaseName: "evil", Namespace: "evil"}
	if values != "" {
		h.Values = []helm.ValuesSource{{Name: "values", Data: []byte(values)}}
	}
	return Options{Root: root, Path: "chart", Helm: h, Timeout: 20 * time.Second}
}

// TestPoolContainsHostileCharts: each template that would take a process down (a
// recursion through tpl, output or memory that doubles per line, a loop that calls no
// function) fails its own render with a clear error, the worker it ran in is gone, the
// caller's memory does not grow with it, and the pool renders the next chart as usual.
func TestPoolContainsHostileCharts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts render workers that run to their bounds")
	}
	chart, values := testcharts.TplRecursionThroughValues("values")
	cases := []struct {
		name   string
		opts   Options
		class  error
		want   string
		reason string
	}{
		// Each tpl parses a template anew: the heap may reach the bound before the stack.
		{"tpl recursion", hostileChart(t, testcharts.TplRecursion("tpl"), ""), ErrRenderWorker, recursionEnd, "(stack|memory)"},
		{"tpl recursion through values", hostileChart(t, chart, values), ErrRenderWorker, recursionEnd, "(stack|memory)"},
		{"list doubling", hostileChart(t, testcharts.ListDoubling("lists", 24), ""), ErrRenderWorker, "^render used more than 256 MiB of memory; its worker was stopped$", "memory"},
		// Its memory stays small; its time doubles per level.
		{"include doubling", withTimeout(hostileChart(t, testcharts.IncludeDoubling("includes", 22), ""), 3*time.Second), ErrRenderTimeout, "^render exceeded 3s$", "timeout"},
		{"loop calling no function", withTimeout(hostileChart(t, testcharts.NestedRange("spin"), ""), 2*time.Second), ErrRenderTimeout, "^render exceeded 2s$", "timeout"},
	}
	var stopped []string
	p := newPool(t, PoolOptions{MemoryLimit: 256 << 20, Stopped: func(tenant, reason string) { stopped = append(stopped, tenant+"/"+reason) }})
	benign := hostileChart(t, testcharts.Benign("benign"), "")
	before := heapInUse()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := NewWithT(t)
			stopped = nil
			res, err := p.Render(context.Background(), "evil", c.opts)
			g.Expect(res).To(BeNil())
			g.Expect(err).To(MatchError(c.class))
			g.Expect(err.Error()).To(MatchRegexp(c.want))
			g.Expect(stopped).To(HaveExactElements(MatchRegexp("^evil/" + c.reason + "$")))
			res, err = p.Render(context.Background(), "good", benign)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ids(res.Objects)).To(Equal([]string{"ConfigMap evil/evil-benign"}))
		})
	}
	if grown := heapInUse() - before; grown > 64<<20 {
		t.Errorf("the caller's heap grew by %d MiB over the hostile renders", grown>>20)
	}
}

// recursionEnd is how a template recursion ends: at the stack's bound or the memory's.
const recursionEnd = "^render (recursed past its stack bound of 64 MiB|used more than 256 MiB of memory)"

func withTimeout(o Options, d time.Duration) Options {
	o.Timeout = d
	return o
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// TestPoolGivesEachTenantItsShare: while one tenant's renders spin to their deadline in
// every worker, its share and one lent, another tenant's render is served within LendFor.
func TestPoolGivesEachTenantItsShare(t *testing.T) {
	if testing.Short() {
		t.Skip("starts render workers that run to their deadline")
	}
	g := NewWithT(t)
	p := newPool(t, PoolOptions{Workers: 2, PerTenant: 1})
	spin := withTimeout(hostileChart(t, testcharts.NestedRange("spin"), ""), 30*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := p.Render(ctx, "evil", spin)
			errs <- err
		}()
	}
	benign := hostileChart(t, testcharts.Benign("benign"), "")
	for range 3 {
		done := make(chan error, 1)
		go func() {
			_, err := p.Render(context.Background(), "good", benign)
			done <- err
		}()
		// Bounded by far less than the spinning renders' 30 s deadline.
		g.Eventually(done, 10*time.Second).Should(Receive(BeNil()))
	}
	g.Consistently(errs, 200*time.Millisecond).ShouldNot(Receive(), "the spinning renders still run")
	cancel()
	g.Eventually(errs, 5*time.Second).Should(Receive(MatchError(context.Canceled)))
	g.Eventually(errs, 5*time.Second).Should(Receive(MatchError(context.Canceled)))
}

// gatedChart is a chart whose render calls lookup, answered by the test: entered is told
// of each render that reached it, and the render goes on once open is closed.
func gatedChart(t *testing.T, entered chan<- string, open <-chan struct{}) Options {
	o := hostileChart(t, map[string]string{
		"Chart.yaml":        "apiVersion: v2\nname: gated\nversion: 0.1.0\n",
		"templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: gated\ndata:\n  uid: {{ (lookup \"v1\" \"Namespace\" \"\" \"shop\").metadata.uid | quote }}\n",
	}, "")
	o.Helm.Lookup = func(ctx context.Context, _, _, _, name string) (map[string]any, error) {
		entered <- name
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return map[string]any{"metadata": map[string]any{"uid": "u"}}, nil
	}
	return o
}

// renderTwiceAtOnce starts two renders of a gated chart for tenant and waits until both
// are inside their templates; they finish, into errs, once open is closed.
func renderTwiceAtOnce(g Gomega, t *testing.T, p *Pool, tenant string) (entered chan string, open chan struct{}, errs chan error) {
	entered, open, errs = make(chan string, 8), make(chan struct{}), make(chan error, 2)
	gated := gatedChart(t, entered, open)
	for range 2 {
		go func() {
			_, err := p.Render(context.Background(), tenant, gated)
			errs <- err
		}()
	}
	g.Eventually(entered, 20*time.Second).Should(Receive())
	g.Eventually(entered, 20*time.Second).Should(Receive())
	return entered, open, errs
}

// TestPoolLendsIdleWorkersToOneTenant: a tenant alone renders on every worker, beyond its
// share, while no other tenant waits.
func TestPoolLendsIdleWorkersToOneTenant(t *testing.T) {
	g := NewWithT(t)
	p := newPool(t, PoolOptions{Workers: 2, PerTenant: 1})
	// Both renders are inside their templates at once: one on the tenant's share, one lent.
	_, open, errs := renderTwiceAtOnce(g, t, p, "alone")
	close(open)
	g.Eventually(errs, 20*time.Second).Should(Receive(BeNil()))
	g.Eventually(errs, 20*time.Second).Should(Receive(BeNil()))
}

// TestPoolTakesBackALentWorker: a tenant rendering on both workers, one lent, gives the lent
// one back to another tenant once it has waited LendFor; the render that was taken back
// runs again within its own tenant's share and succeeds, and nothing is counted as stopped.
func TestPoolTakesBackALentWorker(t *testing.T) {
	g := NewWithT(t)
	var stops []string
	p := newPool(t, PoolOptions{Workers: 2, PerTenant: 1, LendFor: 300 * time.Millisecond,
		Stopped: func(tenant, reason string) { stops = append(stops, tenant+": "+reason) }})
	entered, open, errs := renderTwiceAtOnce(g, t, p, "busy")

	other := make(chan error, 1)
	go func() {
		_, err := p.Render(context.Background(), "other", hostileChart(t, testcharts.Benign("benign"), ""))
		other <- err
	}()
	// Served though both workers hold renders that wait for ever: the lent one was ended.
	g.Eventually(other, 20*time.Second).Should(Receive(BeNil()))
	g.Consistently(errs, 200*time.Millisecond).ShouldNot(Receive(), "the busy tenant's renders go on")
	close(open)
	// The taken-back render ran again (entering its template a third time) and succeeded.
	g.Eventually(entered, 20*time.Second).Should(Receive())
	g.Eventually(errs, 20*time.Second).Should(Receive(BeNil()))
	g.Eventually(errs, 20*time.Second).Should(Receive(BeNil()))
	g.Expect(stops).To(BeEmpty())
}

// A chart rendered in a worker with ShowValues returns its values as a person may see
// them: what a Secret layer gave masked, what a SOPS-encrypted values file gave redacted,
// the chart's own values in the computed side; without ShowValues, none.
func TestPoolShowsChartValuesWhenAsked(t *testing.T) {
	g := NewWithT(t)
	k := newTestKeys(t)
	root := chartRepo(t)
	write(t, root, "env/ui.yaml", "ui:\n  message: hello\n")
	write(t, root, "env/db.enc.yaml", string(ageOnly(k).encrypt(t, "db.enc.yaml", []byte("data:\n  url: sops-decrypted-url\n"))))
	helmOpts := &HelmOptions{ReleaseName: "web", Namespace: "shop", ValuesFiles: []string{"../../env/ui.yaml", "../../env/db.enc.yaml"},
		Values: []helm.ValuesSource{{Name: "Secret/db[values.yaml]", Data: []byte("db:\n  password: layer-secret\n"), Sensitive: true}},
		Inline: []byte(`{"replicaCount":4}`)}
	opts := Options{Root: root, Path: "charts/podinfo", OwnerName: "web", OwnerNamespace: "shop", Helm: helmOpts,
		Decryption: testKeyring(t, k)}
	p := newPool(t, PoolOptions{})
	res, err := p.Render(context.Background(), "shop", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Values).To(BeNil())

	helmOpts.ShowValues = true
	res, err = p.Render(context.Background(), "shop", opts)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Values).NotTo(BeNil())
	g.Expect(res.Values.Supplied).To(And(ContainSubstring("replicaCount: 4"), ContainSubstring("message: hello"),
		ContainSubstring("password: '*** (from Secret/db[values.yaml])'"), ContainSubstring("url: '[redacted]'")))
	g.Expect(res.Values.Computed).To(And(ContainSubstring("replicaCount: 4"), ContainSubstring("repository: ghcr.io/stefanprodan/podinfo")))
	for _, text := range []string{res.Values.Supplied, res.Values.Computed} {
		g.Expect(text).NotTo(Or(ContainSubstring("layer-secret"), ContainSubstring("sops-decrypted-url")))
	}
	g.Expect(res.Values.Cut).To(BeFalse())
}
