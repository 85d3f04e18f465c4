package reconciler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
)

func sourceVerified(st *convergev1.SyncTarget) *metav1.Condition {
	c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.SourceVerifiedCondition)
	if c == nil {
		return &metav1.Condition{}
	}
	return c
}

// entriesFor counts the history entries of revision.
func entriesFor(st *convergev1.SyncTarget, revision string) int {
	n := 0
	for _, e := range st.Status.History {
		if e.Revision == revision {
			n++
		}
	}
	return n
}

// setKeys creates or replaces the trusted keys Secret.
func setKeys(g Gomega, f *fixture, data map[string]string) {
	ctx := context.Background()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "trusted-keys", Namespace: f.ns}, StringData: data}
	if err := k8s.Create(ctx, s); err == nil {
		return
	}
	old := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(s), old)).To(Succeed())
	old.Data, old.StringData = nil, data
	g.Expect(k8s.Update(ctx, old)).To(Succeed())
}

// refusedFor checks that revision was refused for verification with a message holding want,
// while applied stays in place.
func refusedFor(t *testing.T, f *fixture, st *convergev1.SyncTarget, revision, applied, value, want string) {
	t.Helper()
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastFetchedRevision).To(Equal(revision))
		g.Expect(sourceVerified(st).Status).To(Equal(metav1.ConditionFalse), sourceVerified(st).Message)
		g.Expect(sourceVerified(st).Reason).To(Equal(convergev1.VerificationFailedReason))
		g.Expect(sourceVerified(st).Message).To(ContainSubstring(want))
		g.Expect(ready(st).Reason).To(Equal(convergev1.VerificationFailedReason))
		g.Expect(st.Status.History[0].Revision).To(Equal(revision))
		g.Expect(st.Status.History[0].Result).To(Equal(convergev1.SyncFailed))
		g.Expect(st.Status.History[0].Message).To(ContainSubstring("commit " + sha(revision)[:12]))
	})
	// Not one entry per poll, and nothing of it applied (the interval is 1 s).
	NewWithT(t).Consistently(func(g Gomega) {
		st := get(g, st)
		g.Expect(entriesFor(st, revision)).To(Equal(1))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(applied))
		g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal(value))
	}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
}

// TestVerifySignedCommits: only commits signed by a key of the trusted keys Secret deploy;
// an unsigned commit, or one signed by another key, is refused once and the previous
// revision stays; keys rotate by editing the Secret.
func TestVerifySignedCommits(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := NewWithT(t)
	alice, alicePub := gittest.OpenPGPKey(t, "Alice", "alice@example.com")
	bob, _, bobPub := gittest.SSHSigningKey(t)
	bobLine := "bob@example.com " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(bobPub)))

	rev1 := "main@sha1:" + f.repo.SignedCommit(t, "main", alice, map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("signed", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Verify = &convergev1.VerifySpec{SecretRef: convergev1.LocalObjectReference{Name: "trusted-keys"}}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) { // no Secret yet: retried
		g.Expect(ready(st).Reason).To(Equal(convergev1.VerificationFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("the trusted keys secret " + f.ns + "/trusted-keys does not exist"))
		g.Expect(st.Status.History).To(BeEmpty())
	})
	setKeys(g, f, map[string]string{"alice.asc": alicePub})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1), ready(st).Message)
		g.Expect(sourceVerified(st).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(sourceVerified(st).Message).To(MatchRegexp(
			`^verified commit %s signed by OpenPGP key [0-9A-F]{40} \(Alice <alice@example.com>\)$`, sha(rev1)[:12]))
	})

	unsigned := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	refusedFor(t, f, st, unsigned, rev1, "1", "commit "+sha(unsigned)[:12]+" is not signed")
	g.Expect(eventsOf(g, st)).To(ContainElement(HaveField("Reason", convergev1.VerificationFailedReason)))

	byBob := "main@sha1:" + f.repo.SignedCommit(t, "main", bob, map[string]string{"deploy/a.yaml": configMap("a", "3")})
	refusedFor(t, f, st, byBob, rev1, "1", "is signed by SSH key "+ssh.FingerprintSHA256(bobPub)+", which is not trusted")

	// Rotation: Bob's key joins; his next commit deploys, and so do Alice's.
	setKeys(g, f, map[string]string{"alice.asc": alicePub, "allowed_signers": bobLine + "\n"})
	byBob = "main@sha1:" + f.repo.SignedCommit(t, "main", bob, map[string]string{"deploy/a.yaml": configMap("a", "4")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAppliedRevision).To(Equal(byBob), ready(st).Message)
		g.Expect(sourceVerified(st).Message).To(HaveSuffix("signed by SSH key " + ssh.FingerprintSHA256(bobPub) + " (bob@example.com)"))
		g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("4"))
	})
	byAlice := "main@sha1:" + f.repo.SignedCommit(t, "main", alice, map[string]string{"deploy/a.yaml": configMap("a", "5")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAppliedRevision).To(Equal(byAlice), ready(st).Message)
	})

	// Alice's key removed: her commits no longer deploy.
	setKeys(g, f, map[string]string{"allowed_signers": bobLine + "\n"})
	late := "main@sha1:" + f.repo.SignedCommit(t, "main", alice, map[string]string{"deploy/a.yaml": configMap("a", "6")})
	refusedFor(t, f, st, late, byAlice, "5", "is signed by OpenPGP key ")
}

// TestVerifyTagModes: a signed annotated tag on an unsigned commit deploys in Tag mode and is
// refused in TagAndHEAD mode.
func TestVerifyTagModes(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	sign, _, pub := gittest.SSHSigningKey(t)
	setKeys(g, f, map[string]string{"k": string(ssh.MarshalAuthorizedKey(pub))})
	commit := f.repo.Commit(t, "main", map[string]string{"deploy/a.yaml": configMap("a", "1")})
	f.repo.SignedTag(t, "v1.0.0", commit, sign)
	rev := "v1.0.0@sha1:" + commit

	st := f.syncTarget("tagged", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Ref = convergev1.GitRef{Tag: "v1.0.0"}
		st.Spec.Source.Verify = &convergev1.VerifySpec{Mode: convergev1.VerifyTagAndHEAD,
			SecretRef: convergev1.LocalObjectReference{Name: "trusted-keys"}}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(sourceVerified(st).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(sourceVerified(st).Message).To(ContainSubstring("commit " + commit[:12] + " is not signed"))
		g.Expect(st.Status.LastAppliedRevision).To(BeEmpty())
	})

	latest := get(g, st)
	latest.Spec.Source.Verify.Mode = convergev1.VerifyTag
	g.Expect(k8s.Update(ctx, latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAppliedRevision).To(Equal(rev), ready(st).Message)
		g.Expect(sourceVerified(st).Message).To(Equal("verified tag v1.0.0 signed by SSH key " + ssh.FingerprintSHA256(pub)))
	})
}
