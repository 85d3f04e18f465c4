package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/crdkinds"
	"github.com/converge-gitops/converge/sync/apply"
)

// objectPolicy is what the SyncTarget sets for its objects beyond their annotations, as
// apply policies: a chart's CRDs are created only under the Create CRD policy, and kept
// on prune unless spec.helm.pruneCRDs (deleting a CRD deletes every object of its kind).
// Objects of plain YAML and kustomizations have none.
func (ru *run) objectPolicy(chart bool) apply.PolicyFunc {
	if !chart {
		return nil
	}
	createOnly := ru.st.CRDPolicy() == convergev1.CRDsCreate
	keep := ru.st.Spec.Helm == nil || !ru.st.Spec.Helm.PruneCRDs
	return func(o *unstructured.Unstructured) apply.ObjectPolicy {
		if !crdkinds.Is(o) {
			return apply.ObjectPolicy{}
		}
		return apply.ObjectPolicy{IfNotPresent: createOnly, KeepOnPrune: keep}
	}
}

// createOnlyStep leaves out of the revision's set the objects the SyncTarget's policy
// creates only and that exist already (see apply.PolicyFunc.CreateOnly). One the
// SyncTarget created stays in its inventory: it is still its own, and must not look stale
// to a prune (spec.helm.pruneCRDs would delete a CRD, and every object of its kind, at
// the next revision). One that someone else installed is never the SyncTarget's.
func (ru *run) createOnlyStep(ctx context.Context, ds *deploying) *failure {
	d := ds.d
	set, kept, err := ru.objectPolicy(d.chart).CreateOnly(ctx, ds.c, ru.key, d.objects)
	if err != nil {
		return fail(phaseApply, err)
	}
	d.objects, d.inventory = set, apply.NewInventory(append(append([]*unstructured.Unstructured(nil), set...), kept...))
	return nil
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
