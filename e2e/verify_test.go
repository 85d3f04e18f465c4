package e2e

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
)

// TestSignedCommitsOnly: a SyncTarget that deploys only commits signed by a trusted key
// (git's SSH signatures here) refuses an unsigned push — nothing of it applied, the objects
// of the signed revision untouched, SourceVerified=False and one history entry naming the
// commit — and deploys the next signed push.
func TestSignedCommitsOnly(t *testing.T) {
	run(t, 21, "signed commits only: an unsigned push refused, the next signed one deployed", parallel, func(s *scenario) {
		g := NewWithT(t)
		sign, _, pub := gittest.SSHSigningKey(t)
		fingerprint := ssh.FingerprintSHA256(pub)
		s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "trusted-keys", Namespace: s.ns},
			Data: map[string][]byte{"allowed_signers": ssh.MarshalAuthorizedKey(pub)}})
		r := s.repo("app")
		first := revision(r.SignedCommit(t, "main", sign, map[string]string{"deploy/cm.yaml": configMap("settings", "signed 1")}))
		st := s.syncTarget("signed", r, func(st *convergev1.SyncTarget) {
			st.Spec.Source.Verify = &convergev1.VerifySpec{SecretRef: convergev1.LocalObjectReference{Name: "trusted-keys"}}
		})
		s.waitHealthy(st, first, 90*time.Second)
		g.Expect(condition(get(g, st), convergev1.SourceVerifiedCondition).Message).To(ContainSubstring("signed by SSH key " + fingerprint))
		before := &corev1.ConfigMap{}
		object(g, s.app, "settings", before)

		unsigned := r.commit(map[string]string{"deploy/cm.yaml": configMap("settings", "unsigned")})
		commit := "commit " + strings.TrimPrefix(unsigned, "main@sha1:")[:12]
		s.eventually(st, time.Minute, func(g Gomega, st *convergev1.SyncTarget) {
			c := condition(st, convergev1.SourceVerifiedCondition)
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse), c.Message)
			g.Expect(c.Reason).To(Equal(convergev1.VerificationFailedReason))
			g.Expect(c.Message).To(ContainSubstring(commit + " is not signed"))
			g.Expect(ready(st).Reason).To(Equal(convergev1.VerificationFailedReason))
			g.Expect(st.Status.History[0]).To(And(HaveField("Revision", unsigned), HaveField("Result", convergev1.SyncFailed),
				HaveField("Message", ContainSubstring(commit))))
		})
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.VerificationFailedReason, unsigned, commit+" is not signed")
		// Several polls (every 2 s) later: still one entry, the signed revision in place.
		g.Consistently(func(g Gomega) {
			st := get(g, st)
			n := 0
			for _, e := range st.Status.History {
				if e.Revision == unsigned {
					n++
				}
			}
			g.Expect(n).To(Equal(1), "one history entry for the refused revision")
			g.Expect(st.Status.LastAppliedRevision).To(Equal(first))
			now := &corev1.ConfigMap{}
			object(g, s.app, "settings", now)
			g.Expect(now.ResourceVersion).To(Equal(before.ResourceVersion), "the signed revision's objects untouched")
		}).WithTimeout(7 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

		pushed := time.Now()
		signed := revision(r.SignedCommit(t, "main", sign, map[string]string{"deploy/cm.yaml": configMap("settings", "signed 2")}))
		s.waitHealthy(st, signed, 90*time.Second)
		s.latency("signed push after a refused one→healthy", time.Since(pushed))
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("signed 2"))
		g.Expect(condition(get(g, st), convergev1.SourceVerifiedCondition)).To(And(
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Message", ContainSubstring(strings.TrimPrefix(signed, "main@sha1:")[:12]+" signed by SSH key "+fingerprint))))
	})
}
