package ui

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	"github.com/converge-gitops/converge/sync/render"
)

// The tests against a real API server share one (no controllers), started by the first
// that needs it and stopped by TestMain; each works in namespaces of its own.
var shared struct {
	once    gosync.Once
	cluster *localcluster.Cluster
	client  client.Client
	err     error
}

func TestMain(m *testing.M) {
	render.ServeWorkerIfAsked() // this binary is the render worker of the renders under test
	ctrl.SetLogger(logr.Discard())
	os.Exit(func() int {
		defer func() {
			if shared.cluster != nil {
				if err := shared.cluster.Stop(); err != nil {
					fmt.Fprintln(os.Stderr, "stopping the local cluster:", err)
				}
			}
		}()
		return m.Run()
	}())
}

// cluster returns an admin client of the shared API server, and its config.
func cluster(t *testing.T) (client.Client, *rest.Config) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a local cluster: make test")
	}
	shared.once.Do(func() {
		shared.cluster, shared.err = localcluster.Start(context.Background(), localcluster.Options{
			CRDDirectoryPaths: []string{clustertest.CRDDir()},
		})
		if shared.err == nil {
			shared.client, shared.err = client.New(shared.cluster.Config, client.Options{Scheme: scheme()})
		}
	})
	if shared.err != nil {
		t.Fatalf("local cluster: %v", shared.err)
	}
	return shared.client, rest.CopyConfig(shared.cluster.Config)
}

// createTarget creates st with its status in a fresh namespace.
func createTarget(t *testing.T, c client.Client, st convergev1.SyncTarget) *convergev1.SyncTarget {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: st.Namespace}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	obj := st.DeepCopy()
	if err := c.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj.Status = st.Status
	if err := c.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// countWatches counts the watches open through cfg: a watch the API server ends and the
// informer opens again (it does so under load) counts once.
func countWatches(cfg *rest.Config) *atomic.Int32 {
	n := &atomic.Int32{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.URL.Query().Get("watch") != "true" {
				return rt.RoundTrip(r)
			}
			n.Add(1)
			resp, err := rt.RoundTrip(r)
			if err != nil || resp == nil || resp.Body == nil {
				n.Add(-1)
				return resp, err
			}
			resp.Body = &watchBody{ReadCloser: resp.Body, open: n}
			return resp, nil
		})
	})
	return n
}

// watchBody is the body of a watch, counted open until closed.
type watchBody struct {
	io.ReadCloser
	open   *atomic.Int32
	closed gosync.Once
}

func (b *watchBody) Close() error {
	b.closed.Do(func() { b.open.Add(-1) })
	return b.ReadCloser.Close()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// stream opens /events and sends each "kind data" line it receives.
func stream(t *testing.T, ctx context.Context, base string) <-chan string {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events", nil)
	return streamRequest(t, req)
}

// streamRequest sends req to /events and sends each "kind data" line it receives.
func streamRequest(t *testing.T, req *http.Request) <-chan string {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 100)
	go func() {
		defer func() { _ = resp.Body.Close() }()
		sc := bufio.NewScanner(resp.Body)
		var kind string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				kind = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				select {
				case out <- kind + " " + strings.TrimPrefix(line, "data: "):
				default:
				}
			}
		}
	}()
	return out
}

// TestLiveUpdatesShareOneWatchPerKind opens three event streams on a UI against a real
// API server: a status change reaches all three, through one watch of SyncTargets, one of
// Events and one of SyncTargetSets open at a time, however many viewers there are.
func TestLiveUpdatesShareOneWatchPerKind(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	st := createTarget(t, c, fakeTarget("live-a", "web", true))
	watches := countWatches(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := New(ctx, Options{Config: cfg})
	g.Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer cancel() // the streams end before the server closes

	var streams []<-chan string
	for range 3 {
		streams = append(streams, stream(t, ctx, srv.URL))
	}
	g.Eventually(s.Subscribers).Should(Equal(3))
	g.Eventually(watches.Load).Should(Equal(int32(3)), "one watch of SyncTargets, one of Events, one of SyncTargetSets")

	st.Status.Conditions[0].Message = "changed while you watched"
	g.Expect(c.Status().Update(ctx, st)).To(Succeed())
	for _, events := range streams {
		g.Eventually(events).WithTimeout(10 * time.Second).Should(Receive(Equal("target live-a/web")))
	}
	row := get(t, s, "/fragments/row/live-a/web").Body.String()
	g.Expect(row).To(ContainSubstring("changed while you watched"))

	g.Expect(c.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "live-a", Name: "web.1"},
		InvolvedObject: corev1.ObjectReference{Kind: convergev1.SyncTargetKind, Namespace: "live-a", Name: "web"},
		Type:           corev1.EventTypeWarning, Reason: "HealthCheckFailed", Message: "web is not ready"})).To(Succeed())
	g.Eventually(streams[0]).WithTimeout(10 * time.Second).Should(Receive(Equal("event live-a/web")))
	g.Expect(get(t, s, "/targets/live-a/web/live").Body.String()).To(ContainSubstring("web is not ready"))
	g.Consistently(watches.Load).WithTimeout(time.Second).Should(BeNumerically("<=", 3), "three viewers open no watch of their own")
}

// TestForbiddenAgainstAPIServer acts as a user who may only read SyncTargets: the API
// server's 403 reaches the page in words, naming the user.
func TestForbiddenAgainstAPIServer(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	createTarget(t, c, fakeTarget("forbid-a", "web", true))
	g.Expect(c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "forbid-a", Name: "read"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{convergev1.GroupVersion.Group}, Resources: []string{"synctargets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch"}}}})).To(Succeed())
	g.Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "forbid-a", Name: "read"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "read"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "bob"}}})).To(Succeed())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "bob"}

	s, err := New(ctx, Options{Config: cfg, Namespace: "forbid-a"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(get(t, s, "/targets/forbid-a/web").Code).To(Equal(http.StatusOK), "bob may read")
	for _, action := range []string{"suspend", "reconcile"} {
		code, res := post(t, s, "/targets/forbid-a/web/"+action, url.Values{}, fromPage)
		g.Expect(code).To(Equal(http.StatusForbidden))
		g.Expect(res.Message).To(Equal("you (user bob) may not patch synctargets in namespace forbid-a"))
	}
	st := &convergev1.SyncTarget{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "forbid-a", Name: "web"}, st)).To(Succeed())
	g.Expect(st.Spec.Suspend).To(BeFalse())

	_, err = New(ctx, Options{Config: cfg})
	g.Expect(err).To(MatchError("listing SyncTargets in every namespace (-n limits the UI to one): you (user bob) may not list synctargets"))
}
