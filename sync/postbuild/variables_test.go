package postbuild

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

const secretValue = "hunter2-very-secret"

func objects() []client.Object {
	return []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "base"},
			Data: map[string]string{"env": "dev", "region": "eu", "not.a-name": "x"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "creds"},
			Data: map[string][]byte{"token": []byte(secretValue), "env": []byte("staging")}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "creds"},
			Data: map[string]string{"token": "from-another-namespace"}},
	}
}

func target(pb *convergev1.PostBuildSpec) *convergev1.SyncTarget {
	return &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"},
		Spec: convergev1.SyncTargetSpec{PostBuild: pb}}
}

func TestRead(t *testing.T) {
	tests := []struct {
		name     string
		pb       *convergev1.PostBuildSpec
		want     map[string]string
		strict   bool
		noDigest bool
		wantErr  string
	}{
		{name: "no postBuild", noDigest: true},
		{
			name: "later referent wins, inline wins over all, non-names skipped",
			pb: &convergev1.PostBuildSpec{
				SubstituteFrom: []convergev1.SubstituteReference{{Kind: "ConfigMap", Name: "base"}, {Kind: "Secret", Name: "creds"}},
				Substitute:     map[string]string{"region": "us"},
			},
			want:   map[string]string{"env": "staging", "region": "us", "token": secretValue},
			strict: true,
		},
		{
			name: "inline only, not strict",
			pb:   &convergev1.PostBuildSpec{Substitute: map[string]string{"a": "1"}, Strict: new(bool)},
			want: map[string]string{"a": "1"}, noDigest: true,
		},
		{
			name: "optional referent missing",
			pb: &convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{
				{Kind: "Secret", Name: "nope", Optional: true}, {Kind: "ConfigMap", Name: "base"}}},
			want: map[string]string{"env": "dev", "region": "eu"}, strict: true,
		},
		{
			name: "missing referent, read only in the SyncTarget's namespace",
			pb: &convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{
				{Kind: "Secret", Name: "creds"}, {Kind: "ConfigMap", Name: "creds"}}},
			wantErr: "spec.postBuild.substituteFrom[1]: ConfigMap team/creds not found",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects()...).Build()
			v, err := Read(context.Background(), c, target(tt.pb))
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ErrReferentNotFound))
				g.Expect(err.Error()).To(Equal(tt.wantErr))
				g.Expect(err.Error()).NotTo(ContainSubstring(secretValue))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(v.Digest == "").To(Equal(tt.noDigest))
			if tt.pb == nil {
				g.Expect(v.Substitution).To(BeNil())
				return
			}
			g.Expect(v.Substitution.Vars).To(Equal(tt.want))
			g.Expect(v.Substitution.Strict).To(Equal(tt.strict))
		})
	}
}

// TestReadDigest: the digest changes with any value read, and with an optional referent
// appearing, and not otherwise.
func TestReadDigest(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(objects()...).Build()
	st := target(&convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{
		{Kind: "ConfigMap", Name: "base"}, {Kind: "ConfigMap", Name: "late", Optional: true}}})
	digest := func() string {
		v, err := Read(ctx, c, st)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(v.Digest).To(HavePrefix("sha256:"))
		return v.Digest
	}
	first := digest()
	g.Expect(digest()).To(Equal(first))

	cm := &corev1.ConfigMap{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "base"}, cm)).To(Succeed())
	cm.Data["env"] = "prod"
	g.Expect(c.Update(ctx, cm)).To(Succeed())
	second := digest()
	g.Expect(second).NotTo(Equal(first))

	g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "late"}})).To(Succeed())
	g.Expect(digest()).NotTo(Equal(second), "an optional referent that appears, even empty, counts")
}
