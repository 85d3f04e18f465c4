package diff

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
	"github.com/converge-gitops/converge/sync/target"
)

// Checkout is a SyncTarget's source fetched into a temporary directory.
type Checkout struct {
	// Dir holds the tree of Revision, read-only.
	Dir string
	// Revision is what was fetched, as the daemon writes it ("main@sha1:…", or
	// "<version>@sha256:…" for a chart of a chart repository).
	Revision string

	cache string
}

// Close removes the checkout.
func (c *Checkout) Close() error {
	if c == nil || c.cache == "" {
		return nil
	}
	// The checkout is read-only: make its directories writable to remove them.
	_ = filepath.WalkDir(c.cache, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(c.cache)
}

// Fetch fetches the source of st as the daemon does — with the credentials of its
// spec.source.secretRef, read by r (the user's own client), and when it has
// spec.source.verify only after the revision's signatures verified — at revision, or at its
// spec.source.ref when revision is empty. A revision is a full commit SHA, a revision as
// converge records it ("main@sha1:…"), a fully qualified ref ("refs/pull/7/head"), or a
// branch or tag name (branch first).
func Fetch(ctx context.Context, r client.Reader, st *convergev1.SyncTarget, revision string) (*Checkout, error) {
	if st.IsChart() || st.IsOCI() {
		return fetchChart(ctx, r, st, revision)
	}
	in := target.For(st, r, nil)
	src, err := in.Source(ctx)
	if err != nil {
		return nil, err
	}
	rev, err := resolve(ctx, src, revision)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "converge-diff-")
	if err != nil {
		return nil, err
	}
	co := &Checkout{Revision: rev.String(), cache: dir}
	cache, err := sources.NewCache(sources.CacheOptions{Dir: dir})
	if err != nil {
		_ = co.Close()
		return nil, err
	}
	if err := verify(ctx, in, cache, src, rev); err != nil {
		_ = co.Close()
		return nil, err
	}
	if co.Dir, err = cache.Checkout(ctx, src, rev); err != nil {
		_ = co.Close()
		return nil, err
	}
	return co, nil
}

// verify checks the signatures of rev as the daemon does when the SyncTarget of in has
// spec.source.verify, and fails with the daemon's message when they do not verify.
func verify(ctx context.Context, in target.Inputs, cache *sources.Cache, src sources.Source, rev sources.Revision) error {
	keys, err := in.TrustedKeys(ctx)
	if err != nil || keys == nil {
		return err
	}
	verifier := &sources.Verifier{Cache: cache}
	if _, err := verifier.Verify(ctx, src, rev, sources.VerifyMode(in.Target.VerifyMode()), keys); err != nil {
		return fmt.Errorf("revision %s: %w", rev, err)
	}
	return nil
}

// resolve finds the commit of revision (or of src.Ref when it is empty) on the remote.
func resolve(ctx context.Context, src sources.Source, revision string) (sources.Revision, error) {
	if revision == "" {
		return sources.Resolve(ctx, src)
	}
	var candidates []sources.Ref
	switch {
	case isFullSHA(revision):
		candidates = []sources.Ref{{Commit: revision}}
	case strings.Contains(revision, "@sha"):
		rev, err := sources.ParseRevision(revision)
		if err != nil {
			return sources.Revision{}, err
		}
		src.Ref = sources.Ref{Commit: rev.Commit}
		if _, err := sources.Resolve(ctx, src); err != nil {
			return sources.Revision{}, err
		}
		return rev, nil
	case strings.HasPrefix(revision, "refs/") || revision == "HEAD":
		candidates = []sources.Ref{{Name: revision}}
	default:
		candidates = []sources.Ref{{Branch: revision}, {Tag: revision}}
	}
	var rev sources.Revision
	var err error
	for _, ref := range candidates {
		src.Ref = ref
		if rev, err = sources.Resolve(ctx, src); !errors.Is(err, sources.ErrRefNotFound) {
			return rev, err
		}
	}
	return sources.Revision{}, fmt.Errorf("revision %q is no branch or tag of %s (a commit needs its full SHA)", revision, sources.RedactURL(src.URL))
}

func isFullSHA(s string) bool {
	if len(s) != 40 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// fetchChart fetches the chart of st's spec.chart, or the artifact of its spec.oci, as the
// daemon does — its credentials read by r, its provenance or cosign signatures verified
// when spec.chart.verify or spec.oci.verify asks — at revision ("<version>@sha256:…",
// whose digest must match; an artifact is fetched by that digest, wherever its tag moved
// since) or, when empty, at what its spec follows now.
func fetchChart(ctx context.Context, r client.Reader, st *convergev1.SyncTarget, revision string) (*Checkout, error) {
	in := target.For(st, r, nil)
	var src charts.Source
	var err error
	if st.IsOCI() {
		src, err = in.Artifact(ctx)
	} else {
		src, err = in.Chart(ctx)
	}
	if err != nil {
		return nil, err
	}
	var want charts.Resolved
	if revision != "" {
		if want, err = charts.ParseRevision(revision); err != nil {
			return nil, err
		}
		if src.IsArtifact() {
			src.Tag, src.Version, src.Digest = "", "", want.Digest
		} else {
			src.Version = want.Version
		}
	}
	dir, err := os.MkdirTemp("", "converge-diff-")
	if err != nil {
		return nil, err
	}
	co := &Checkout{cache: dir}
	// The CLI runs on its user's machine with the user's network: a chart repository on
	// loopback (a port-forward, a local registry) is theirs to reach.
	cl := &charts.Client{CacheDir: filepath.Join(dir, "charts"), AllowLoopback: true}
	res, err := cl.Resolve(ctx, src)
	if err == nil && revision != "" && res.Digest != want.Digest {
		err = fmt.Errorf("chart %s %s is %s now, not %s", src.Name, want.Version, res.Digest, want.Digest)
	}
	if err == nil && (src.Keyring != nil || src.CosignKeys != nil) {
		err = cl.Verify(ctx, src, res)
	}
	if err == nil {
		co.Revision = res.String()
		if src.IsArtifact() && revision != "" {
			co.Revision = revision // the tag it was recorded under
		}
		co.Dir, err = cl.Fetch(ctx, src, res)
	}
	if err != nil {
		_ = co.Close()
		return nil, err
	}
	return co, nil
}

// ChartVersions are the versions of st's spec.chart that its version range allows, newest
// first (at most 50), read from its repository with the credentials of its secretRef, read
// by r (the user's own client).
func ChartVersions(ctx context.Context, r client.Reader, st *convergev1.SyncTarget) ([]string, error) {
	src, err := target.For(st, r, nil).Chart(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "converge-versions-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	// As fetchChart: the user's network, so a repository on loopback is theirs to reach.
	cl := &charts.Client{CacheDir: filepath.Join(dir, "charts"), AllowLoopback: true}
	return cl.Versions(ctx, src)
}
