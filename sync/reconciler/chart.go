package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/crdkinds"
	"github.com/converge-gitops/converge/sync/apply"
)

// createOnlyCRDs is a chart's step under the Create CRD policy: it leaves out of the
// revision's objects the CRDs that exist already, which are never changed. One the
// SyncTarget created (it carries its owner labels) stays in its inventory: it is still the
// chart's, and must not look stale to a prune (spec.helm.pruneCRDs would delete it, and
// every object of its kind, at the next revision). One that someone else installed is
// never the SyncTarget's.
func (ru *run) createOnlyCRDs(ctx context.Context, ds *deploying) *failure {
	d := ds.d
	out := d.objects[:0:0]
	var kept []*unstructured.Unstructured
	for _, o := range d.objects {
		if crdkinds.Is(o) {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(o.GroupVersionKind())
			err := ds.c.Get(ctx, client.ObjectKeyFromObject(o), live)
			if err == nil {
				if apply.Owns(ru.key, live) {
					kept = append(kept, o)
				}
				continue
			}
			if !apierrors.IsNotFound(err) {
				return fail(phaseApply, err)
			}
		}
		out = append(out, o)
	}
	d.objects, d.inventory = out, apply.NewInventory(append(append([]*unstructured.Unstructured(nil), out...), kept...))
	return nil
}

// keepCRDs leaves the CRDs out of what a chart's prune deletes (a chart's step unless
// spec.helm.pruneCRDs): deleting a CRD deletes every object of its kind.
func keepCRDs(stale []convergev1.InventoryEntry) []convergev1.InventoryEntry {
	out := stale[:0:0]
	for _, e := range stale {
		if o, err := apply.EntryObject(e); err == nil && crdkinds.Is(o) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// removeReleaseSecrets deletes, when spec.helm.removeReleaseSecrets asks, the Secrets in
// which Helm kept the release converge took over (type helm.sh/release.v1, labelled
// owner=helm and name=<release>), in the release's namespace: converge keeps the history.
func (ru *run) removeReleaseSecrets(ctx context.Context, c client.Client) error {
	h := ru.st.Spec.Helm
	if h == nil || !h.RemoveReleaseSecrets {
		return nil
	}
	ns := ru.st.Spec.TargetNamespace
	if ns == "" {
		ns = ru.st.Namespace
	}
	list := &corev1.SecretList{}
	if err := c.List(ctx, list, client.InNamespace(ns),
		client.MatchingLabels{"owner": "helm", "name": ru.st.ReleaseName()}); err != nil {
		return fmt.Errorf("listing the Secrets of Helm release %s/%s: %w", ns, ru.st.ReleaseName(), err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if s.Type != helmReleaseSecretType {
			continue
		}
		if err := c.Delete(ctx, s); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the Helm release Secret %s/%s: %w", ns, s.Name, err)
		}
	}
	return nil
}

// helmReleaseSecretType is the type of the Secrets Helm keeps a release in.
const helmReleaseSecretType = "helm.sh/release.v1"
