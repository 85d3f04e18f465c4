package sync

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// GitFetcher is the Fetcher of the daemon: it resolves refs with an ls-remote and keeps
// checkouts in a shared cache. Credentials come from a Secret in the SyncTarget's own
// namespace, never another.
type GitFetcher struct {
	// Reader reads the credentials Secrets.
	Reader client.Reader
	Cache  *sources.Cache
}

// Source builds the sources.Source of a SyncTarget, with its credentials.
func (f *GitFetcher) Source(ctx context.Context, st *convergev1.SyncTarget) (sources.Source, error) {
	src := sources.Source{URL: st.Spec.Source.URL, Ref: sources.Ref(st.Spec.Source.Ref)}
	if ref := st.Spec.Source.SecretRef; ref != nil {
		secret := &corev1.Secret{}
		if err := f.Reader.Get(ctx, client.ObjectKey{Namespace: st.Namespace, Name: ref.Name}, secret); err != nil {
			return src, fmt.Errorf("reading the source credentials secret %s/%s: %w", st.Namespace, ref.Name, err)
		}
		auth, err := sources.AuthFromSecret(secret.Data, src.URL)
		if err != nil {
			return src, fmt.Errorf("source credentials secret %s/%s: %w", st.Namespace, ref.Name, err)
		}
		src.Auth = auth
	}
	return src, nil
}

// Resolve implements Fetcher.
func (f *GitFetcher) Resolve(ctx context.Context, st *convergev1.SyncTarget) (string, error) {
	src, err := f.Source(ctx, st)
	if err != nil {
		return "", err
	}
	rev, err := sources.Resolve(ctx, src)
	if err != nil {
		return "", err
	}
	return rev.String(), nil
}

// Checkout implements Fetcher: a cached tree costs nothing, a missing one is fetched by SHA.
func (f *GitFetcher) Checkout(ctx context.Context, st *convergev1.SyncTarget, revision string) (string, error) {
	rev, err := sources.ParseRevision(revision)
	if err != nil {
		return "", err
	}
	src, err := f.Source(ctx, st)
	if err != nil {
		return "", err
	}
	return f.Cache.Checkout(ctx, src, rev)
}
