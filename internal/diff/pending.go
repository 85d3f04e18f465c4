package diff

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
)

// RenderOptionsFor returns the RenderOptions of st's objects, rendered from root.
func RenderOptionsFor(st *convergev1.SyncTarget, root, path string) RenderOptions {
	return RenderOptions{Root: root, Path: path, TargetNamespace: st.Spec.TargetNamespace,
		OwnerName: st.Name, OwnerNamespace: st.Namespace}
}

// TargetRenderOptions returns the RenderOptions of st's objects rendered from root, with
// the SOPS keys of its spec.decryption and the variables of its spec.postBuild read with c —
// the caller's own credentials, as the source's are — so that they render as the daemon
// renders them.
func TargetRenderOptions(ctx context.Context, c client.Reader, st *convergev1.SyncTarget, root, path string) (RenderOptions, error) {
	ro := RenderOptionsFor(st, root, path)
	var err error
	if ro.Decryption, err = render.KeysFor(ctx, st, secretGetter(c)); err != nil {
		return ro, err
	}
	vars, err := postbuild.Read(ctx, c, st)
	if err != nil {
		return ro, err
	}
	ro.Substitute = vars.Substitution
	return ro, nil
}

// secretGetter reads a Secret's data with c, for render.KeysFor.
func secretGetter(c client.Reader) render.SecretGetter {
	return func(ctx context.Context, namespace, name string) (map[string][]byte, error) {
		secret := &corev1.Secret{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, secret); err != nil {
			return nil, err
		}
		return secret.Data, nil
	}
}

// Pending is what syncing st at revision would do to the cluster, as `converge diff
// --target NAME --revision REVISION` shows it: its source fetched with c (the caller's
// credentials), rendered, and compared with Compute. An empty revision is the ref st
// follows. It returns the revision fetched.
func Pending(ctx context.Context, c client.Client, st *convergev1.SyncTarget, revision string) (*Result, sources.Revision, error) {
	co, err := Fetch(ctx, c, st, revision)
	if err != nil {
		return nil, sources.Revision{}, err
	}
	defer func() { _ = co.Close() }()
	ro, err := TargetRenderOptions(ctx, c, st, co.Dir, st.Spec.Path)
	if err != nil {
		return nil, co.Revision, err
	}
	objects, err := Render(ctx, c.RESTMapper(), ro)
	if err != nil {
		return nil, co.Revision, err
	}
	res, err := Compute(ctx, c, objects, OptionsFor(st))
	return res, co.Revision, err
}
