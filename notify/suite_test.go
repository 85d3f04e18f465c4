package notify

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// The package's envtest tests share one API server; each test has its namespace and runs
// its own manager with the notifier controller, so that it can stop and start it again.
var (
	k8s    client.Client
	admin  *rest.Config
	scheme = runtime.NewScheme()
	nsSeq  atomic.Int64
)

func TestMain(m *testing.M) {
	flag.Parse()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = convergev1.AddToScheme(scheme)
	if testing.Short() { // make test-unit: the pure tests alone
		os.Exit(m.Run())
	}
	os.Exit(func() int {
		c, err := localcluster.Start(context.Background(), localcluster.Options{CRDDirectoryPaths: []string{clustertest.CRDDir()}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = c.Stop() }()
		admin = c.Config
		if k8s, err = client.New(admin, client.Options{Scheme: scheme}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

// env is one test's namespace, fake clock and running controller.
type env struct {
	t     *testing.T
	ns    string
	clock *clocktesting.FakeClock
	opts  Options
	stop  func()
	logs  *logBuffer // everything the controller logged, debug lines included
}

// logBuffer collects log lines.
type logBuffer struct {
	mu gosync.Mutex
	b  strings.Builder
}

func (l *logBuffer) write(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(prefix + " " + args + "\n")
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a local cluster: make test")
	}
	e := &env{t: t, ns: fmt.Sprintf("notify-%d", nsSeq.Add(1)), clock: clocktesting.NewFakeClock(time.Now()), opts: opts,
		logs: &logBuffer{}}
	e.opts.Clock = e.clock
	if e.opts.RateLimit == 0 {
		e.opts.RateLimit = -1 // no limit unless the test sets one
	}
	g := NewWithT(t)
	g.Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}})).To(Succeed())
	e.start()
	t.Cleanup(func() { e.stop() })
	return e
}

// start runs a manager with a new notifier controller: a daemon (re)starting.
func (e *env) start() {
	g := NewWithT(e.t)
	mgr, err := ctrl.NewManager(admin, ctrl.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Logger:     funcr.New(e.logs.write, funcr.Options{Verbosity: 1}),
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Client:     client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = SetupWithManager(mgr, e.opts)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(ctx) }()
	e.stop = func() { cancel(); <-done }
}

// restart stops the controller (mid-delivery, as a killed daemon) and starts a new one.
func (e *env) restart() {
	e.stop()
	e.start()
}

// chat is a Slack-shaped server: it records the text of each message it accepts, and
// answers with the code the test sets.
type chat struct {
	srv   *httptest.Server
	mu    gosync.Mutex
	texts []string
	tries int
	code  int
	hdr   http.Header
}

func newChat(t *testing.T) *chat {
	c := &chat{code: http.StatusOK}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Text string }
		raw, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(raw, &body)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.tries++
		c.hdr = r.Header.Clone()
		if c.code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "30")
		}
		w.WriteHeader(c.code)
		if c.code < 300 {
			c.texts = append(c.texts, body.Text)
		}
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *chat) answer(code int) {
	c.mu.Lock()
	c.code = code
	c.mu.Unlock()
}

func (c *chat) received() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.texts...)
}

func (c *chat) attempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tries
}

// stepWhenWaiting moves the fake clock past any backoff the worker waits on.
func (e *env) stepWhenWaiting(d time.Duration) {
	NewWithT(e.t).Eventually(e.clock.HasWaiters).WithTimeout(20 * time.Second).Should(BeTrue())
	e.clock.Step(d)
}

func (e *env) notifier(name string, p convergev1.NotificationProvider, mutate func(*convergev1.Notifier)) *convergev1.Notifier {
	n := &convergev1.Notifier{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: convergev1.NotifierSpec{Provider: p}}
	if mutate != nil {
		mutate(n)
	}
	NewWithT(e.t).Expect(k8s.Create(context.Background(), n)).To(Succeed())
	return n
}

func (e *env) secret(name string, data map[string]string) {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, StringData: data}
	NewWithT(e.t).Expect(k8s.Create(context.Background(), s)).To(Succeed())
}

// syncTarget creates a SyncTarget following url; the test then writes its status as the
// sync reconciler would.
func (e *env) syncTarget(name, url string) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: url, Ref: convergev1.GitRef{Branch: "main"}}}}
	NewWithT(e.t).Expect(k8s.Create(context.Background(), st)).To(Succeed())
	return st
}

// setStatus changes a SyncTarget's status as the sync reconciler would.
func (e *env) setStatus(st *convergev1.SyncTarget, change func(*convergev1.SyncTargetStatus)) {
	g := NewWithT(e.t)
	g.Eventually(func(g Gomega) {
		g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(st), st)).To(Succeed())
		change(&st.Status)
		g.Expect(k8s.Status().Update(context.Background(), st)).To(Succeed())
	}).Should(Succeed())
}

func (e *env) get(n *convergev1.Notifier) *convergev1.Notifier {
	out := &convergev1.Notifier{}
	NewWithT(e.t).Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(n), out)).To(Succeed())
	return out
}

// result appends a finished attempt to the history, newest first, as the reconciler does.
func result(rev string, r convergev1.SyncResult, msg string) func(*convergev1.SyncTargetStatus) {
	return func(s *convergev1.SyncTargetStatus) {
		now := metav1.Now()
		started := metav1.NewTime(now.Add(time.Duration(len(s.History)) * time.Second)) // distinct keys
		s.LastAttemptedRevision = rev
		s.Conditions = nil
		s.History = append([]convergev1.HistoryEntry{{Revision: rev, Result: r, StartedAt: started, FinishedAt: &started, Message: msg}}, s.History...)
	}
}

// deploying is the status while rev is applied or waited for.
func deploying(rev string) func(*convergev1.SyncTargetStatus) {
	return func(s *convergev1.SyncTargetStatus) {
		s.LastAttemptedRevision = rev
		s.Conditions = []metav1.Condition{{Type: "Reconciling", Status: "True", Reason: "Progressing",
			Message: "applying " + rev, LastTransitionTime: metav1.Now()}}
	}
}
