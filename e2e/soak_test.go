package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
	"github.com/converge-gitops/converge/internal/faultproxy"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/testcharts"
	"github.com/converge-gitops/converge/soak"
)

// The soak: the real daemons (two replicas of one shard with leader election, and a second
// shard) behind a proxy to the API server that delays, drops and partitions, following
// repositories behind a proxy to the git server that goes down and slows, deploying to
// this cluster and to a remote one behind a proxy of its own; a seeded driver pushes
// commits of every kind (good, failing health, failing to render, pruning too much, a
// hostile chart), edits live objects by hand and keeps objects converge must not touch,
// while faults come at random; the invariants of package soak are checked at every quiet
// point and once the faults stop. SOAK_DURATION sets how long the driver and faults run
// (default 50s a seed), SOAK_SEED replays one run, SOAK_SCALE multiplies the workload,
// and SOAK_FULL=1 (make soak, alone on the cluster) adds faults that touch everyone: the
// API server restarted, etcd paused. Without SOAK_SEED, a fixed seed runs, then a random one.

// soakConfig is what the environment asks of the soak.
type soakConfig struct {
	duration time.Duration
	seeds    []int64
	scale    int
	full     bool
}

// soakFixedSeed is the seed every make test replays.
const soakFixedSeed = 20261206

func soakConfigFromEnv(t *testing.T) soakConfig {
	cfg := soakConfig{duration: 50 * time.Second, scale: 1, full: os.Getenv("SOAK_FULL") == "1"}
	if s := os.Getenv("SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 10*time.Second {
			t.Fatalf("SOAK_DURATION=%q: want a duration of 10s or more", s)
		}
		cfg.duration = d
	}
	if s := os.Getenv("SOAK_SCALE"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 20 {
			t.Fatalf("SOAK_SCALE=%q: want 1 to 20", s)
		}
		cfg.scale = n
	}
	if s := os.Getenv("SOAK_SEED"); s != "" {
		seed, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("SOAK_SEED=%q: want an integer", s)
		}
		cfg.seeds = []int64{seed}
	} else {
		var b [8]byte
		_, _ = rand.Read(b[:])
		cfg.seeds = []int64{soakFixedSeed, int64(binary.LittleEndian.Uint64(b[:]) >> 1)}
	}
	return cfg
}

// Scenario 60: the soak.
func TestSoak(t *testing.T) {
	run(t, 60, "soak under faults", parallel, func(s *scenario) {
		cfg := soakConfigFromEnv(t)
		env := newSoakEnv(s, cfg)
		for i, seed := range cfg.seeds {
			t.Logf("soak run %d of %d: seed %d, %s (replay: SOAK_SEED=%d SOAK_DURATION=%s make soak)",
				i+1, len(cfg.seeds), seed, cfg.duration, seed, cfg.duration)
			rep := env.run(i, seed)
			var b bytes.Buffer
			rep.Write(&b)
			t.Log("\n" + b.String())
			for _, v := range rep.Violations() {
				t.Errorf("seed %d: %s", seed, v)
			}
			s.latency(fmt.Sprintf("soak seed %d: commit→healthy p50", seed), soak.Percentile(rep.Latencies(), 50))
			if t.Failed() {
				return
			}
		}
	})
}

// soakEnv is what the runs of one scenario share: the daemons and the proxies.
type soakEnv struct {
	s       *scenario
	cfg     soakConfig
	api     *faultproxy.Proxy // the daemons' way to the API server
	git     *faultproxy.Proxy // the SyncTargets' way to the git server
	remote  *faultproxy.Proxy // the remote SyncTargets' way to the remote cluster
	charts  *charttest.HTTPRepo
	chartsP *faultproxy.Proxy // the chart SyncTargets' way to the chart repository
	hooks   []string          // each daemon's push webhook receiver, "http://host:port"
	rc      *remoteCluster
	daemons []*daemon // shard a's two replicas, then shard b
	token   []byte    // the value of the Secret the YAML targets substitute

	mu     sync.Mutex
	etcd   int // pid of etcd, for SOAK_FULL's pause
	faults []faultSpan
	rep    *soak.Report // the report of the run going on, for the supervisor's restarts
}

// faultSpan is when a fault was on.
type faultSpan struct{ from, to time.Time }

const (
	soakShardA = "soak-a"
	soakShardB = "soak-b"
	soakSecret = "soak-secret"
	soakVar    = "soak_token"
)

func newSoakEnv(s *scenario, cfg soakConfig) *soakEnv {
	t := s.t
	e := &soakEnv{s: s, cfg: cfg, rc: sharedRemote(t)}
	var err error
	apiHost := hostOf(suite.cluster.Config.Host)
	if e.api, err = faultproxy.Listen("127.0.0.1:0", apiHost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.api.Close)
	gitHost := hostOf(suite.http.URL)
	if e.git, err = faultproxy.Listen("127.0.0.1:0", gitHost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.git.Close)
	remoteHost := hostOf(e.rc.Config.Host)
	if e.remote, err = faultproxy.Listen("127.0.0.1:0", remoteHost); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.remote.Close)
	e.charts = charttest.NewHTTPRepo()
	t.Cleanup(e.charts.Close)
	if e.chartsP, err = faultproxy.Listen("127.0.0.1:0", hostOf(e.charts.URL())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.chartsP.Close)

	// The daemons reach the API server through the proxy only.
	kubeconfig, err := os.ReadFile(suite.cluster.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	proxied := path.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(proxied, bytes.ReplaceAll(kubeconfig, []byte(apiHost), []byte(e.api.Addr())), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--kubeconfig", proxied, "--allow-loopback-clusters", "--concurrency", "4",
		"--render-timeout", "15s", "--render-memory-limit", "256Mi",
		"--leader-elect", "--leader-election-namespace", s.ns,
		"--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s",
		"--leader-election-retry-period", "500ms"}
	for _, d := range []struct{ name, shard string }{{"soak-a1", soakShardA}, {"soak-a2", soakShardA}, {"soak-b", soakShardB}} {
		hook := freeAddr(t)
		e.hooks = append(e.hooks, "http://"+hook)
		args := append(slices.Clone(common), "--watch-label-selector", shardLabel+"="+d.shard, "--leader-election-id", d.shard,
			"--webhook-bind-address", hook)
		dm := startDaemon(t, d.name, args...)
		s.explainWith(dm)
		e.daemons = append(e.daemons, dm)
	}
	for _, d := range e.daemons {
		if err := d.waitReady(60 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.supervise(ctx) })
	// Registered after the daemons' own clean-ups, so it runs before them: nothing starts a
	// daemon the clean-up stops.
	t.Cleanup(func() { cancel(); wg.Wait() })
	e.token = []byte(randomString())
	s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: soakSecret, Namespace: s.ns},
		Data: map[string][]byte{soakVar: e.token}})
	if cfg.full {
		for _, pid := range localcluster.ChildrenMentioning(os.Getpid(), suite.cluster.Dir) {
			if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == "etcd" {
				e.etcd = pid
			}
		}
		if e.etcd == 0 {
			t.Fatal("SOAK_FULL: no etcd process of the suite's cluster found")
		}
	}
	return e
}

// supervise is the daemons' orchestrator for the whole scenario, set-up included: a
// replica exits when it loses its lease (a loaded machine can hold a renewal past its
// deadline), and is started again, as a Deployment's Pod would be. A daemon a fault killed
// is the fault's to start.
func (e *soakEnv) supervise(ctx context.Context) {
	for {
		for _, d := range e.daemons {
			restarted, err := d.startIfExited()
			switch {
			case err != nil:
				e.s.t.Logf("starting %s again after it exited: %v", d.name, err)
			case restarted:
				e.mu.Lock()
				if e.rep != nil {
					e.rep.Op("restart after exit")
				}
				e.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// away is how long faults were on between from and to, each counted with 10 s more for
// what it leaves behind (watches to restart, back-offs, a lease to expire).
func (e *soakEnv) away(from, to time.Time) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	var d time.Duration
	for _, f := range e.faults {
		end := f.to
		if end.IsZero() {
			end = to
		}
		end = end.Add(10 * time.Second)
		lo, hi := maxTime(f.from, from), minTime(end, to)
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

// hostOf is the host:port of a URL, or the address itself.
func hostOf(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		u = u[i+3:]
	}
	return strings.Split(u, "/")[0]
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// soakKind is the shape of a SyncTarget of the workload.
type soakKind string

const (
	kindYAML      soakKind = "yaml"      // ConfigMaps, a Deployment and a substituted Secret value
	kindKustomize soakKind = "kustomize" // ConfigMaps through a kustomization's namePrefix
	kindChart     soakKind = "chart"     // a chart in Git rendering ConfigMaps from its values
	kindDependent soakKind = "dependent" // ConfigMaps, dependsOn the YAML target
	kindRemote    soakKind = "remote"    // ConfigMaps on the remote cluster
	kindSet       soakKind = "set"       // generated by a SyncTargetSet, one directory each
	kindChartRepo soakKind = "chartrepo" // a chart from a chart repository, each commit a version
)

// soakTarget is one SyncTarget of the workload and the driver's model of it.
type soakTarget struct {
	name, shard, ns string
	kind            soakKind
	repo            *soakRepo
	dir             string // the directory it applies, in its repository
	st              *convergev1.SyncTarget

	// Guarded by the run's mutex.
	values    map[string]string // ConfigMap name → value of the newest good revision
	image     string            // the Deployment's image (kindYAML)
	commits   map[string]soak.Commit
	newest    string // the newest revision pushed that touches it
	good      string // the newest good revision
	healthy   string // the revision its status last named healthy (the check goroutine's)
	history   []convergev1.HistoryEntry
	noted     map[string]bool // revisions counted in the report, by result (the check goroutine's)
	drift     *soak.Drift
	driftKey  string
	driftMark string
	// suspect is a difference between the live objects and the applied revision seen
	// while the status did not change: a sync may be applying without having said so yet
	// (a revision that adds no object is applied before its first status write). It is a
	// violation once it outlasts soakSettleBound, the status unchanged all along.
	suspect   []soak.Violation
	suspectRV string
	suspectAt time.Time
}

// soakRepo is a repository of the workload, the SyncTargets following it and the files it
// holds at its newest good revision.
type soakRepo struct {
	chart   string // a chart of the chart repository instead of a Git repository
	version int    // the chart's last version published: 0.1.<version>
	r       *repo
	targets []*soakTarget
	tree    map[string]string
}

// soakRun is one seeded run.
type soakRun struct {
	e       *soakEnv
	idx     int
	rng     *mrand.Rand
	rep     *soak.Report
	ledger  soak.Ledger
	targets []*soakTarget
	repos   []*soakRepo
	foreign map[string]soak.Version
	samples map[string][]soak.Sample // daemon name/pid → samples
	counter int

	mu sync.Mutex
}

func (e *soakEnv) run(idx int, seed int64) *soak.Report {
	t := e.s.t
	r := &soakRun{e: e, idx: idx, rng: mrand.New(mrand.NewPCG(uint64(seed), uint64(seed)^0x5eed)),
		rep: &soak.Report{Seed: seed, Duration: e.cfg.duration}, samples: map[string][]soak.Sample{}}
	e.mu.Lock()
	e.rep = r.rep
	e.mu.Unlock()
	r.setUp()
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.duration)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { r.drive(ctx) })
	wg.Go(func() { r.inject(ctx) })
	wg.Go(func() { r.sample(ctx) })
	// The checks run on this goroutine, until the driver and the faults stop.
	for ctx.Err() == nil {
		r.checkAll(false)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	wg.Wait()
	r.converge()
	t.Logf("soak run %d: checks done", idx+1)
	return r.rep
}

// setUp creates the run's namespaces, repositories, SyncTargets and foreign objects, and
// waits for every SyncTarget's first revision to be healthy.
func (r *soakRun) setUp() {
	s, t := r.e.s, r.e.s.t
	for i := range r.e.cfg.scale {
		prefix := fmt.Sprintf("r%d-%d", r.idx, i)
		for _, k := range []soakKind{kindYAML, kindKustomize, kindChart, kindDependent, kindRemote, kindChartRepo} {
			name := prefix + "-" + string(k)
			shard := soakShardA
			if k == kindRemote || k == kindChartRepo {
				shard = soakShardB
			}
			tg := &soakTarget{name: name, shard: shard, kind: k, ns: s.ns + "-" + name, dir: "deploy"}
			rp := &soakRepo{targets: []*soakTarget{tg}, tree: map[string]string{}}
			if k == kindChartRepo {
				rp.chart, tg.dir = "soak-"+name, "."
			} else {
				rp.r = s.repo(name)
			}
			tg.repo = rp
			r.targets = append(r.targets, tg)
			r.repos = append(r.repos, rp)
		}
		set := &soakRepo{r: s.repo(prefix + "-set"), tree: map[string]string{}}
		for _, d := range []string{"x", "y"} {
			name := prefix + "-set-" + d
			tg := &soakTarget{name: name, shard: soakShardB, kind: kindSet, ns: s.ns + "-" + name, dir: "deploy/" + d, repo: set}
			set.targets = append(set.targets, tg)
			r.targets = append(r.targets, tg)
		}
		r.repos = append(r.repos, set)
	}
	for _, tg := range r.targets {
		tg.commits, tg.noted = map[string]soak.Commit{}, map[string]bool{}
		tg.values = map[string]string{}
		for j := range 4 {
			tg.values[fmt.Sprintf("cm-%d", j)] = r.value()
		}
		tg.image = "example.com/web:1"
		if tg.kind == kindRemote {
			r.e.rc.namespace(t, tg.ns)
		} else {
			s.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tg.ns}})
		}
	}
	r.makeForeign()
	// The first revision of every repository, then the SyncTargets.
	for _, rp := range r.repos {
		r.commit(rp, nil, soak.Good)
	}
	remoteKubeconfig := bytes.ReplaceAll(r.e.rc.kubeconfig, []byte(hostOf(r.e.rc.Config.Host)), []byte(r.e.remote.Addr()))
	secret := fmt.Sprintf("r%d-remote", r.idx)
	s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secret, Namespace: s.ns}, Data: map[string][]byte{"value": remoteKubeconfig}})
	for _, rp := range r.repos {
		if rp.targets[0].kind == kindSet {
			r.createSet(rp)
			continue
		}
		tg := rp.targets[0]
		if tg.kind == kindChartRepo {
			tg.st = r.chartTarget(tg)
			continue
		}
		tg.st = r.syncTarget(tg, func(st *convergev1.SyncTarget) {
			switch tg.kind {
			case kindYAML:
				st.Spec.PostBuild = &convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{{Kind: "Secret", Name: soakSecret}}}
			case kindDependent:
				st.Spec.DependsOn = []convergev1.DependencyReference{{Name: strings.TrimSuffix(tg.name, string(kindDependent)) + string(kindYAML)}}
			case kindRemote:
				toRemote(secret)(st)
			}
		})
	}
	for _, tg := range r.targets {
		if tg.st == nil {
			tg.st = &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: tg.name, Namespace: s.ns}}
		}
	}
	for _, tg := range r.targets {
		if tg.kind == kindSet {
			NewWithT(t).Eventually(func(g Gomega) {
				set := &convergev1.SyncTargetSet{}
				g.Expect(suite.k8s.Get(context.Background(), client.ObjectKey{Namespace: s.ns, Name: tg.setName()}, set)).To(Succeed())
				err := suite.k8s.Get(context.Background(), client.ObjectKeyFromObject(tg.st), &convergev1.SyncTarget{})
				g.Expect(err).NotTo(HaveOccurred(), "SyncTargetSet %s: %+v", set.Name, set.Status)
			}).WithTimeout(time.Minute).Should(Succeed())
		}
		s.eventually(tg.st, 3*time.Minute, func(g Gomega, st *convergev1.SyncTarget) { healthy(g, st, tg.good) })
	}
}

// syncTarget creates tg's SyncTarget, its repository reached through the git proxy.
func (r *soakRun) syncTarget(tg *soakTarget, mutate func(*convergev1.SyncTarget)) *convergev1.SyncTarget {
	s := r.e.s
	maxDeletions := intstr.FromInt(soakMaxDeletions)
	return s.syncTarget(tg.name, tg.repo.r, func(st *convergev1.SyncTarget) {
		st.Labels = map[string]string{shardLabel: tg.shard}
		st.Spec.Source.URL = r.proxiedURL(tg.repo.r)
		st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: webhookSecret}
		st.Spec.TargetNamespace = tg.ns
		st.Spec.Timeout = &metav1.Duration{Duration: 20 * time.Second}
		st.Spec.MaxDeletions = &maxDeletions
		mutate(st)
	})
}

// chartTarget creates the SyncTarget of a chart of the chart repository, reached through
// its proxy, following its newest version.
func (r *soakRun) chartTarget(tg *soakTarget) *convergev1.SyncTarget {
	s := r.e.s
	maxDeletions := intstr.FromInt(soakMaxDeletions)
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: tg.name, Namespace: s.ns, Labels: map[string]string{shardLabel: tg.shard}},
		Spec: convergev1.SyncTargetSpec{
			Chart: &convergev1.ChartSource{Repository: "http://" + r.e.chartsP.Addr(), Name: tg.repo.chart, Version: ">=0.1.0",
				Interval: &metav1.Duration{Duration: 2 * time.Second}},
			TargetNamespace: tg.ns,
			Prune:           true,
			Timeout:         &metav1.Duration{Duration: 20 * time.Second},
			MaxDeletions:    &maxDeletions,
		},
	}
	s.create(st)
	s.t.Cleanup(func() { _ = suite.k8s.Delete(context.Background(), st) })
	return st
}

// proxiedURL is the clone URL of rp through the git proxy.
func (r *soakRun) proxiedURL(rp *repo) string {
	u := rp.httpURL()
	return strings.Replace(u, hostOf(u), r.e.git.Addr(), 1)
}

// setName is the name of the SyncTargetSet that generates tg (kindSet).
func (tg *soakTarget) setName() string {
	return tg.name[:strings.LastIndex(tg.name, "-")]
}

// createSet creates the SyncTargetSet generating the SyncTargets of rp, one a directory.
func (r *soakRun) createSet(rp *soakRepo) {
	s := r.e.s
	g := NewWithT(s.t)
	var elements []map[string]string
	for _, tg := range rp.targets {
		elements = append(elements, map[string]string{"dir": path.Base(tg.dir), "ns": tg.ns})
	}
	spec := fleetSpec(g, rp.r, map[string]any{"path": "deploy/{{ .dir }}", "targetNamespace": "{{ .ns }}",
		"timeout": "20s", "maxDeletions": soakMaxDeletions})
	var m map[string]any
	g.Expect(json.Unmarshal(spec.Raw, &m)).To(Succeed())
	m["source"].(map[string]any)["url"] = r.proxiedURL(rp.r)
	m["source"].(map[string]any)["webhookSecretRef"] = map[string]any{"name": webhookSecret}
	spec.Raw, _ = json.Marshal(m)
	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: rp.targets[0].setName(),
		Namespace: s.ns, Labels: map[string]string{shardLabel: soakShardB}},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{List: &convergev1.ListGenerator{Elements: elements}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: strings.TrimSuffix(rp.targets[0].name, "x") + "{{ .dir }}",
					Labels: map[string]string{shardLabel: soakShardB}},
				Spec: spec,
			},
		}}
	s.create(set)
	s.t.Cleanup(func() { _ = suite.k8s.Delete(context.Background(), set) })
}

// value is a new ConfigMap value.
func (r *soakRun) value() string {
	r.counter++
	return fmt.Sprintf("v%d", r.counter)
}

// files renders tg's directory: its values, and what a commit of kind k adds.
func (tg *soakTarget) files(k soak.Kind) map[string]string {
	names := slices.Sorted(maps.Keys(tg.values))
	out := map[string]string{}
	var cms strings.Builder
	for _, n := range names {
		fmt.Fprintf(&cms, "---\n%s", configMap(n, tg.values[n]))
	}
	switch tg.kind {
	case kindChart, kindChartRepo:
		var values strings.Builder
		values.WriteString("items:\n")
		for _, n := range names {
			fmt.Fprintf(&values, "  %s: %q\n", n, tg.values[n])
		}
		out["Chart.yaml"] = fmt.Sprintf("apiVersion: v2\nname: %s\nversion: 0.1.%d\n", tg.repo.chartName(), tg.repo.version)
		out["values.yaml"] = values.String()
		out["templates/cms.yaml"] = "{{- range $k, $v := .Values.items }}\n---\napiVersion: v1\nkind: ConfigMap\n" +
			"metadata:\n  name: {{ $k }}\ndata:\n  value: {{ $v | quote }}\n{{- end }}\n"
		switch k {
		case soak.FailsRender:
			out["templates/broken.yaml"] = "{{ .Values.items | nosuchfunction }}\n"
		case soak.Hostile:
			out["templates/boom.yaml"] = testcharts.TplRecursion("soak")["templates/boom.yaml"]
		}
	case kindKustomize:
		out["cms.yaml"] = cms.String()
		out["kustomization.yaml"] = "namePrefix: k-\nresources:\n- cms.yaml\n"
		if k == soak.FailsRender {
			out["kustomization.yaml"] += "- missing.yaml\n"
		}
	default:
		out["cms.yaml"] = cms.String()
		if k == soak.FailsRender {
			out["broken.yaml"] = "apiVersion: v1\nkind: ConfigMap\nmetadata: [name\n"
		}
	}
	if tg.kind == kindYAML {
		sel := ""
		if k == soak.FailsHealth {
			sel = "no-such-node: anywhere"
		}
		out["web.yaml"] = deployment("web", 1, tg.image, sel)
		out["secret-cm.yaml"] = configMap("secret-cm", "${"+soakVar+"}")
	}
	return out
}

// chartName is the name of rp's chart: its chart repository name, or "soak" in Git.
func (rp *soakRepo) chartName() string {
	if rp.chart != "" {
		return rp.chart
	}
	return "soak"
}

// want is what a SyncTarget that applied tg's newest good revision holds (key → content).
func (tg *soakTarget) want(token []byte) map[string]string {
	prefix := tg.configMapPrefix()
	out := map[string]string{}
	for n, v := range tg.values {
		out["ConfigMap/"+prefix+n] = v
	}
	if tg.kind == kindYAML {
		out["Deployment/web"] = tg.image
		out["ConfigMap/secret-cm"] = string(token)
	}
	return out
}

// commit pushes to rp a commit of kind k for target (nil: a good commit of every target's
// current values) and records, for each SyncTarget following rp, what it is meant to do.
// Called with r.mu held, or before the run's goroutines start.
func (r *soakRun) commit(rp *soakRepo, target *soakTarget, k soak.Kind) {
	t := r.e.s.t
	if rp.chart != "" {
		r.publish(rp, target, k)
		return
	}
	tree := map[string]string{}
	for _, tg := range rp.targets {
		kind := soak.Good
		if tg == target {
			kind = k
		}
		for p, c := range tg.files(kind) {
			tree[tg.dir+"/"+p] = c
		}
	}
	var changes []gittest.Change
	for p, c := range tree {
		if rp.tree[p] != c {
			changes = append(changes, gittest.Change{Path: p, Content: c})
		}
	}
	for p := range rp.tree {
		if _, ok := tree[p]; !ok {
			changes = append(changes, gittest.Change{Path: p, Delete: true})
		}
	}
	slices.SortFunc(changes, func(a, b gittest.Change) int { return strings.Compare(a.Path, b.Path) })
	at := time.Now()
	rev := revision(rp.r.CommitChanges(t, "main", changes...))
	rp.tree = tree
	if r.rng.IntN(2) == 0 {
		r.hook(rp)
	}
	for _, tg := range rp.targets {
		kind := soak.Good
		if tg == target {
			kind = k
		}
		tg.commits[rev] = soak.Commit{Revision: rev, Kind: kind, Want: tg.want(r.e.token), At: at}
		tg.newest = rev
		if kind == soak.Good {
			tg.good = rev
		}
	}
	r.rep.Op("commit " + string(k))
}

// publish adds a version of rp's chart to the chart repository: the commit of a chart
// SyncTarget.
func (r *soakRun) publish(rp *soakRepo, target *soakTarget, k soak.Kind) {
	tg := rp.targets[0]
	if target == nil {
		k = soak.Good
	}
	rp.version++
	files := tg.files(k)
	archive, err := charttest.Package(rp.chart, files)
	if err != nil {
		r.e.s.t.Errorf("packaging %s: %v", rp.chart, err)
		return
	}
	at := time.Now()
	version := fmt.Sprintf("0.1.%d", rp.version)
	r.e.charts.Add(rp.chart, version, archive)
	sum := sha256.Sum256(archive)
	rev := version + "@sha256:" + hex.EncodeToString(sum[:])
	tg.commits[rev] = soak.Commit{Revision: rev, Kind: k, Want: tg.want(r.e.token), At: at}
	tg.newest = rev
	if k == soak.Good {
		tg.good = rev
	}
	r.rep.Op("commit " + string(k))
}

// hook announces a push of rp to a daemon's webhook receiver, chosen by the seed, as a
// generic sender signed with the namespace's token; a third of them carry a Date an hour
// or a day off, which the receiver must not care about. A receiver away (its daemon
// killed) is one more fault; the poll brings the commit anyway. Called with r.mu held.
func (r *soakRun) hook(rp *soakRepo) {
	if rp.r == nil {
		return
	}
	base := r.e.hooks[r.rng.IntN(len(r.e.hooks))]
	skew := []time.Duration{0, 0, 0, time.Hour, -time.Hour, 24 * time.Hour}[r.rng.IntN(6)]
	url := r.proxiedURL(rp.r)
	go func() {
		req, err := hookRequest(base, url, webhookToken)
		if err != nil {
			return
		}
		req.Header.Set("Date", time.Now().Add(skew).UTC().Format(http.TimeFormat))
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return
		}
		_ = resp.Body.Close()
	}()
	r.rep.Op("webhook")
}

// drive pushes commits and edits live objects until ctx ends, every 1–3 s.
func (r *soakRun) drive(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second + time.Duration(r.intn(2000))*time.Millisecond):
		}
		r.mu.Lock()
		r.step()
		r.mu.Unlock()
	}
}

func (r *soakRun) intn(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rng.IntN(n)
}

// soakOps are the driver's operations with their weights; each goes to a SyncTarget it
// fits, chosen by the seed.
var soakOps = []struct {
	name   string
	weight int
	fits   func(*soakTarget) bool
}{
	{"good", 40, func(*soakTarget) bool { return true }},
	{"drift", 15, func(*soakTarget) bool { return true }},
	{string(soak.FailsHealth), 12, func(tg *soakTarget) bool { return tg.kind == kindYAML }},
	{string(soak.FailsRender), 12, func(*soakTarget) bool { return true }},
	{string(soak.PrunesTooMuch), 12, func(*soakTarget) bool { return true }},
	{string(soak.Hostile), 6, func(tg *soakTarget) bool { return tg.kind == kindChart || tg.kind == kindChartRepo }},
}

// step is one operation of the driver, chosen by the seed. Called with r.mu held.
func (r *soakRun) step() {
	total := 0
	for _, op := range soakOps {
		total += op.weight
	}
	p := r.rng.IntN(total)
	i := 0
	for ; p >= soakOps[i].weight; i++ {
		p -= soakOps[i].weight
	}
	var fit []*soakTarget
	for _, tg := range r.targets {
		if soakOps[i].fits(tg) {
			fit = append(fit, tg)
		}
	}
	tg := fit[r.rng.IntN(len(fit))]
	switch k := soak.Kind(soakOps[i].name); k {
	case "drift":
		r.driftOne(tg)
	case "good":
		r.mutate(tg)
		r.commit(tg.repo, tg, soak.Good)
	case soak.FailsHealth:
		r.mutate(tg)
		r.commit(tg.repo, tg, soak.FailsHealth)
	case soak.PrunesTooMuch:
		// Keep one ConfigMap of four or more: three or more deletions, past maxDeletions (2).
		names := slices.Sorted(maps.Keys(tg.values))
		saved := tg.values
		tg.values = map[string]string{names[0]: saved[names[0]]}
		r.commit(tg.repo, tg, soak.PrunesTooMuch)
		tg.values = saved
	default:
		r.commit(tg.repo, tg, k)
	}
}

// mutate changes tg's values as a good commit does: a value or two, a ConfigMap added or
// removed (four to six of them, so that removing one never passes maxDeletions), now and
// then a new image.
func (r *soakRun) mutate(tg *soakTarget) {
	names := slices.Sorted(maps.Keys(tg.values))
	for range 1 + r.rng.IntN(2) {
		tg.values[names[r.rng.IntN(len(names))]] = r.value()
	}
	switch x := r.rng.IntN(4); {
	case x == 0 && len(names) < 6:
		tg.values[fmt.Sprintf("cm-%d", r.counter)] = r.value()
	case x == 1 && len(names) > 4 && tg.mayDelete():
		delete(tg.values, names[r.rng.IntN(len(names))])
	case x == 2 && tg.kind == kindYAML:
		tg.image = "example.com/web:" + r.value()
	}
}

// mayDelete reports whether a good commit may remove one more ConfigMap: the ConfigMaps of
// the revision last seen healthy that the values lack already, and this one, stay within
// maxDeletions. Commits that failed, or that faults kept from being applied, add up: past
// the limit the next good commit is refused with TooManyDeletions, as it must be, and the
// SyncTarget then waits for a person — the guard's own case, which prunes-too-much
// commits test.
func (tg *soakTarget) mayDelete() bool {
	c, ok := tg.commits[tg.healthy]
	if !ok {
		return true
	}
	prefix := tg.configMapPrefix()
	gone := 0
	for k := range c.Want {
		name, ok := strings.CutPrefix(k, "ConfigMap/"+prefix)
		if !ok || k == "ConfigMap/secret-cm" {
			continue
		}
		if _, kept := tg.values[name]; !kept {
			gone++
		}
	}
	return gone+1 <= soakMaxDeletions
}

// configMapPrefix starts the names of tg's ConfigMaps in the cluster (kustomize adds one).
func (tg *soakTarget) configMapPrefix() string {
	if tg.kind == kindKustomize {
		return "k-"
	}
	return ""
}

// soakMaxDeletions is every SyncTarget's spec.maxDeletions.
const soakMaxDeletions = 2

// driftOne edits an owned ConfigMap of tg by hand, unless one is being edited already.
func (r *soakRun) driftOne(tg *soakTarget) {
	if tg.drift != nil {
		return
	}
	want := tg.want(r.e.token)
	keys := slices.DeleteFunc(slices.Sorted(maps.Keys(want)), func(k string) bool {
		return !strings.HasPrefix(k, "ConfigMap/") || k == "ConfigMap/secret-cm"
	})
	key := keys[r.rng.IntN(len(keys))]
	mark := "drift-" + r.value()
	c := r.clientFor(tg)
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: tg.ns, Name: strings.TrimPrefix(key, "ConfigMap/")}, cm); err != nil {
		return // not applied yet, or pruned: nothing to edit
	}
	if cm.Labels[convergev1.NameLabel] != tg.name {
		return
	}
	cm.Data = map[string]string{"value": mark}
	if err := c.Update(context.Background(), cm); err != nil {
		return
	}
	tg.drift = &soak.Drift{Target: tg.st.Namespace + "/" + tg.name, Object: key, At: time.Now()}
	tg.driftKey, tg.driftMark = key, mark
	r.rep.Op("drift")
}

func (r *soakRun) clientFor(tg *soakTarget) client.Client {
	if tg.kind == kindRemote {
		return r.e.rc.k8s
	}
	return suite.k8s
}

// makeForeign creates, in every target namespace, objects converge must never touch: one
// with no labels, one another tool manages, one claiming to be another SyncTarget's.
func (r *soakRun) makeForeign() {
	r.foreign = map[string]soak.Version{}
	for _, tg := range r.targets {
		c := r.clientFor(tg)
		for name, labels := range map[string]map[string]string{
			"foreign-plain": nil,
			"foreign-helm":  {"app.kubernetes.io/managed-by": "Helm"},
			"foreign-owned": {convergev1.NameLabel: "someone-else", convergev1.NamespaceLabel: r.e.s.ns},
		} {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tg.ns, Labels: labels},
				Data: map[string]string{"value": "not converge's"}}
			if err := c.Create(context.Background(), cm); err != nil {
				r.e.s.t.Fatal(err)
			}
			r.foreign[tg.kindKey(name)] = soak.Version{UID: string(cm.UID), ResourceVersion: cm.ResourceVersion}
		}
	}
}

func (tg *soakTarget) kindKey(name string) string {
	where := "local"
	if tg.kind == kindRemote {
		where = "remote"
	}
	return where + ":" + tg.ns + "/ConfigMap/" + name
}

// inject turns faults on and off until ctx ends: one at a time, every 3–8 s, each for
// 2–8 s.
func (r *soakRun) inject(ctx context.Context) {
	// Failovers among them: a replica killed, or losing its lease while the API server is
	// away behind the daemons' proxy (no other test goes through it).
	kinds := []string{"api delay", "git down", "git slow", "remote away", "chart repository down",
		"kill -9 replica", "api partition", "api down"}
	if r.e.cfg.full {
		// What touches every client of the cluster: make soak, alone on it.
		kinds = append(kinds, "apiserver restart", "etcd pause")
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(3000+r.intn(5000)) * time.Millisecond):
		}
		r.mu.Lock()
		kind := kinds[r.rng.IntN(len(kinds))]
		hold := time.Duration(2000+r.rng.IntN(6000)) * time.Millisecond
		victim := r.e.daemons[r.rng.IntN(len(r.e.daemons))]
		delay := time.Duration(100+r.rng.IntN(900)) * time.Millisecond
		r.mu.Unlock()
		r.fault(kind, hold, victim, delay)
	}
}

// fault turns one fault on, holds it, and turns it off.
func (r *soakRun) fault(kind string, hold time.Duration, victim *daemon, delay time.Duration) {
	e := r.e
	span := faultSpan{from: time.Now()}
	e.mu.Lock()
	e.faults = append(e.faults, span)
	i := len(e.faults) - 1
	e.mu.Unlock()
	r.rep.Fault(kind)
	var undo func()
	switch kind {
	case "kill -9 replica":
		victim.kill()
		undo = func() {
			if victim.exited() {
				if err := victim.start(); err != nil {
					r.e.s.t.Errorf("starting %s again: %v", victim.name, err)
				}
			}
		}
	case "api delay":
		e.api.Delay(delay)
		undo = func() { e.api.Delay(0) }
	case "api partition":
		e.api.Partition()
		undo = e.api.Heal
	case "api down":
		e.api.Down()
		undo = func() { _ = e.api.Up() }
	case "git down":
		e.git.Down()
		undo = func() { _ = e.git.Up() }
	case "git slow":
		e.git.Delay(delay)
		undo = func() { e.git.Delay(0) }
	case "chart repository down":
		e.chartsP.Down()
		undo = func() { _ = e.chartsP.Up() }
	case "remote away":
		e.remote.Down()
		undo = func() { _ = e.remote.Up() }
	case "apiserver restart":
		if err := suite.cluster.RestartAPIServer(context.Background()); err != nil {
			r.e.s.t.Errorf("restarting the API server: %v", err)
		}
		undo = func() {}
	case "etcd pause":
		_ = syscall.Kill(e.etcd, syscall.SIGSTOP)
		undo = func() { _ = syscall.Kill(e.etcd, syscall.SIGCONT) }
	}
	time.Sleep(hold) // the fault's length: it is the fault, not a wait for something
	undo()
	e.mu.Lock()
	e.faults[i].to = time.Now()
	e.mu.Unlock()
}

// sample reads each daemon's resident memory and goroutines every 2 s.
func (r *soakRun) sample(ctx context.Context) {
	for {
		for _, d := range r.e.daemons {
			cmd, _ := d.process()
			if cmd == nil || cmd.Process == nil {
				continue
			}
			if d.exited() {
				continue // for the supervisor or its fault to start again
			}
			d.mu.Lock()
			addr := d.args[metricsArg]
			d.mu.Unlock()
			rss, gs, err := processMetrics("http://" + addr + "/metrics")
			if err != nil {
				continue
			}
			d.mu.Lock()
			leader := bytes.Contains(d.out.Bytes()[d.from:], []byte("Successfully acquired lease"))
			d.mu.Unlock()
			// A replica that takes the lease starts its controllers: a series of its own.
			role := "standby"
			if leader {
				role = "leader"
			}
			key := fmt.Sprintf("daemon %s (pid %d, %s)", d.name, cmd.Process.Pid, role)
			r.mu.Lock()
			r.samples[key] = append(r.samples[key], soak.Sample{At: time.Now(), RSS: rss, Goroutines: gs})
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// processMetrics reads process_resident_memory_bytes and go_goroutines from a daemon's
// metrics.
func processMetrics(url string) (rss int64, goroutines int, err error) {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		return 0, 0, err
	}
	found := 0
	for _, line := range strings.Split(b.String(), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, perr := strconv.ParseFloat(f[1], 64)
		if perr != nil {
			continue
		}
		switch f[0] {
		case "process_resident_memory_bytes":
			rss, found = int64(v), found+1
		case "go_goroutines":
			goroutines, found = int(v), found+1
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("%s: no process_resident_memory_bytes and go_goroutines", url)
	}
	return rss, goroutines, nil
}

// checkAll runs invariants 1–5 on every SyncTarget, and 2 on the foreign objects. final
// is the check once faults stopped and everything converged, when drift must be restored.
func (r *soakRun) checkAll(final bool) {
	for _, tg := range r.targets {
		r.check(tg, final)
	}
	now := map[string]soak.Version{}
	for _, tg := range r.targets {
		c := r.clientFor(tg)
		for _, name := range []string{"foreign-plain", "foreign-helm", "foreign-owned"} {
			cm := &corev1.ConfigMap{}
			err := c.Get(context.Background(), client.ObjectKey{Namespace: tg.ns, Name: name}, cm)
			switch {
			case err == nil:
				now[tg.kindKey(name)] = soak.Version{UID: string(cm.UID), ResourceVersion: cm.ResourceVersion}
			case !apierrors.IsNotFound(err):
				return // the remote cluster away: next time
			}
		}
	}
	r.rep.Checked(soak.ForeignUntouched, soak.CheckForeign(r.foreign, now))
}

// check runs invariants 1, 3, 4 and 5 on one SyncTarget.
func (r *soakRun) check(tg *soakTarget, final bool) {
	ctx := context.Background()
	st := &convergev1.SyncTarget{}
	if err := suite.k8s.Get(ctx, client.ObjectKeyFromObject(tg.st), st); err != nil {
		return
	}
	object := st.Namespace + "/" + st.Name
	status, _ := json.Marshal(st.Status)
	r.rep.Checked(soak.NoSecretLeaked, soak.FindSecrets("status of "+object, status, r.secrets()))
	r.mu.Lock()
	prev := tg.history
	tg.history = st.Status.History
	tg.healthy = st.Status.LastHealthyRevision
	commits := maps.Clone(tg.commits)
	drift, driftKey, driftMark := tg.drift, tg.driftKey, tg.driftMark
	r.mu.Unlock()

	limit := 10
	if st.Spec.HistoryLimit != nil {
		limit = int(*st.Spec.HistoryLimit)
	}
	r.rep.Checked(soak.HistoryConsistent, soak.CheckHistory(object, prev, st.Status.History, limit))
	r.ledger.Add(object, st.Status.History)
	var refused []soak.Violation
	for _, c := range commits {
		refused = append(refused, r.ledger.CheckRefused(object, c)...)
		switch c.Kind {
		case soak.Good:
			r.noteOnce(tg, object, c, convergev1.SyncSucceeded, func(e convergev1.HistoryEntry) { r.rep.Deployed(e.FinishedAt.Sub(c.At)) })
		case soak.FailsHealth:
			r.noteOnce(tg, object, c, convergev1.SyncRolledBack, func(convergev1.HistoryEntry) { r.rep.RolledBack() })
		}
	}
	r.rep.Checked(soak.FailedRolledBack, refused)

	live, err := r.live(tg, st)
	if err != nil {
		return
	}
	// Drift: restored once the hand-written value is gone.
	if drift != nil {
		if live[driftKey] != driftMark {
			drift.Restored = time.Now()
		}
		// Checked once: when restored, when overdue, or at the end.
		v := soak.CheckDrift(*drift, soakDriftBound, r.e.away(drift.At, time.Now()), time.Now())
		if !drift.Restored.IsZero() || final || len(v) > 0 {
			r.rep.Checked(soak.DriftRestored, v)
			r.mu.Lock()
			if tg.drift == drift {
				tg.drift = nil
			}
			r.mu.Unlock()
		}
	}
	if !soak.Quiet(st) {
		return
	}
	r.rep.Checked(soak.FailedRolledBack, soak.CheckOutcome(object, st, commits))
	// The status must not have moved while the live objects were read.
	again := &convergev1.SyncTarget{}
	if err := suite.k8s.Get(ctx, client.ObjectKeyFromObject(tg.st), again); err != nil || again.ResourceVersion != st.ResourceVersion {
		return
	}
	applied, ok := commits[st.Status.LastAppliedRevision]
	if !ok || applied.Kind != soak.Good {
		return
	}
	want := applied.Want
	if drift != nil && drift.Restored.IsZero() {
		want = maps.Clone(want)
		delete(want, driftKey)
		delete(live, driftKey)
	}
	found := soak.CheckLive(object, st.Status.LastAppliedRevision, want, live)
	switch {
	case len(found) == 0 || final:
		tg.suspect = nil
		r.rep.Checked(soak.NoHalfApplied, found)
	case tg.suspect == nil || tg.suspectRV != st.ResourceVersion:
		tg.suspect, tg.suspectRV, tg.suspectAt = found, st.ResourceVersion, time.Now()
	case time.Since(tg.suspectAt)-r.e.away(tg.suspectAt, time.Now()) > soakSettleBound:
		r.rep.Checked(soak.NoHalfApplied, found)
		tg.suspect = nil
	}
}

// soakSettleBound is how long the live objects may differ from the revision a quiet
// status names, the status unchanged, before it is a half-applied revision: the apply of a
// revision adding no object says so in the status only if it lasts, and a daemon that dies
// in it leaves the status as it was until the next leader syncs.
const soakSettleBound = 20 * time.Second

// noteOnce calls record with the first finished entry of the ledger in which c ended
// with result, once per revision and result. Only the check goroutine calls it.
func (r *soakRun) noteOnce(tg *soakTarget, object string, c soak.Commit, result convergev1.SyncResult, record func(convergev1.HistoryEntry)) {
	key := string(result) + " " + c.Revision
	if tg.noted[key] {
		return
	}
	for _, e := range r.ledger.Entries(object, c.Revision) {
		if e.Result == result && e.FinishedAt != nil {
			record(e)
			tg.noted[key] = true
			return
		}
	}
}

// live reads what st owns in its target namespace: ConfigMaps by value, Deployments by
// image.
func (r *soakRun) live(tg *soakTarget, st *convergev1.SyncTarget) (map[string]string, error) {
	ctx := context.Background()
	c := r.clientFor(tg)
	out := map[string]string{}
	cms := &corev1.ConfigMapList{}
	if err := c.List(ctx, cms, client.InNamespace(tg.ns), ownerLabels(st)); err != nil {
		return nil, err
	}
	for _, cm := range cms.Items {
		out["ConfigMap/"+cm.Name] = cm.Data["value"]
	}
	deps := &appsv1.DeploymentList{}
	if err := c.List(ctx, deps, client.InNamespace(tg.ns), ownerLabels(st)); err != nil {
		return nil, err
	}
	for _, d := range deps.Items {
		out["Deployment/"+d.Name] = d.Spec.Template.Spec.Containers[0].Image
	}
	return out, nil
}

// converge ends the run: the faults are off (inject has returned), every daemon runs, a
// last good commit goes to every repository, and everything must converge on it within
// soakConvergeBound (invariant 7); then the last checks: the live objects, drift restored,
// foreign objects, no Secret value anywhere, the daemons' growth.
func (r *soakRun) converge() {
	t := r.e.s.t
	for _, d := range r.e.daemons {
		if _, err := d.startIfExited(); err != nil {
			t.Errorf("starting %s again: %v", d.name, err)
		}
	}
	r.mu.Lock()
	for _, rp := range r.repos {
		for _, tg := range rp.targets {
			r.mutate(tg)
		}
		r.commit(rp, nil, soak.Good)
	}
	r.mu.Unlock()
	deadline := time.Now().Add(soakConvergeBound)
	for {
		var v []soak.Violation
		for _, tg := range r.targets {
			st := &convergev1.SyncTarget{}
			if err := suite.k8s.Get(context.Background(), client.ObjectKeyFromObject(tg.st), st); err != nil {
				v = append(v, soak.Violation{Invariant: soak.Converges, Object: tg.name, Detail: err.Error()})
				continue
			}
			v = append(v, soak.CheckConverged(st.Namespace+"/"+st.Name, tg.newest, st)...)
		}
		if len(v) == 0 || time.Now().After(deadline) {
			r.rep.Checked(soak.Converges, v)
			break
		}
		time.Sleep(time.Second)
	}
	r.checkAll(true)
	r.checkSecrets()
	r.mu.Lock()
	for name, s := range r.samples {
		r.rep.Checked(soak.BoundedResources, soak.CheckBounded(name, s))
	}
	r.mu.Unlock()
}

// soakDriftBound is how long a hand edit of an owned object may stay, not counting the
// time faults were on.
const soakDriftBound = 30 * time.Second

// soakConvergeBound is how long everything may take to converge once faults stop.
const soakConvergeBound = 3 * time.Minute

// secrets are the values no status, event or log may hold: the soak's Secret, the git
// password, the webhook token.
func (r *soakRun) secrets() map[string][]byte {
	return map[string][]byte{soakSecret + "/" + soakVar: r.e.token, httpSecret + "/password": []byte(suite.gitPass),
		webhookSecret + "/token": []byte(webhookToken)}
}

// checkSecrets is invariant 6: no value of the soak's Secret, of the git password or of
// the webhook token in any SyncTarget's status, any event of the namespace or any line the
// daemons wrote.
func (r *soakRun) checkSecrets() {
	ctx := context.Background()
	secrets := r.secrets()
	var found []soak.Violation
	list := &convergev1.SyncTargetList{}
	if err := suite.k8s.List(ctx, list, client.InNamespace(r.e.s.ns)); err == nil {
		for _, st := range list.Items {
			b, _ := json.Marshal(st.Status)
			found = append(found, soak.FindSecrets("status of "+st.Name, b, secrets)...)
		}
	}
	evs := &corev1.EventList{}
	if err := suite.k8s.List(ctx, evs, client.InNamespace(r.e.s.ns)); err == nil {
		for _, ev := range evs.Items {
			found = append(found, soak.FindSecrets("event "+ev.Name, []byte(ev.Message), secrets)...)
		}
	}
	for _, d := range r.e.daemons {
		d.mu.Lock()
		out := slices.Clone(d.out.Bytes())
		d.mu.Unlock()
		found = append(found, soak.FindSecrets("the log of "+d.name, out, secrets)...)
	}
	r.rep.Checked(soak.NoSecretLeaked, found)
}
