package target_test

import (
	"context"
	"errors"
	"testing"

	"github.com/converge-gitops/converge/sync/postbuild"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/target"
)

func syncTarget() *convergev1.SyncTarget {
	return &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: "https://git.example/shop.git", Ref: convergev1.GitRef{Branch: "main"},
				SecretRef: &convergev1.LocalObjectReference{Name: "creds"}},
			Path: "deploy", TargetNamespace: "shop-prod",
		}}
}

func inputs(st *convergev1.SyncTarget, objects ...*corev1.Secret) target.Inputs {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	b := fake.NewClientBuilder().WithScheme(scheme)
	for _, o := range objects {
		b = b.WithObjects(o)
	}
	return target.For(st, b.Build(), nil)
}

func secret(ns, name string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestSourceReadsItsCredentialsFromItsOwnNamespace(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	in := inputs(syncTarget(), secret("shop", "creds", map[string]string{"username": "u", "password": "p"}))
	src, err := in.Source(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(src.URL).To(Equal("https://git.example/shop.git"))
	g.Expect(src.Auth).NotTo(BeNil())

	// The same Secret name in another namespace is not the SyncTarget's.
	in = inputs(syncTarget(), secret("other", "creds", map[string]string{"username": "u", "password": "p"}))
	_, err = in.Source(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("the source credentials secret shop/creds does not exist")))
	g.Expect(err.Error()).NotTo(ContainSubstring("other"))
}

func TestTrustedKeys(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	st := syncTarget()
	keys, err := inputs(st).TrustedKeys(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys).To(BeNil(), "no spec.source.verify, no keys")

	st.Spec.Source.Verify = &convergev1.VerifySpec{SecretRef: convergev1.LocalObjectReference{Name: "keys"}}
	_, err = inputs(st).TrustedKeys(ctx)
	g.Expect(err).To(MatchError(ContainSubstring("the trusted keys secret shop/keys does not exist")))
}

func TestRenderOptions(t *testing.T) {
	g := NewWithT(t)
	opts, err := inputs(syncTarget()).RenderOptions(context.Background(), "/checkout", postbuild.Variables{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(opts.Root).To(Equal("/checkout"))
	g.Expect(opts.Path).To(Equal("deploy"))
	g.Expect(opts.TargetNamespace).To(Equal("shop-prod"))
	g.Expect([]string{opts.OwnerNamespace, opts.OwnerName}).To(Equal([]string{"shop", "app"}))
	g.Expect(opts.Decryption).To(BeNil())

	st := syncTarget()
	st.Spec.Decryption = &convergev1.DecryptionSpec{Provider: "sops", SecretRef: &convergev1.LocalObjectReference{Name: "sops"}}
	_, err = inputs(st).RenderOptions(context.Background(), "/checkout", postbuild.Variables{})
	g.Expect(err).To(MatchError(ContainSubstring("decryption Secret shop/sops")))
}

func TestHelmRenderOptions(t *testing.T) {
	g := NewWithT(t)
	st := syncTarget()
	st.Spec.Helm = &convergev1.HelmSpec{ReleaseName: "web", ValuesFiles: []string{"values-prod.yaml"},
		Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicaCount":2}`)}, CRDs: convergev1.CRDsSkip}
	vars := postbuild.Variables{Values: []postbuild.ValuesLayer{{Name: "Secret/db[values.yaml]", Data: []byte("a: b"), Sensitive: true}}}
	opts, err := inputs(st).RenderOptions(context.Background(), "/checkout", vars)
	g.Expect(err).NotTo(HaveOccurred())
	h := opts.Helm
	g.Expect(h).NotTo(BeNil())
	g.Expect([]string{h.ReleaseName, h.Namespace}).To(Equal([]string{"web", "shop-prod"}), "the target namespace is the release's")
	g.Expect(h.ValuesFiles).To(Equal([]string{"values-prod.yaml"}))
	g.Expect(string(h.Inline)).To(Equal(`{"replicaCount":2}`))
	g.Expect(h.Values).To(HaveLen(1))
	g.Expect(h.Values[0].Sensitive).To(BeTrue())
	g.Expect(h.SkipCRDs).To(BeTrue())
	g.Expect(h.IsUpgrade).To(BeFalse(), "nothing applied yet: an install")

	st.Spec.TargetNamespace, st.Spec.Helm = "", nil
	st.Status.LastAppliedRevision = "main@sha1:0123"
	h = target.HelmOptions(st, postbuild.Variables{})
	g.Expect([]string{h.ReleaseName, h.Namespace}).To(Equal([]string{"app", "shop"}), "defaults: the SyncTarget's name and namespace")
	g.Expect(h.IsUpgrade).To(BeTrue())

	st.Status.History = make([]convergev1.HistoryEntry, 10)
	st.Status.Attempts = 41
	g.Expect(target.HelmOptions(st, postbuild.Variables{}).Revision).To(Equal(42), "the attempts counted, not the capped history")
}

func inventory(ids ...string) *convergev1.ResourceInventory {
	inv := &convergev1.ResourceInventory{}
	for _, id := range ids {
		inv.Entries = append(inv.Entries, convergev1.InventoryEntry{ID: id, Version: "v1"})
	}
	return inv
}

func TestPruneStale(t *testing.T) {
	previous := inventory("shop_a__ConfigMap", "shop_b__ConfigMap", "shop_c__ConfigMap")
	one := intstr.FromInt32(1)
	tests := []struct {
		name     string
		rules    target.Prune
		rendered *convergev1.ResourceInventory
		count    int
		want     int
		wantErr  error
	}{
		{name: "prune off deletes nothing", rules: target.Prune{}, rendered: inventory(), count: 0},
		{name: "what left Git", rules: target.Prune{Enabled: true}, rendered: inventory("shop_a__ConfigMap"), count: 1, want: 2},
		{name: "nothing rendered", rules: target.Prune{Enabled: true}, rendered: inventory(), wantErr: apply.ErrWouldPruneAll},
		{name: "nothing rendered, allowed", rules: target.Prune{Enabled: true, AllowEmpty: true}, rendered: inventory(), want: 3},
		{name: "over maxDeletions", rules: target.Prune{Enabled: true, MaxDeletions: &one},
			rendered: inventory("shop_a__ConfigMap"), count: 1, wantErr: apply.ErrTooManyDeletions},
		{name: "nothing rendered is said first", rules: target.Prune{Enabled: true, MaxDeletions: &one},
			rendered: inventory(), wantErr: apply.ErrWouldPruneAll},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			stale, err := tt.rules.Stale(previous, tt.rendered, tt.count)
			if tt.wantErr != nil {
				g.Expect(errors.Is(err, tt.wantErr)).To(BeTrue(), "%v", err)
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(stale).To(HaveLen(tt.want))
		})
	}
}
