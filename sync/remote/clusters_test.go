package remote

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/category"
	"github.com/converge-gitops/converge/sync/drift"
)

// secretReader holds the Secret team/kc with data (a fake: what is tested is the
// bookkeeping of clusters, no request is sent to a cluster).
func secretReader(t *testing.T, data map[string][]byte) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "kc"}, Data: data,
	}).Build()
}

func syncTarget(name, secret, key string) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
	st.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: secret, Key: key}}
	return st
}

func setKubeConfig(t *testing.T, c client.Client, kc []byte) {
	t.Helper()
	s := &corev1.Secret{}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "team", Name: "kc"}, s); err != nil {
		t.Fatal(err)
	}
	s.Data = map[string][]byte{"value": kc}
	if err := c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestClustersAreSharedAndReleased(t *testing.T) {
	secrets := secretReader(t, map[string][]byte{"value": kubeconfig(t, "https://cluster.example.com", nil)})
	cs := NewClusters(Options{Secrets: secrets})
	ctx := context.Background()
	a, err := cs.Acquire(ctx, syncTarget("a", "kc", ""))
	if err != nil {
		t.Fatal(err)
	}
	b, err := cs.Acquire(ctx, syncTarget("b", "kc", ""))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := cs.Acquire(ctx, syncTarget("a", "kc", ""))
	if a != b || a != again || cs.Len() != 1 {
		t.Fatalf("one kubeconfig, one cluster: %p %p %p, %d open", a, b, again, cs.Len())
	}
	if a.Name != "team/kc" {
		t.Fatalf("name %q", a.Name)
	}
	cs.Release(types.NamespacedName{Namespace: "team", Name: "a"})
	if a.Closed() {
		t.Fatal("closed while b holds it")
	}
	cs.Release(types.NamespacedName{Namespace: "team", Name: "b"})
	if !a.Closed() || cs.Len() != 0 {
		t.Fatalf("released by all: closed %v, %d open", a.Closed(), cs.Len())
	}
}

// TestRotatedSecret: a Secret with a new kubeconfig makes a new cluster, and the old one
// is closed once the last SyncTarget moved over.
func TestRotatedSecret(t *testing.T) {
	secrets := secretReader(t, map[string][]byte{"value": kubeconfig(t, "https://cluster.example.com", nil)})
	parent := drift.NewWatcher(context.Background(), nil, nil)
	cs := NewClusters(Options{Secrets: secrets})
	ctx := context.Background()
	a, b := syncTarget("a", "kc", ""), syncTarget("b", "kc", "")
	old, err := cs.Acquire(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Acquire(ctx, b); err != nil {
		t.Fatal(err)
	}
	if w, first, err := old.Drift(parent, client.ObjectKeyFromObject(a)); err != nil || w == nil || !first {
		t.Fatalf("drift watcher: %v %v %v", w, first, err)
	}
	setKubeConfig(t, secrets, kubeconfig(t, "https://cluster.example.com", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Token = "rotated"
	}))
	rotated, err := cs.Acquire(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if rotated == old || old.Closed() || cs.Len() != 2 {
		t.Fatalf("rotated: new %v, old closed %v while b holds it, %d open", rotated != old, old.Closed(), cs.Len())
	}
	if _, first, _ := rotated.Drift(parent, client.ObjectKeyFromObject(a)); !first {
		t.Fatal("a is new to the rotated cluster's drift watcher: its kinds must be watched again")
	}
	if _, err := cs.Acquire(ctx, b); err != nil {
		t.Fatal(err)
	}
	if !old.Closed() || cs.Len() != 1 || cs.Current(client.ObjectKeyFromObject(b)) != rotated {
		t.Fatalf("once b moved: old closed %v, %d open", old.Closed(), cs.Len())
	}
	if w, _, _ := old.Drift(parent, client.ObjectKeyFromObject(a)); w != nil {
		t.Fatal("a closed cluster hands out no drift watcher")
	}
}

func TestAcquireErrorsNameTheSecret(t *testing.T) {
	secrets := secretReader(t, map[string][]byte{"value": kubeconfig(t, "https://cluster.example.com", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Exec = &clientcmdapi.ExecConfig{Command: "aws"}
	})})
	cs := NewClusters(Options{Secrets: secrets})
	for _, tc := range []struct {
		st   *convergev1.SyncTarget
		want string
	}{
		{syncTarget("a", "missing", ""), "the kubeconfig secret team/missing does not exist"},
		{syncTarget("a", "kc", "nokey"), `kubeconfig secret team/kc: kubeconfig refused: it has no key "nokey"`},
		{syncTarget("a", "kc", ""), "kubeconfig secret team/kc: kubeconfig refused: exec plugins are not run"},
	} {
		_, err := cs.Acquire(context.Background(), tc.st)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !category.Is(err, category.Retry) {
			t.Errorf("want %q, got %v", tc.want, err)
		}
	}
	_, err := cs.Acquire(context.Background(), syncTarget("a", "missing", ""))
	if !apierrors.IsNotFound(err) {
		t.Errorf("a missing Secret wraps NotFound: %v", err)
	}
	if cs.Len() != 0 {
		t.Fatalf("%d clusters open after refusals", cs.Len())
	}
}

// TestForCallerTheTargetsCluster: a SyncTarget without spec.kubeConfig has no remote
// cluster (the caller's own is used); one whose kubeconfig Secret is refused gets the
// refusal, no cluster.
func TestForCallerTheTargetsCluster(t *testing.T) {
	c := secretReader(t, map[string][]byte{"value": kubeconfig(t, "https://cluster.example.com", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Exec = &clientcmdapi.ExecConfig{Command: "aws"}
	})})
	local := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "local"}}
	got, release, err := ForCaller(context.Background(), c, c.Scheme(), local, false)
	if err != nil || got != nil {
		t.Fatalf("a SyncTarget of the caller's cluster: want no remote cluster, got %v, %v", got, err)
	}
	release()
	got, release, err = ForCaller(context.Background(), c, c.Scheme(), syncTarget("remote", "kc", ""), false)
	if err == nil || !strings.Contains(err.Error(), "exec plugins are not run") || got != nil {
		t.Fatalf("an exec-plugin kubeconfig: want its refusal and no cluster, got %v, %v", got, err)
	}
	release()
}

// countingReader counts the Secrets read through it.
type countingReader struct {
	client.Reader
	reads int
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if _, ok := obj.(*corev1.Secret); ok {
		r.reads++
	}
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestSecretReadOncePerVersion: with the Secrets' resourceVersions at hand, a SyncTarget
// holding its cluster reads the kubeconfig Secret again only when it changed, or when the
// SyncTarget names another key; without them, at every Acquire.
func TestSecretReadOncePerVersion(t *testing.T) {
	c := secretReader(t, map[string][]byte{"value": kubeconfig(t, "https://cluster.example.com", nil),
		"other": kubeconfig(t, "https://other.example.com", nil)})
	secrets := &countingReader{Reader: c}
	cs := NewClusters(Options{Secrets: secrets, Versions: c})
	ctx := context.Background()
	acquire := func(st *convergev1.SyncTarget, wantReads int) *Cluster {
		t.Helper()
		cl, err := cs.Acquire(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if secrets.reads != wantReads {
			t.Fatalf("%d reads of the Secret, want %d", secrets.reads, wantReads)
		}
		return cl
	}
	a := syncTarget("a", "kc", "")
	first := acquire(a, 1)
	for range 3 {
		if acquire(a, 1) != first {
			t.Fatal("an unchanged Secret gave another cluster")
		}
	}
	acquire(syncTarget("b", "kc", ""), 2) // b holds nothing yet
	acquire(syncTarget("b", "kc", ""), 2)
	if other := acquire(syncTarget("a", "kc", "other"), 3); other == first {
		t.Fatal("another key of the Secret kept the cluster of the first")
	}
	if acquire(a, 4) != first { // back to its first key: read, and the cluster b holds
		t.Fatal("the first key's cluster is b's")
	}
	acquire(a, 4)

	setKubeConfig(t, c, kubeconfig(t, "https://cluster.example.com", func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
		u.Token = "rotated"
	}))
	rotated := acquire(a, 5)
	if rotated == first {
		t.Fatal("a rotated Secret kept the old cluster")
	}
	acquire(a, 5)

	cs.Release(client.ObjectKeyFromObject(a))
	acquire(a, 6) // released: read again

	uncached := &countingReader{Reader: c}
	cs = NewClusters(Options{Secrets: uncached})
	for i := 1; i <= 3; i++ {
		if _, err := cs.Acquire(ctx, a); err != nil {
			t.Fatal(err)
		}
		if uncached.reads != i {
			t.Fatalf("without Versions: %d reads after %d acquires", uncached.reads, i)
		}
	}
}
