package sync

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
)

// checkOwnership refuses to take over objects another existing SyncTarget manages (see
// apply.CheckOwnership); whether a SyncTarget exists is asked of the cache.
func (r *Reconciler) checkOwnership(ctx context.Context, c client.Client, st *convergev1.SyncTarget,
	objects []*unstructured.Unstructured) (apply.Live, error) {
	return apply.CheckOwnership(ctx, c, client.ObjectKeyFromObject(st), r.syncTargetExists, objects)
}

// syncTargetExists reports whether the SyncTarget key exists.
func (r *Reconciler) syncTargetExists(ctx context.Context, key client.ObjectKey) (bool, error) {
	err := r.Get(ctx, key, &convergev1.SyncTarget{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
