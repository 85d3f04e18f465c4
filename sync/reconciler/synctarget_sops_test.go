package reconciler_test

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/sopstest"
)

const sopsPlaintext = "envtest-sops-plaintext-4c1d"

func sopsSecretManifest() string {
	return "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: " + sopsPlaintext + "\n"
}

// withDecryption sets spec.decryption with the Secret named secret.
func withDecryption(secret string) func(*convergev1.SyncTarget) {
	return func(st *convergev1.SyncTarget) {
		st.Spec.Decryption = &convergev1.DecryptionSpec{Provider: "sops", SecretRef: &convergev1.LocalObjectReference{Name: secret}}
	}
}

func (f *fixture) keysSecret(name string, k sopstest.Keys) {
	f.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Data: k.SecretData(f.t)}
	if err := k8s.Create(context.Background(), s); err != nil {
		f.t.Fatal(err)
	}
}

// expectNoPlaintext checks that value is nowhere in the SyncTarget (status, history) or
// the events of its namespace.
func expectNoPlaintext(t *testing.T, f *fixture, st *convergev1.SyncTarget, value string) {
	t.Helper()
	g := NewWithT(t)
	b, err := json.Marshal(get(g, st))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).NotTo(ContainSubstring(value))
	events := &corev1.EventList{}
	g.Expect(k8s.List(context.Background(), events, client.InNamespace(f.ns))).To(Succeed())
	g.Expect(events.Items).NotTo(BeEmpty())
	b, err = json.Marshal(events)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).NotTo(ContainSubstring(value))
}

func TestSOPSSecretIsDecryptedAndApplied(t *testing.T) {
	f := newFixture(t)
	k := sopstest.NewKeys(t)
	f.keysSecret("sops-keys", k)
	rev := f.commit(map[string]string{"deploy/secret.yaml": k.EncryptYAML(t, sopsSecretManifest(), true)})
	st := f.syncTarget("sops", withDecryption("sops-keys"))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(st.Status.LastAppliedRevision).To(Equal(rev))
	})
	secret := &corev1.Secret{}
	NewWithT(t).Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "db"}, secret)).To(Succeed())
	NewWithT(t).Expect(string(secret.Data["password"])).To(Equal(sopsPlaintext))
	expectNoPlaintext(t, f, st, sopsPlaintext)
}

func TestSOPSFailuresApplyNothing(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(f *fixture, k sopstest.Keys) func(*convergev1.SyncTarget)
		want   func(k sopstest.Keys) string
	}{{
		name:   "no spec.decryption",
		mutate: func(*fixture, sopstest.Keys) func(*convergev1.SyncTarget) { return nil },
		want: func(sopstest.Keys) string {
			return "render deploy/secret.yaml: decryption failed: the file is SOPS-encrypted"
		},
	}, {
		name: "keys for another recipient",
		mutate: func(f *fixture, _ sopstest.Keys) func(*convergev1.SyncTarget) {
			f.keysSecret("other", sopstest.NewKeys(f.t))
			return withDecryption("other")
		},
		want: func(k sopstest.Keys) string {
			return "no key for this file: it is encrypted for age recipients " + k.Age.Recipient().String()
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			k := sopstest.NewKeys(t)
			f.commit(map[string]string{
				"deploy/secret.yaml": k.EncryptYAML(t, sopsSecretManifest(), false),
				"deploy/cm.yaml":     configMap("beside", "x"),
			})
			st := f.syncTarget("sops", tt.mutate(f, k))
			eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
				g.Expect(ready(st).Reason).To(Equal(convergev1.DecryptionFailedReason))
				g.Expect(ready(st).Message).To(ContainSubstring(tt.want(k)))
			})
			err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "beside"}, &corev1.ConfigMap{})
			NewWithT(t).Expect(apierrors.IsNotFound(err)).To(BeTrue(), "nothing of the revision is applied: %v", err)
			expectNoPlaintext(t, f, st, sopsPlaintext)
		})
	}
}

// A SyncTarget whose decryption Secret does not exist yet syncs once it is created.
func TestSOPSMissingSecretIsRetried(t *testing.T) {
	f := newFixture(t)
	k := sopstest.NewKeys(t)
	f.commit(map[string]string{"deploy/secret.yaml": k.EncryptYAML(t, sopsSecretManifest(), false)})
	st := f.syncTarget("sops", withDecryption("later"))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.DecryptionFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("reading the decryption Secret " + f.ns + "/later"))
	})
	f.keysSecret("later", k)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
	})
	expectNoPlaintext(t, f, st, sopsPlaintext)
}
