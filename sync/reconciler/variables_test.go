package reconciler

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
)

func TestVariablesState(t *testing.T) {
	for _, tc := range []struct {
		name, last, now  string
		changed, unknown bool
		cause            string
	}{
		{name: "no substituteFrom", last: "", now: ""},
		{name: "substituteFrom removed", last: "sha256:a", now: ""},
		{name: "unchanged", last: "sha256:a", now: "sha256:a"},
		{name: "changed", last: "sha256:a", now: "sha256:b", changed: true, cause: "variables changed"},
		{name: "nothing remembered (a restart)", last: "", now: "sha256:a", unknown: true, cause: "variables read anew"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			changed, unknown := variablesState(tc.last, tc.now)
			g.Expect(changed).To(Equal(tc.changed))
			g.Expect(unknown).To(Equal(tc.unknown))
			g.Expect(variablesCause(changed, unknown)).To(Equal(tc.cause))
		})
	}
}

func TestClassifyVariables(t *testing.T) {
	gr := schema.GroupResource{Resource: "secrets"}
	for _, tc := range []struct {
		name  string
		phase phase
		err   error
		then  then
	}{
		{name: "missing referent waits (interval, or the watch)", phase: phaseVariables,
			err: fmt.Errorf("x: %w", postbuild.ErrReferentNotFound), then: waitSource},
		{name: "forbidden referent waits", phase: phaseVariables, err: apierrors.NewForbidden(gr, "s", errors.New("no")), then: waitSource},
		{name: "API server unavailable is retried", phase: phaseVariables, err: apierrors.NewServiceUnavailable("down"), then: retry},
		{name: "an unset variable fails the revision, no rollback", phase: phaseRender,
			err: &render.Error{Err: fmt.Errorf("%w: variables not set", render.ErrSubstitution)}, then: failRevision},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := classify(tc.phase, tc.err)
			g.Expect(f.reason).To(Equal(convergev1.SubstitutionFailedReason))
			g.Expect(f.then).To(Equal(tc.then))
			g.Expect(f.rollsBack()).To(BeFalse())
		})
	}
}

func TestFailedOnVariables(t *testing.T) {
	g := NewWithT(t)
	st := &convergev1.SyncTarget{}
	g.Expect(failedOnVariables(st)).To(BeFalse())
	st.Status.Conditions = []metav1.Condition{{Type: convergev1.ReadyCondition, Status: metav1.ConditionFalse, Reason: convergev1.SubstitutionFailedReason}}
	g.Expect(failedOnVariables(st)).To(BeTrue())
	st.Status.Conditions[0].Reason = convergev1.BuildFailedReason
	g.Expect(failedOnVariables(st)).To(BeFalse())
}

// TestIdentityOnly: the cache of watched ConfigMaps and Secrets keeps no annotation (kubectl's
// last-applied-configuration of a Secret holds its data), label or managed field.
func TestIdentityOnly(t *testing.T) {
	g := NewWithT(t)
	in := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u", ResourceVersion: "7",
		Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"c2VjcmV0"}}`},
		Labels:        map[string]string{"a": "b"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	in.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Secret"})
	out, err := identityOnly(in)
	g.Expect(err).NotTo(HaveOccurred())
	want := &metav1.PartialObjectMetadata{TypeMeta: in.TypeMeta, ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s", UID: "u", ResourceVersion: "7"}}
	g.Expect(out).To(Equal(want))
}
