package actions

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

const sha = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"

func TestUnpin(t *testing.T) {
	for _, tc := range []struct {
		name    string
		st      convergev1.SyncTarget
		wantRef convergev1.GitRef
		wantDid []string
		wantErr string
	}{
		{name: "pinned and suspended", st: convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{PinnedFromAnnotation: `{"tag":"v1.2.0"}`}},
			Spec:       convergev1.SyncTargetSpec{Suspend: true, Source: convergev1.GitSource{Ref: convergev1.GitRef{Commit: sha}}}},
			wantRef: convergev1.GitRef{Tag: "v1.2.0"}, wantDid: []string{"following tag v1.2.0 again", "no longer suspended"}},
		{name: "neither", st: convergev1.SyncTarget{Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{Ref: convergev1.GitRef{Branch: "main"}}}},
			wantRef: convergev1.GitRef{Branch: "main"}},
		{name: "a broken annotation", st: convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{PinnedFromAnnotation: `main`}}},
			wantErr: "annotation converge.dev/pinned-from is not a ref: invalid character 'm' looking for beginning of value; set spec.source.ref and remove the annotation by hand"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			did, err := Unpin(&tc.st)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(did).To(Equal(tc.wantDid))
			g.Expect(tc.st.Spec.Source.Ref).To(Equal(tc.wantRef))
			g.Expect(tc.st.Spec.Suspend).To(BeFalse())
			g.Expect(tc.st.Annotations).NotTo(HaveKey(PinnedFromAnnotation))
		})
	}
}

func TestResolveCommitInputErrors(t *testing.T) {
	g := NewWithT(t)
	st := &convergev1.SyncTarget{}
	st.Status.History = []convergev1.HistoryEntry{{Revision: "main@sha1:" + sha}}
	got, err := ResolveCommit(st, sha[:8])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal(sha))
	var in *InputError
	for _, bad := range []string{"xyz", "0a1b", "main@sha1:nothex"} {
		_, err := ResolveCommit(st, bad)
		g.Expect(errors.As(err, &in)).To(BeTrue(), bad)
	}
	_, err = ResolveCommit(st, "ffffffff")
	g.Expect(errors.As(err, &in)).To(BeFalse(), "a well-formed prefix the history lacks is not a usage error")
}
