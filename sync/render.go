package sync

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/render"
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
func (k KustomizeRenderer) Render(ctx context.Context, st *convergev1.SyncTarget, root string) ([]*unstructured.Unstructured, error) {
	return k.RenderSubstituted(ctx, st, root, nil)
}

// RenderSubstituted renders like Render, then substitutes the spec.postBuild variables
// sub (none when nil).
func (k KustomizeRenderer) RenderSubstituted(ctx context.Context, st *convergev1.SyncTarget, root string, sub *render.Substitution) ([]*unstructured.Unstructured, error) {
	opts := render.Options{
		Substitute:      sub,
		Root:            root,
		Path:            st.Spec.Path,
		TargetNamespace: st.Spec.TargetNamespace,
		OwnerName:       st.Name,
		OwnerNamespace:  st.Namespace,
		Timeout:         k.Timeout,
	}
	keys, err := render.KeysFor(ctx, st, k.getSecret)
	if err != nil {
		return nil, err
	}
	opts.Decryption = keys
	if k.Mapper != nil {
		opts.IsNamespaced = func(gvk schema.GroupVersionKind) (bool, error) {
			m, err := k.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				if meta.IsNoMatchError(err) {
					return true, nil
				}
				return false, err
			}
			return m.Scope.Name() == meta.RESTScopeNameNamespace, nil
		}
	}
	res, err := render.Render(ctx, opts)
	if err != nil {
		return nil, err
	}
	return res.Objects, nil
}

// getSecret reads the data of one Secret for render.KeysFor.
func (k KustomizeRenderer) getSecret(ctx context.Context, namespace, name string) (map[string][]byte, error) {
	if k.Secrets == nil {
		return nil, errors.New("no Secret reader configured")
	}
	secret := &corev1.Secret{}
	if err := k.Secrets.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
		return nil, err
	}
	return secret.Data, nil
}
