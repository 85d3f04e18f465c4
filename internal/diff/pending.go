package diff

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// RenderOptionsFor returns the RenderOptions of st's objects, rendered from root.
func RenderOptionsFor(st *convergev1.SyncTarget, root, path string) RenderOptions {
	return RenderOptions{Root: root, Path: path, TargetNamespace: st.Spec.TargetNamespace,
		OwnerName: st.Name, OwnerNamespace: st.Namespace}
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
	objects, err := Render(ctx, c.RESTMapper(), RenderOptionsFor(st, co.Dir, st.Spec.Path))
	if err != nil {
		return nil, co.Revision, err
	}
	res, err := Compute(ctx, c, objects, OptionsFor(st))
	return res, co.Revision, err
}
