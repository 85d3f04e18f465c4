package drift

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	metadatafake "k8s.io/client-go/metadata/fake"

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

// A SyncTarget deleted and created again under the same name starts without the drift its
// predecessor's objects showed.
func TestForgetDropsTheDriftOfADeletedSyncTarget(t *testing.T) {
	g := NewWithT(t)
	w := NewWatcher(t.Context(), nil, nil)
	owner := types.NamespacedName{Namespace: "team", Name: "app"}
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop",
			Labels: map[string]string{"converge.dev/name": "app", "converge.dev/namespace": "team"}}}
	w.flag(m, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	g.Expect(w.Pending(owner)).To(BeTrue())

	w.Forget(owner)
	g.Expect(w.Pending(owner)).To(BeFalse())
	g.Expect(w.Take(owner)).To(BeEmpty())

	var none *Watcher
	none.Forget(owner) // drift watch off: nothing to forget
}

// Invariant 4 of the soak (drift restored within its bound) across a failover: a daemon
// that starts learns of edits and deletions made while no daemon watched from what its
// watches list, not only of those it sees happen.
func TestDriftRestoredAfterARestartMissedIsWhatChangedWhileNoneWatched(t *testing.T) {
	g := NewWithT(t)
	before, after := metav1.NewTime(time.Now().Add(-time.Minute)), metav1.NewTime(time.Now())
	owned := map[string]string{"converge.dev/name": "app", "converge.dev/namespace": "team"}
	configMap := func(name string, labels map[string]string, fields ...metav1.ManagedFieldsEntry) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: labels, ManagedFields: fields}}
	}
	ours := metav1.ManagedFieldsEntry{Manager: apply.FieldManager, Operation: metav1.ManagedFieldsOperationApply, Time: &before,
		FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:value":{}}}`)}
	edit := metav1.ManagedFieldsEntry{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, Time: &after,
		FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:value":{}}}`)}
	status := metav1.ManagedFieldsEntry{Manager: "someone", Operation: metav1.ManagedFieldsOperationUpdate, Time: &after,
		Subresource: "status", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`)}

	scheme := metadatafake.NewTestScheme()
	g.Expect(metav1.AddMetaToScheme(scheme)).To(Succeed())
	client := metadatafake.NewSimpleMetadataClient(scheme,
		configMap("untouched", owned, ours, status),
		configMap("edited", owned, ours, edit),
		configMap("unlabelled", map[string]string{"team": "shop"}, ours, edit),
	)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	w := NewWatcher(t.Context(), client, mapper)

	inventory := func(names ...string) []*unstructured.Unstructured {
		var out []*unstructured.Unstructured
		for _, n := range names {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("ConfigMap")
			u.SetNamespace("shop")
			u.SetName(n)
			out = append(out, u)
		}
		return out
	}
	objects := inventory("untouched", "edited", "unlabelled", "deleted")
	g.Expect(w.Missed(t.Context(), objects)).To(BeEmpty(), "nothing is answered of a kind not watched")

	g.Expect(w.Watch(objects)).To(Succeed())
	g.Expect(w.Missed(t.Context(), objects)).To(Equal(map[string]bool{
		"shop_edited__ConfigMap":     true, // the newest write is another manager's
		"shop_unlabelled__ConfigMap": true, // its owner label was taken off
		"shop_deleted__ConfigMap":    true, // gone
	}))
	g.Expect(w.Pending(types.NamespacedName{Namespace: "team", Name: "app"})).To(BeFalse(),
		"what was listed is not an event: the reconciler asks")

	var none *Watcher
	g.Expect(none.Missed(t.Context(), objects)).To(BeNil())
}
