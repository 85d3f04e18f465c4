package target

import (
	"context"
	"fmt"
	"sort"

	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
)

// Artifact is the SyncTarget's spec.oci as a charts.Source of kind artifact, with the
// credentials of its secretRef (username and password, bearerToken, .dockerconfigjson,
// ca.crt) and the cosign public keys of verify.secretRef (every value, in key order) —
// both Secrets of the SyncTarget's own namespace. A SyncTarget without spec.oci is an
// error matching sources.ErrInvalidSource.
func (in Inputs) Artifact(ctx context.Context) (charts.Source, error) {
	o := in.Target.Spec.OCI
	if o == nil {
		return charts.Source{}, fmt.Errorf("%w: the SyncTarget %s has no spec.oci", sources.ErrInvalidSource, in.Key())
	}
	src := charts.Source{Kind: charts.KindArtifact, Repository: o.URL, Tag: o.Ref.Tag, Version: o.Ref.SemVer,
		Digest: o.Ref.Digest, LayerMediaType: o.LayerMediaType}
	if o.SecretRef != nil {
		creds, err := in.chartCredentials(ctx, o.SecretRef.Name)
		if err != nil {
			return src, err
		}
		src.Credentials = creds
	}
	if o.Verify != nil {
		data, err := in.secret(ctx, "cosign public keys", o.Verify.SecretRef.Name)
		if err != nil {
			return src, err
		}
		names := make([]string, 0, len(data))
		for k := range data {
			names = append(names, k)
		}
		sort.Strings(names)
		keys := []byte{}
		for _, k := range names {
			keys = append(keys, data[k]...)
			keys = append(keys, '\n')
		}
		src.CosignKeys = keys
	}
	return src, nil
}
