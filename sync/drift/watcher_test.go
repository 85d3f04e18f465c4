package drift

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/converge-gitops/converge/sync/apply"
)

// The drift informers keep slim copies; what drift detection decides from them is what it
// would decide from the objects as served.
func TestSlimForDriftKeepsWhatDriftDetectionReads(t *testing.T) {
	g := NewWithT(t)
	now := metav1.NewTime(time.Now())
	object := func(scaleFields string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{
			TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{
				Name: "web", Namespace: "shop", ResourceVersion: "7",
				Labels:      map[string]string{"converge.dev/name": "app", "converge.dev/namespace": "team"},
				Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"big":"blob"}`},
				ManagedFields: []metav1.ManagedFieldsEntry{
					{Manager: apply.FieldManager, Operation: metav1.ManagedFieldsOperationApply, Time: &now,
						FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:replicas":{}}}`)},
					// kubectl scale: written through the scale subresource, without a time.
					{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate,
						FieldsV1: metav1.NewFieldsV1(scaleFields)},
				},
			},
		}
	}
	slim := func(m *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
		out, err := slimForDrift(m)
		g.Expect(err).NotTo(HaveOccurred())
		return out.(*metav1.PartialObjectMetadata)
	}
	before, same, scaled := object(`{"f:spec":{"f:replicas":{}}}`), object(`{"f:spec":{"f:replicas":{}}}`), object(`{"f:spec":{"f:paused":{}}}`)

	s := slim(before)
	g.Expect(s.Annotations).To(BeEmpty())
	g.Expect([]string{s.Kind, s.Namespace, s.Name}).To(Equal([]string{"Deployment", "shop", "web"}))
	g.Expect(s.Labels).To(Equal(before.Labels))
	g.Expect(s.ManagedFields).To(HaveLen(2))
	g.Expect(len(s.ManagedFields[0].FieldsV1.GetRawBytes())).To(BeNumerically("<=", 32))

	g.Expect(untimedWriteByOthers(slim(before), slim(same))).To(Equal(untimedWriteByOthers(before, same)))
	g.Expect(untimedWriteByOthers(slim(before), slim(same))).To(BeFalse())
	g.Expect(untimedWriteByOthers(slim(before), slim(scaled))).To(Equal(untimedWriteByOthers(before, scaled)))
	g.Expect(untimedWriteByOthers(slim(before), slim(scaled))).To(BeTrue())
	g.Expect(changedByOthers(slim(before))).To(Equal(changedByOthers(before)))
}
