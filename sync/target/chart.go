package target

import (
	"bytes"
	"context"
	"fmt"
	"sort"

	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
)

// Keys of a chart's credentials Secret beyond those of a Git source.
const (
	// SecretDockerConfigJSON is the key of a kubernetes.io/dockerconfigjson Secret.
	SecretDockerConfigJSON = ".dockerconfigjson"
)

// Chart is the SyncTarget's spec.chart, with the credentials of its secretRef (username
// and password, bearerToken, .dockerconfigjson, ca.crt) and the trusted keys of
// verify.secretRef (every value, concatenated) — both Secrets of the SyncTarget's own
// namespace. A SyncTarget without spec.chart is an error matching
// sources.ErrInvalidSource.
func (in Inputs) Chart(ctx context.Context) (charts.Source, error) {
	c := in.Target.Spec.Chart
	if c == nil {
		return charts.Source{}, fmt.Errorf("%w: the SyncTarget %s has no spec.chart", sources.ErrInvalidSource, in.Key())
	}
	src := charts.Source{Repository: c.Repository, Name: c.Name, Version: c.Version, Digest: c.Digest}
	if c.SecretRef != nil {
		creds, err := in.chartCredentials(ctx, c.SecretRef.Name)
		if err != nil {
			return src, err
		}
		src.Credentials = creds
	}
	if c.Verify != nil {
		keyring, err := in.chartKeyring(ctx, c.Verify.SecretRef.Name)
		if err != nil {
			return src, err
		}
		src.Keyring = keyring
	}
	return src, nil
}

// chartCredentials reads the credentials Secret of a chart.
func (in Inputs) chartCredentials(ctx context.Context, name string) (charts.Credentials, error) {
	data, err := in.secret(ctx, "chart credentials", name)
	if err != nil {
		return charts.Credentials{}, err
	}
	cr := charts.Credentials{
		Username:         string(data[sources.SecretUsername]),
		Password:         string(data[sources.SecretPassword]),
		BearerToken:      string(data[sources.SecretBearerToken]),
		DockerConfigJSON: bytes.Clone(data[SecretDockerConfigJSON]),
		CA:               bytes.Clone(data[sources.SecretCACert]),
	}
	where := fmt.Sprintf("chart credentials secret %s/%s", in.Target.Namespace, name)
	switch {
	case cr.BearerToken != "" && (cr.Username != "" || cr.Password != ""):
		return cr, fmt.Errorf("%w: %s: %s and %s/%s exclude each other", sources.ErrInvalidSource, where,
			sources.SecretBearerToken, sources.SecretUsername, sources.SecretPassword)
	case cr.Password != "" && cr.Username == "":
		return cr, fmt.Errorf("%w: %s: %s without %s", sources.ErrInvalidSource, where, sources.SecretPassword, sources.SecretUsername)
	}
	return cr, nil
}

// chartKeyring reads the trusted keys Secret of a chart: every value, in key order,
// concatenated. The keys are checked as those of a Git source are, so that a bad Secret
// says which value is wrong.
func (in Inputs) chartKeyring(ctx context.Context, name string) ([]byte, error) {
	data, err := in.secret(ctx, "trusted keys", name)
	if err != nil {
		return nil, err
	}
	if _, err := sources.TrustedKeysFromSecret(data); err != nil {
		return nil, fmt.Errorf("trusted keys secret %s/%s: %w", in.Target.Namespace, name, err)
	}
	names := make([]string, 0, len(data))
	for k := range data {
		names = append(names, k)
	}
	sort.Strings(names)
	var ring []byte
	for _, k := range names {
		ring = append(ring, data[k]...)
		ring = append(ring, '\n')
	}
	return ring, nil
}
