package reconciler

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/render"
	"github.com/converge-gitops/converge/sync/target"
)

// KustomizeRenderer is the Renderer of the daemon: kustomize or plain manifests, read in
// place from the shared checkout, confined to it.
type KustomizeRenderer struct {
	// Mapper tells the scope of custom kinds already installed; nil takes them as namespaced.
	Mapper meta.RESTMapper
	// Timeout bounds one render (render.DefaultTimeout when zero); a render that runs
	// out of time fails with render.ErrRenderTimeout ("render exceeded 2m0s").
	Timeout time.Duration
	// Secrets reads a SyncTarget's decryption Secret, one by one by name (the manager's
	// API reader: Secrets are never listed or cached). Nil, a SyncTarget with
	// spec.decryption fails to render.
	Secrets client.Reader
}

// Render implements Renderer.
func (k KustomizeRenderer) Render(ctx context.Context, st *convergev1.SyncTarget, root string, sub *render.Substitution) ([]*unstructured.Unstructured, error) {
	opts, err := target.For(st, k.Secrets, k.Mapper).RenderOptions(ctx, root, sub)
	if err != nil {
		return nil, err
	}
	opts.Timeout = k.Timeout
	res, err := render.Render(ctx, opts)
	if err != nil {
		return nil, err
	}
	return res.Objects, nil
}
