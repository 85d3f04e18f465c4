package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	"github.com/converge-gitops/converge/sync/render"
)

// These tests run the real converge binary, as its own process, against a real API server
// and a real git server: what sharding and leader election promise only shows there.

var binary string

func TestMain(m *testing.M) {
	render.ServeWorkerIfAsked() // this binary is the render worker of the renders under test
	flag.Parse()
	// The tests with a local cluster of their own call t.Parallel: three start and wait at once.
	clustertest.ParallelUnlessSet(3)
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "converge-bin-")
		if err != nil {
			panic(err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
		binary = filepath.Join(dir, "converge")
		if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building converge: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

// daemon is a running `converge serve` whose output the test can read.
type daemon struct {
	cmd *exec.Cmd
	mu  sync.Mutex
	out bytes.Buffer
}

func (d *daemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.Write(p)
}

func (d *daemon) logged(s string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.Contains(d.out.String(), s)
}

func serve(t *testing.T, kubeconfig string, args ...string) *daemon {
	t.Helper()
	d := &daemon{}
	d.cmd = exec.Command(binary, append([]string{"serve", "--kubeconfig", kubeconfig,
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--webhook-bind-address", "",
		"--cache-dir", t.TempDir()}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.cmd.Process.Kill(); _ = d.cmd.Wait() })
	return d
}

type env struct {
	c          client.Client
	kubeconfig string
	repo       *gittest.Repo
	url        string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cluster := clustertest.Start(t, localcluster.Options{CRDDirectoryPaths: []string{clustertest.CRDDir()}})
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = convergev1.AddToScheme(scheme)
	c, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	return &env{c: c, kubeconfig: cluster.Kubeconfig, repo: repo, url: srv.RepoURL(repo)}
}

func (e *env) target(t *testing.T, name string, labels map[string]string) *convergev1.SyncTarget {
	t.Helper()
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: labels},
		Spec: convergev1.SyncTargetSpec{
			Source:          convergev1.GitSource{URL: e.url, Ref: convergev1.GitRef{Branch: "main"}, Interval: &metav1.Duration{Duration: time.Second}},
			Path:            name,
			TargetNamespace: "default",
		},
	}
	if err := e.c.Create(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	return st
}

func (e *env) status(g Gomega, st *convergev1.SyncTarget) convergev1.SyncTargetStatus {
	out := &convergev1.SyncTarget{}
	g.Expect(e.c.Get(context.Background(), client.ObjectKeyFromObject(st), out)).To(Succeed())
	return out.Status
}

func cm(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {value: %q}\n", name, value)
}

// TestShardingByLabelSelector: a daemon with --watch-label-selector reconciles its shard only.
func TestShardingByLabelSelector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rev := "main@sha1:" + e.repo.Commit(t, "main", map[string]string{"a/cm.yaml": cm("a", "1"), "b/cm.yaml": cm("b", "1")})
	a := e.target(t, "a", map[string]string{"shard": "one"})
	b := e.target(t, "b", map[string]string{"shard": "two"})
	d := serve(t, e.kubeconfig, "--watch-label-selector", "shard=one")

	g := NewWithT(t)
	g.Eventually(func(g Gomega) {
		s := e.status(g, a)
		g.Expect(s.LastHealthyRevision).To(Equal(rev))
		g.Expect(apimeta.IsStatusConditionTrue(s.Conditions, convergev1.ReadyCondition)).To(BeTrue())
	}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "daemon output:\n%s", d.out.String())
	g.Consistently(func(g Gomega) {
		g.Expect(e.status(g, b).Conditions).To(BeEmpty(), "the other shard's target is left alone")
	}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "b"}, &corev1.ConfigMap{})
	g.Expect(err).To(HaveOccurred())
}

// TestLeaderFailover: of two daemons electing a leader, only the leader reconciles; when it
// dies without a word (SIGKILL), the other takes over within the lease and keeps syncing.
func TestLeaderFailover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rev1 := "main@sha1:" + e.repo.Commit(t, "main", map[string]string{"app/cm.yaml": cm("app", "1")})
	st := e.target(t, "app", nil)
	lease := []string{"--leader-elect", "--leader-election-namespace", "default", "--leader-election-id", "converge-test",
		"--leader-election-lease-duration", "4s", "--leader-election-renew-deadline", "3s", "--leader-election-retry-period", "500ms"}
	const acquired = "Successfully acquired lease"

	first := serve(t, e.kubeconfig, lease...)
	g := NewWithT(t)
	g.Eventually(func() bool { return first.logged(acquired) }).WithTimeout(30 * time.Second).Should(BeTrue())
	second := serve(t, e.kubeconfig, lease...)
	g.Eventually(func(g Gomega) {
		g.Expect(e.status(g, st).LastHealthyRevision).To(Equal(rev1))
	}).WithTimeout(60 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
	g.Expect(second.logged(acquired)).To(BeFalse(), "one leader at a time")

	g.Expect(first.cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
	killed := time.Now()
	g.Eventually(func() bool { return second.logged(acquired) }).WithTimeout(30 * time.Second).Should(BeTrue())
	t.Logf("the second daemon took over %s after the leader was killed", time.Since(killed).Round(100*time.Millisecond))
	g.Expect(time.Since(killed)).To(BeNumerically("<", 15*time.Second))

	rev2 := "main@sha1:" + e.repo.Commit(t, "main", map[string]string{"app/cm.yaml": cm("app", "2")})
	g.Eventually(func(g Gomega) {
		g.Expect(e.status(g, st).LastHealthyRevision).To(Equal(rev2))
		c := &corev1.ConfigMap{}
		g.Expect(e.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "app"}, c)).To(Succeed())
		g.Expect(c.Data["value"]).To(Equal("2"))
	}).WithTimeout(60 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
}
