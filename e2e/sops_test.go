package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/sopstest"
)

// TestSOPSSecretFromGit: a SOPS-encrypted Secret in Git is deployed once its decryption keys
// exist. Before, the sync fails with DecryptionFailed and applies nothing of the revision;
// after, the cluster Secret holds the plaintext, which appears nowhere else: not in the
// daemon's logs, the events, the SyncTarget's status, nor `converge build` without --decrypt.
func TestSOPSSecretFromGit(t *testing.T) {
	run(t, 22, "SOPS-encrypted Secret from Git", parallel, func(s *scenario) {
		g := NewWithT(t)
		const plaintext = "e2e-sops-plaintext-51f0"
		k := sopstest.NewKeys(t)
		r := s.repo("app")
		rev := r.commit(map[string]string{
			"deploy/secret.yaml": k.EncryptYAML(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: "+plaintext+"\n", true),
			"deploy/cm.yaml":     configMap("settings", "v1"),
		})
		st := s.syncTarget("sops", r, func(st *convergev1.SyncTarget) {
			st.Spec.Decryption = &convergev1.DecryptionSpec{Provider: "sops", SecretRef: &convergev1.LocalObjectReference{Name: "sops-keys"}}
		})

		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Reason).To(Equal(convergev1.DecryptionFailedReason))
			g.Expect(ready(st).Message).To(ContainSubstring("reading the decryption Secret " + s.ns + "/sops-keys"))
		})
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.DecryptionFailedReason, "sops-keys")
		gone(g, s.app, "settings", &corev1.ConfigMap{})

		s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sops-keys", Namespace: s.ns}, Data: k.SecretData(t)})
		s.latency("keys Secret created → healthy", s.waitHealthy(st, rev, 90*time.Second))
		secret := &corev1.Secret{}
		object(g, s.app, "db", secret)
		g.Expect(string(secret.Data["password"])).To(Equal(plaintext))

		leaks := []string{plaintext, base64.StdEncoding.EncodeToString([]byte(plaintext))}
		b, err := json.Marshal(get(g, st))
		g.Expect(err).NotTo(HaveOccurred())
		evs := &corev1.EventList{}
		g.Expect(suite.k8s.List(context.Background(), evs, client.InNamespace(s.ns))).To(Succeed())
		eb, err := json.Marshal(evs)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(suite.daemon.logged(s.ns)).To(BeTrue(), "the daemon's log is captured")
		build := s.cli(60*time.Second, "build", "--target", "sops", "-n", s.ns)
		g.Expect(build.code).To(Equal(0), build.String())
		g.Expect(build.stdout).To(ContainSubstring("password: '***'"))
		logs, err := os.ReadFile(suite.daemon.log.Name())
		g.Expect(err).NotTo(HaveOccurred())
		for _, leak := range leaks {
			g.Expect(suite.daemon.logged(leak)).To(BeFalse(), "the daemon logged the plaintext")
			g.Expect(string(logs)).NotTo(ContainSubstring(leak))
			g.Expect(string(b)).NotTo(ContainSubstring(leak), "the SyncTarget shows the plaintext")
			g.Expect(string(eb)).NotTo(ContainSubstring(leak), "an event shows the plaintext")
			g.Expect(strings.Contains(build.stdout+build.stderr, leak)).To(BeFalse(), "converge build shows the plaintext")
		}
	})
}
