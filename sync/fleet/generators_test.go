package fleet

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources"
)

func list(elems ...map[string]string) *convergev1.ListGenerator {
	return &convergev1.ListGenerator{Elements: elems}
}

func TestListAndMatrix(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	got, err := Generate(ctx, Env{}, []convergev1.Generator{
		{List: list(map[string]string{"env": "dev"})},
		{Matrix: &convergev1.MatrixGenerator{Generators: []convergev1.BaseGenerator{
			{List: list(map[string]string{"env": "a", "tier": "x"}, map[string]string{"env": "b"})},
			{List: list(map[string]string{"env": "prod", "region": "eu"}, map[string]string{"region": "us"})},
		}}},
	})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Recheck).To(BeZero(), "lists change only with the set")
	g.Expect(got.Params).To(Equal([]Params{
		{"env": "dev"},
		{"env": "prod", "tier": "x", "region": "eu"}, // the second generator wins on env
		{"env": "a", "tier": "x", "region": "us"},
		{"env": "prod", "region": "eu"},
		{"env": "b", "region": "us"},
	}))
}

func TestProductIsCapped(t *testing.T) {
	many := make([]Params, 100)
	_, err := Product(many, many)
	NewWithT(t).Expect(err).To(MatchError(ContainSubstring("100 × 100 parameter sets exceed 1000")))
}

func TestClusters(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	secret := func(ns, name string, labels map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Data: map[string][]byte{"value": []byte("kubeconfig")}}
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		secret("team", "prod-kubeconfig", map[string]string{convergev1.ClusterLabel: "prod", "env": "prod"}),
		secret("team", "staging", map[string]string{convergev1.ClusterLabel: "", "env": "staging"}),
		secret("team", "dev", map[string]string{convergev1.ClusterLabel: "dev", "env": "dev", "skip": "yes"}),
		secret("team", "git-credentials", map[string]string{"env": "prod"}),
		secret("other", "elsewhere", map[string]string{convergev1.ClusterLabel: "x"}),
	).Build()
	env := Env{Namespace: "team", Secrets: c}
	gen := &convergev1.ClustersGenerator{Selector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "skip", Operator: metav1.LabelSelectorOpDoesNotExist}}}}
	got, err := Generate(context.Background(), env, []convergev1.Generator{{Clusters: gen}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Recheck).To(Equal(convergev1.DefaultInterval))
	g.Expect(got.Params).To(ConsistOf(
		Params{"name": "prod", "secretName": "prod-kubeconfig", "labels.env": "prod", "labels." + convergev1.ClusterLabel: "prod"},
		Params{"name": "staging", "secretName": "staging", "labels.env": "staging", "labels." + convergev1.ClusterLabel: ""},
	))
}

func TestWalkAndMatchDirs(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	writeTree(t, root, "apps/web/k.yaml", "apps/api/k.yaml", "apps/api/deep/x/k.yaml", "apps/old/k.yaml", "docs/k.md")
	dirs, err := WalkDirs(root, 2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dirs).To(ConsistOf("apps", "apps/web", "apps/api", "apps/old", "docs"), "no deeper than the globs")
	g.Expect(MatchDirs(dirs, []string{"apps/*"}, []string{"apps/old"})).To(Equal([]string{"apps/api", "apps/web"}))
	g.Expect(dirParams([]string{"apps/web"})).To(Equal([]Params{
		{"path": "apps/web", "path.basename": "web", "path.segment0": "apps", "path.segment1": "web"}}))
	_, err = globDepth([]string{"apps/["}, nil)
	g.Expect(err).To(MatchError(ContainSubstring("syntax error in pattern")))
}

func writeTree(t *testing.T, root string, files ...string) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGitDirectories(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "fleet")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	repo.Commit(t, "main", map[string]string{"apps/web/k.yaml": "a", "apps/api/k.yaml": "b", "README.md": "c"})
	cache, err := sources.NewCache(sources.CacheOptions{Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	clock := clocktesting.NewFakePassiveClock(time.Now())
	lister := &GitLister{Cache: cache, Clock: clock}
	gen := &convergev1.GitDirectoriesGenerator{
		Source:  convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"}, Interval: &metav1.Duration{Duration: time.Minute}},
		Include: []string{"apps/*"},
	}
	env := Env{Namespace: "team", Dirs: lister}
	got, err := Generate(context.Background(), env, []convergev1.Generator{{GitDirectories: gen}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Recheck).To(Equal(time.Minute))
	g.Expect(got.Params).To(HaveLen(2))
	g.Expect(got.Params[0]).To(HaveKeyWithValue("path", "apps/api"))
	g.Expect(got.Params[1]).To(HaveKeyWithValue("path.basename", "web"))

	// A new directory is seen once the interval has passed, not before.
	repo.Commit(t, "main", map[string]string{"apps/db/k.yaml": "d"})
	again, err := Generate(context.Background(), env, []convergev1.Generator{{GitDirectories: gen}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Params).To(HaveLen(2))
	clock.SetTime(clock.Now().Add(time.Minute))
	again, err = Generate(context.Background(), env, []convergev1.Generator{{GitDirectories: gen}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again.Params).To(HaveLen(3))

	// An unreachable source is an error, not an empty list.
	gen.Source.URL = srv.URL + "/missing.git"
	_, err = Generate(context.Background(), env, []convergev1.Generator{{GitDirectories: gen}})
	g.Expect(err).To(HaveOccurred())
}

// With the daemon's poll scheduler, a set's directories follow the poller of its source,
// which the SyncTargets of the same source share: a push that triggers it wakes the set at
// once, and the listing shows the new directory without asking the remote itself; a cron
// schedule is followed, and a set that is gone ends its subscription.
func TestGitDirectoriesFollowThePollScheduler(t *testing.T) {
	g := NewWithT(t)
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "fleet")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	repo.Commit(t, "main", map[string]string{"apps/web/k.yaml": "a", "apps/api/k.yaml": "b"})
	checkouts, err := sources.NewCache(sources.CacheOptions{Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	sched := sources.NewScheduler(sources.SchedulerOptions{Cache: checkouts})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = sched.Start(ctx) }()

	cache, err := sources.NewCache(sources.CacheOptions{Dir: t.TempDir()})
	g.Expect(err).NotTo(HaveOccurred())
	wake := make(chan event.GenericEvent, 8)
	lister := &GitLister{Cache: cache, Polls: sched.Polls(), Wake: wake}
	src := convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"}, Schedule: "@hourly"}
	gen := []convergev1.Generator{{GitDirectories: &convergev1.GitDirectoriesGenerator{Source: src, Include: []string{"apps/*"}}}}
	env := Env{Namespace: "team", Set: "fleet", Dirs: lister}

	// A SyncTarget of the same source subscribes to the same poller.
	key := sources.Source{URL: src.URL, Ref: sources.Ref{Branch: "main"}}.Key()
	g.Expect(sched.Subscribe(sources.Subscription{ID: "team/app", Source: sources.Source{URL: src.URL, Ref: sources.Ref{Branch: "main"}}})).To(Succeed())
	g.Eventually(func() bool { _, ok := sched.Latest("team/app"); return ok }).Should(BeTrue())

	got, err := Generate(ctx, env, gen)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Params).To(HaveLen(2))
	g.Eventually(func() time.Time { at, _ := sched.NextPoll(key); return at }).Should(
		BeTemporally("<=", time.Now().Add(time.Minute+6*time.Second)), "the SyncTarget's minute is the shortest schedule")

	srv.ResetStats()
	repo.Commit(t, "main", map[string]string{"apps/db/k.yaml": "d"})
	g.Expect(sched.Trigger(key)).To(Succeed()) // what a push webhook does
	var woken event.GenericEvent
	g.Eventually(wake).WithTimeout(10*time.Second).Should(Receive(&woken), "the push wakes the set")
	g.Expect(woken.Object.GetNamespace() + "/" + woken.Object.GetName()).To(Equal("team/fleet"))
	got, err = Generate(ctx, env, gen)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Params).To(HaveLen(3))
	// The poller lists the refs and fetches; the set only fetches the new commit by SHA
	// into its own cache. Asking the remote itself would list the refs once more.
	g.Expect(srv.Stats().InfoRefs).To(BeEquivalentTo(3), "the poller's listing and fetch, the set's fetch")
	g.Expect(srv.Stats().UploadPack).To(BeEquivalentTo(2), "the poller's fetch, the set's fetch")

	sched.Unsubscribe("team/app")
	_, ok := sched.NextPoll(key)
	g.Expect(ok).To(BeTrue(), "the set still follows the source")
	lister.Forget(client.ObjectKey{Namespace: "team", Name: "fleet"})
	_, ok = sched.NextPoll(key)
	g.Expect(ok).To(BeFalse(), "a forgotten set polls nothing")
}
