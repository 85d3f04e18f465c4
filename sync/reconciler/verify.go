package reconciler

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/target"
)

// verification is what the SourceVerified condition says; an empty status removes it (the
// SyncTarget does not ask for verification).
type verification struct {
	status  metav1.ConditionStatus
	message string
}

// verify checks, before revision is rendered, that it is signed by a trusted key when
// spec.source.verify, spec.chart.verify or spec.oci.verify asks for it. ok is false when it is not (or could not be checked): the
// outcome then says why, and nothing is rendered or applied.
func (ru *run) verify(ctx context.Context, revision string) (o outcome, ok bool) {
	if ru.st.Spec.Source.Verify == nil && (ru.st.Spec.Chart == nil || ru.st.Spec.Chart.Verify == nil) &&
		(ru.st.Spec.OCI == nil || ru.st.Spec.OCI.Verify == nil) {
		ru.verified = &verification{}
		return outcome{}, true
	}
	res, err := ru.r.Fetcher.Verify(ctx, ru.st, revision)
	if err != nil {
		return ru.unverified(classify(phaseVerify, err), revision), false
	}
	ru.verified = &verification{status: metav1.ConditionTrue, message: "verified " + res.String()}
	return outcome{}, true
}

// unverified is the outcome of a revision whose verification failed with f: one history
// entry when the revision is refused (a signature that does not verify), none when the
// check itself failed.
func (ru *run) unverified(f failure, revision string) outcome {
	msg := fmt.Sprintf("revision %s: %v", revision, f.err)
	var a *attempt
	status := metav1.ConditionUnknown
	if f.then == failRevision || f.then == stall {
		status = metav1.ConditionFalse
	}
	if f.then == failRevision {
		a = &attempt{started: ru.r.Clock.Now()}
	}
	o := fromFailure(f, revision, a, msg)
	if f.then == stall {
		o.after = ru.r.interval(ru.st) // the keys Secret is not watched: look again then
	}
	o.verified = &verification{status: status, message: msg}
	return o
}

// Verify implements revisionVerifier: the trusted keys are read from the Secret named by
// spec.source.verify.secretRef, in the SyncTarget's namespace.
func (f *GitFetcher) Verify(ctx context.Context, st *convergev1.SyncTarget, revision string) (sources.Verification, error) {
	rev, err := sources.ParseRevision(revision)
	if err != nil {
		return sources.Verification{}, err
	}
	keys, err := target.For(st, f.Reader, nil).TrustedKeys(ctx)
	if err != nil {
		return sources.Verification{}, err
	}
	src, err := f.Source(ctx, st)
	if err != nil {
		return sources.Verification{}, err
	}
	f.mu.Lock()
	if f.verifier == nil {
		f.verifier = &sources.Verifier{Cache: f.Cache}
	}
	verifier := f.verifier
	f.mu.Unlock()
	return verifier.Verify(ctx, src, rev, sources.VerifyMode(st.VerifyMode()), keys)
}
