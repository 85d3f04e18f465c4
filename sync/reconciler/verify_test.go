package reconciler

import (
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// TestSourceVerifiedCondition: the SourceVerified condition follows what verification found,
// is left alone by outcomes that did not verify (a held revision), and is removed when the
// SyncTarget asks for no verification.
func TestSourceVerifiedCondition(t *testing.T) {
	g := NewWithT(t)
	st := syncTarget()
	now, interval := time.Now(), time.Minute
	refused := fromFailure(classify(phaseVerify, &sources.VerificationError{Object: "commit 0a1b", Reason: "is not signed"}),
		revR, &attempt{started: now}, "revision R: commit 0a1b is not signed")
	refused.verified = &verification{status: metav1.ConditionFalse, message: refused.message}
	fx := summarize(st, refused, now, interval)
	g.Expect(condition(st, convergev1.SourceVerifiedCondition)).To(Equal("False/VerificationFailed"))
	g.Expect(condition(st, convergev1.ReadyCondition)).To(Equal("False/VerificationFailed"))
	g.Expect(fx.eventReason).To(Equal(convergev1.VerificationFailedReason))
	g.Expect(st.Status.History).To(HaveLen(1))
	g.Expect(st.Status.History[0].Result).To(Equal(convergev1.SyncFailed))

	summarize(st, outcome{kind: idle}, now, interval) // the previous revision held
	g.Expect(condition(st, convergev1.SourceVerifiedCondition)).To(Equal("False/VerificationFailed"))
	g.Expect(st.Status.History).To(HaveLen(1))

	summarize(st, outcome{kind: succeeded, revision: revR, attempt: &attempt{},
		verified: &verification{status: metav1.ConditionTrue, message: "verified commit 0a1b signed by SSH key SHA256:x"}}, now, interval)
	g.Expect(condition(st, convergev1.SourceVerifiedCondition)).To(Equal("True/Succeeded"))

	summarize(st, outcome{kind: idle, verified: &verification{}}, now, interval)
	g.Expect(condition(st, convergev1.SourceVerifiedCondition)).To(BeEmpty())

	retried := fromFailure(classify(phaseVerify, errors.New("unreachable")), revR, nil, "m")
	g.Expect(retried.kind).To(Equal(retrying))
	g.Expect(retried.attempt).To(BeNil(), "a check that could not run records no history")
}
