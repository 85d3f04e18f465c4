package diff

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	synccluster "github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
	"github.com/converge-gitops/converge/sync/target"
)

// RenderOptionsFor returns the RenderOptions of st's objects, rendered from root, without
// the keys and variables its spec names (see TargetRenderOptions).
func RenderOptionsFor(st *convergev1.SyncTarget, root, path string) RenderOptions {
	return RenderOptions{Root: root, Path: path, TargetNamespace: st.Spec.TargetNamespace,
		OwnerName: st.Name, OwnerNamespace: st.Namespace}
}

// TargetRenderOptions returns the RenderOptions of st's objects rendered from root, with
// the SOPS keys of its spec.decryption and the variables of its spec.postBuild read with c —
// the caller's own credentials, as the source's are — so that they render as the daemon
// renders them. A chart's lookups read on, the cluster st deploys to, with the caller's
// rights (see also UseCapabilities).
func TargetRenderOptions(ctx context.Context, c client.Reader, on synccluster.Cluster, st *convergev1.SyncTarget, root, path string) (RenderOptions, error) {
	ro, _, err := targetRenderOptions(ctx, c, on, st, root, path)
	return ro, err
}

// targetRenderOptions is TargetRenderOptions, with the variables read: their Sensitive
// values are what a caller showing rendered objects redacts.
func targetRenderOptions(ctx context.Context, c client.Reader, on synccluster.Cluster, st *convergev1.SyncTarget, root, path string) (RenderOptions, postbuild.Variables, error) {
	in := target.For(st, c, nil)
	vars, err := in.Variables(ctx, c)
	if err != nil {
		return RenderOptionsFor(st, root, path), vars, err
	}
	ro, err := in.RenderOptions(ctx, root, vars)
	ro.Path = path
	if err != nil || ro.Helm == nil {
		return ro, vars, err
	}
	there, err := on.Client("")
	if err != nil {
		return ro, vars, err
	}
	ro.Helm.Lookup = target.Lookup(there)
	return ro, vars, nil
}

// UseCapabilities makes a chart that ro renders see the capabilities of on, the cluster
// it deploys to, as the daemon renders it: discovered there when ro's Root and Path hold
// a chart. A cluster given no client config to discover them with leaves those helm
// template assumes.
func UseCapabilities(ro *RenderOptions, on synccluster.Cluster) error {
	if ro.Helm == nil || !render.IsChart(ro.Root, ro.Path) {
		return nil
	}
	caps, err := on.Capabilities()
	switch {
	case errors.Is(err, synccluster.ErrNoConfig):
		return nil
	case err != nil:
		return err
	}
	ro.Helm.KubeVersion, ro.Helm.APIVersions, ro.Helm.FromCluster = caps.KubeVersion, caps.APIVersions, true
	return nil
}

// Pending is what syncing st at revision would do to the cluster, as `converge diff
// --target NAME --revision REVISION` shows it: its source fetched with c (the caller's
// credentials), rendered, and compared with Compute. cfg is c's config (nil: the
// cluster's capabilities are not discovered). An empty revision is the ref st follows. It
// returns the revision fetched.
func Pending(ctx context.Context, c client.Client, cfg *rest.Config, st *convergev1.SyncTarget, revision string) (*Result, string, error) {
	co, err := Fetch(ctx, c, st, revision)
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = co.Close() }()
	// A SyncTarget of a remote cluster is compared with that cluster, and its chart's
	// lookups read there (never one at a loopback address: the web UI may run beside the
	// daemon).
	on, release, err := synccluster.ForCaller(ctx, c, cfg, st, false)
	if err != nil {
		return nil, co.Revision, err
	}
	defer release()
	there, err := on.Client("")
	if err != nil {
		return nil, co.Revision, err
	}
	ro, err := TargetRenderOptions(ctx, c, on, st, co.Dir, st.Spec.Path)
	if err == nil {
		err = UseCapabilities(&ro, on)
	}
	if err != nil {
		return nil, co.Revision, err
	}
	objects, err := Render(ctx, there.RESTMapper(), ro)
	if err != nil {
		return nil, co.Revision, err
	}
	res, err := Compute(ctx, there, objects, OptionsFor(st))
	return res, co.Revision, err
}

// Revisions is what changes between two revisions of st's source, as `converge diff
// --target NAME --from FROM --revision TO` and the web UI's history compare show it: each
// fetched with c (the caller's credentials), rendered as the daemon renders it (its
// variables read with c, a chart's lookups and capabilities from the cluster it deploys
// to), and compared with Between — no apply, no live state. Secret values are masked and
// every value the renders read from a Secret or a SOPS file is redacted. An empty to is
// the ref st follows. It returns the two revisions fetched.
func Revisions(ctx context.Context, c client.Client, cfg *rest.Config, st *convergev1.SyncTarget, from, to string) (*Result, [2]string, error) {
	var revs [2]string
	on, release, err := synccluster.ForCaller(ctx, c, cfg, st, false)
	if err != nil {
		return nil, revs, err
	}
	defer release()
	there, err := on.Client("")
	if err != nil {
		return nil, revs, err
	}
	var sides [2][]*unstructured.Unstructured
	var sensitive []string
	for i, rev := range []string{from, to} {
		objs, more, fetched, err := renderAt(ctx, c, on, there.RESTMapper(), st, rev)
		revs[i], sensitive = fetched, append(sensitive, more...)
		if err != nil {
			return nil, revs, apply.RedactValues(err, sensitive)
		}
		sides[i] = objs
	}
	res, err := Between(sides[0], sides[1])
	if err != nil {
		return nil, revs, err
	}
	Redact(res, sensitive)
	return res, revs, nil
}

// renderAt fetches st's source at revision and renders it as the daemon would, keeping
// the values not to be shown; it returns the objects, those values and the revision
// fetched.
func renderAt(ctx context.Context, c client.Client, on synccluster.Cluster, mapper meta.RESTMapper, st *convergev1.SyncTarget,
	revision string) ([]*unstructured.Unstructured, []string, string, error) {
	res, sensitive, fetched, err := renderResultAt(ctx, c, on, mapper, st, revision, false)
	if err != nil {
		return nil, sensitive, fetched, err
	}
	return res.Objects, sensitive, fetched, nil
}

// renderResultAt is renderAt's render, its whole result; showValues asks a chart's
// render for its values as shown (render.HelmOptions.ShowValues).
func renderResultAt(ctx context.Context, c client.Client, on synccluster.Cluster, mapper meta.RESTMapper, st *convergev1.SyncTarget,
	revision string, showValues bool) (*render.Result, []string, string, error) {
	co, err := Fetch(ctx, c, st, revision)
	if err != nil {
		return nil, nil, "", err
	}
	defer func() { _ = co.Close() }()
	ro, vars, err := targetRenderOptions(ctx, c, on, st, co.Dir, st.Spec.Path)
	if err == nil {
		err = UseCapabilities(&ro, on)
	}
	if err != nil {
		return nil, vars.Sensitive, co.Revision, err
	}
	ro.KeepSensitive = true
	if ro.Helm != nil {
		ro.Helm.ShowValues = showValues
	}
	res, err := RenderResult(ctx, mapper, ro)
	if err != nil {
		return nil, vars.Sensitive, co.Revision, fmt.Errorf("rendering %s: %w", co.Revision, err)
	}
	return res, append(vars.Sensitive, res.Sensitive...), co.Revision, nil
}
