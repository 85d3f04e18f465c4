package cluster

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sync/remote"
)

func target(kubeConfig string) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"}}
	if kubeConfig != "" {
		st.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: kubeConfig}}
	}
	return st
}

func newLocal(t *testing.T, checker *health.Checker) *Local {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := convergev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return NewLocal(LocalOptions{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Scheme: scheme,
		Mapper: meta.NewDefaultRESTMapper(nil), Checker: checker})
}

// A client and a checker are made once per identity and shared; the daemon's own checker
// serves the daemon's identity.
func TestLocalOneClientAndCheckerPerUser(t *testing.T) {
	own := &health.Checker{}
	l := newLocal(t, own)
	a, err := l.Client("system:serviceaccount:shop:deployer")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := l.Client("system:serviceaccount:shop:deployer")
	c, _ := l.Client("")
	if a != b || a == c {
		t.Errorf("clients: same user %v, other user %v; want one per user", a == b, a == c)
	}
	if got, _ := l.Checker(""); got != own {
		t.Errorf("the daemon's identity is watched by the checker it was given")
	}
	x, err := l.Checker("system:serviceaccount:shop:deployer")
	if err != nil {
		t.Fatal(err)
	}
	y, _ := l.Checker("system:serviceaccount:shop:deployer")
	if x != y || x == own {
		t.Errorf("an impersonated user has its own checker, made once")
	}
	if w, first, _ := l.Drift(types.NamespacedName{}); w != nil || first {
		t.Errorf("no drift watcher given: drift is not watched")
	}
}

// The daemon's own cluster for a SyncTarget without spec.kubeConfig; one with it is
// refused by a daemon without remote clusters, and its kubeconfig Secret is read (here:
// missing) by one with them.
func TestSetFor(t *testing.T) {
	l := newLocal(t, nil)
	s := NewSet(l, nil)
	if c, err := s.For(context.Background(), target("")); err != nil || c != Cluster(l) || c.Name() != "" {
		t.Errorf("local target: %v, %v; want the daemon's cluster", c, err)
	}
	if s.Local() != Cluster(l) {
		t.Errorf("Local is the daemon's cluster")
	}
	if _, err := s.For(context.Background(), target("prod-kc")); !errors.Is(err, ErrNoRemote) {
		t.Errorf("remote target without remote clusters: %v; want ErrNoRemote", err)
	}
	secrets := fake.NewClientBuilder().Build()
	s = NewSet(l, remote.NewClusters(remote.Options{Secrets: secrets}))
	_, err := s.For(context.Background(), target("prod-kc"))
	var ce *remote.ConfigError
	if !errors.As(err, &ce) || ce.Secret != "shop/prod-kc" {
		t.Errorf("missing kubeconfig Secret: %v; want a ConfigError naming shop/prod-kc", err)
	}
	s.Release(types.NamespacedName{Namespace: "shop", Name: "app"}) // nothing held: no panic
}

// A SyncTarget of a remote cluster gets that cluster, named by its kubeconfig Secret, and
// the daemon's own stays at hand for its Secrets; one that leaves it lets go of it.
func TestSetForRemote(t *testing.T) {
	kc, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: "https://cluster.example.com:6443"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {Token: "t0ken"}},
		Contexts:       map[string]*clientcmdapi.Context{"ctx": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "ctx",
	})
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	secrets := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod-kc"}, Data: map[string][]byte{"value": kc}}).Build()
	remotes := remote.NewClusters(remote.Options{Secrets: secrets, Scheme: scheme})
	l := newLocal(t, nil)
	s := NewSet(l, remotes)
	c, err := s.For(context.Background(), target("prod-kc"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Name() != "shop/prod-kc" || c == Cluster(l) || c.Mapper() == nil {
		t.Errorf("remote cluster %q; want the cluster of shop/prod-kc", c.Name())
	}
	if _, err := c.Client("system:serviceaccount:shop:deployer"); err != nil {
		t.Errorf("client on the remote cluster: %v", err)
	}
	if w, _, _ := c.Drift(types.NamespacedName{Namespace: "shop", Name: "app"}); w != nil {
		t.Errorf("no drift watcher on the daemon's cluster, none on the remote one")
	}
	if remotes.Len() != 1 {
		t.Fatalf("%d remote clusters open; want 1", remotes.Len())
	}
	if _, err := s.For(context.Background(), target("")); err != nil || remotes.Len() != 0 {
		t.Errorf("a SyncTarget that left its remote cluster lets go of it: %d open, %v", remotes.Len(), err)
	}
}

// A caller (the CLI, the web UI) gets the cluster of its own client for a SyncTarget
// without spec.kubeConfig: its own identity only, no drift watch, and capabilities only
// with a config to discover them with; a remote target's kubeconfig Secret is read with
// the caller's client, and refused as the daemon refuses it.
func TestForCaller(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	on, release, err := ForCaller(context.Background(), c, nil, target(""), false)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if got, err := on.Client(""); err != nil || got != c {
		t.Errorf("the caller's own identity: %v, %v; want its client", got, err)
	}
	if _, err := on.Client("system:serviceaccount:shop:deployer"); !errors.Is(err, ErrCallerIdentity) {
		t.Errorf("another identity: %v; want ErrCallerIdentity", err)
	}
	if _, err := on.Checker("system:serviceaccount:shop:deployer"); !errors.Is(err, ErrCallerIdentity) {
		t.Errorf("another identity's checker: %v; want ErrCallerIdentity", err)
	}
	if w, _, _ := on.Drift(types.NamespacedName{}); w != nil || on.Name() != "" {
		t.Errorf("a caller's cluster watches no drift and has no name")
	}
	if _, err := on.Capabilities(); err == nil {
		t.Errorf("capabilities without a config: want an error")
	}
	_, release2, err := ForCaller(context.Background(), c, nil, target("prod-kc"), false)
	defer release2()
	var ce *remote.ConfigError
	if !errors.As(err, &ce) || ce.Secret != "shop/prod-kc" {
		t.Errorf("missing kubeconfig Secret: %v; want a ConfigError naming shop/prod-kc", err)
	}
}
