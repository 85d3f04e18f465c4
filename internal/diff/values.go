package diff

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	synccluster "github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/render"
)

// ChartValues are the values st's chart renders with at revision, as the web UI shows
// them: its source fetched and its variables and valuesFrom read with c (the caller's
// credentials), rendered as the daemon renders it. What a Secret gave is masked, and
// every value read from a Secret or a SOPS file is redacted (render.ChartValues). An
// empty revision is the ref st follows. It returns the revision fetched; a SyncTarget
// whose revision is no chart is an error.
func ChartValues(ctx context.Context, c client.Client, cfg *rest.Config, st *convergev1.SyncTarget, revision string) (*render.ChartValues, string, error) {
	on, release, err := synccluster.ForCaller(ctx, c, cfg, st, false)
	if err != nil {
		return nil, "", err
	}
	defer release()
	there, err := on.Client("")
	if err != nil {
		return nil, "", err
	}
	res, sensitive, fetched, err := renderResultAt(ctx, c, on, there.RESTMapper(), st, revision, true)
	if err != nil {
		return nil, fetched, apply.RedactValues(err, sensitive)
	}
	if res.Values == nil {
		return nil, fetched, fmt.Errorf("%s renders no Helm chart at %s", st.Name, fetched)
	}
	v := *res.Values
	v.Supplied, v.Computed = apply.RedactString(v.Supplied, sensitive), apply.RedactString(v.Computed, sensitive)
	return &v, fetched, nil
}
