package fleet

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/diff"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
	"github.com/converge-gitops/converge/sync/target"
)

const (
	// diffTimeout bounds the fetches and renders of one preview's diff.
	diffTimeout = 2 * time.Minute
	// diffsAtOnce is how many previews' diffs are computed at once, all sets together.
	diffsAtOnce = 2
	// diffsKept caps the diffs kept in memory; beyond it, all are dropped and computed
	// again when asked.
	diffsKept = 512
	// maxDiffBytes caps the object diffs one comment shows (GitHub takes 65 536
	// characters a comment, and a comment may hold several previews).
	maxDiffBytes = 24 << 10
)

// diffKey is what a diff is of: a set's preview, rendered at head against base.
type diffKey struct {
	set          client.ObjectKey
	target       string
	head, base   string
	templateHash string
}

// diffOutcome is a computed diff in Markdown, or why there is none.
type diffOutcome struct {
	markdown string
	err      string
}

// previewDiffs computes the diffs the comments of pullRequests generators with
// diffAgainst carry, one at a time per preview and diffsAtOnce in all, off the set's
// worker: a comment says "computing" until its diff is done, and the set is woken then.
type previewDiffs struct {
	// compute computes one diff (previewDiff, or a test's).
	compute func(ctx context.Context, st *convergev1.SyncTarget, head, base string) (string, error)
	// wake reconciles a set again.
	wake func(set client.ObjectKey)

	mu      sync.Mutex
	done    map[diffKey]diffOutcome
	running map[diffKey]bool
	slots   chan struct{}
}

// get returns the diff of key, computing it in the background when it is not known yet
// (ok false until it is).
func (d *previewDiffs) get(key diffKey, st *convergev1.SyncTarget) (diffOutcome, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if out, ok := d.done[key]; ok {
		return out, true
	}
	if d.running[key] {
		return diffOutcome{}, false
	}
	if d.running == nil {
		d.running, d.slots = map[diffKey]bool{}, make(chan struct{}, diffsAtOnce)
	}
	d.running[key] = true
	st = st.DeepCopy()
	go func() {
		d.slots <- struct{}{}
		ctx, cancel := context.WithTimeout(context.Background(), diffTimeout)
		md, err := d.compute(ctx, st, key.head, key.base)
		cancel()
		<-d.slots
		out := diffOutcome{markdown: md}
		if err != nil {
			out.err = err.Error()
		}
		d.mu.Lock()
		delete(d.running, key)
		if len(d.done) >= diffsKept || d.done == nil {
			d.done = map[diffKey]diffOutcome{}
		}
		d.done[key] = out
		d.mu.Unlock()
		if d.wake != nil {
			d.wake(key.set)
		}
	}()
	return diffOutcome{}, false
}

// forget drops the diffs of a set.
func (d *previewDiffs) forget(set client.ObjectKey) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for k := range d.done {
		if k.set == set {
			delete(d.done, k)
		}
	}
}

// diffRenderer fetches and renders a preview's source at a revision as the daemon
// renders it, behind the render boundary.
type diffRenderer struct {
	// reader reads the source's credentials and decryption keys, as the daemon does.
	reader client.Reader
	// mapper tells the scope of custom kinds.
	mapper meta.RESTMapper
	// as reads the preview's variables and values as its service account.
	as func(ns, name string) (client.Client, error)
	// pool renders in worker processes; nil, internal/diff's own pool.
	pool *render.Pool
}

// previewDiff is the Markdown diff of the preview st rendered at head against the same
// rendering at base, Secret values masked and every value read from a Secret or a SOPS
// file redacted.
func (dr diffRenderer) previewDiff(ctx context.Context, st *convergev1.SyncTarget, head, base string) (string, error) {
	if st.IsChart() {
		return "", fmt.Errorf("the preview deploys a chart of a chart repository, not the pull request's tree")
	}
	vars, err := dr.variables(ctx, st)
	if err != nil {
		return "", err
	}
	sensitive := vars.Sensitive
	sides := make([][]*unstructured.Unstructured, 2)
	for i, rev := range []string{base, head} {
		objs, more, err := dr.renderAt(ctx, st, rev, vars)
		if err != nil {
			return "", apply.RedactValues(err, sensitive)
		}
		sides[i], sensitive = objs, append(sensitive, more...)
	}
	res, err := diff.Between(sides[0], sides[1])
	if err != nil {
		return "", err
	}
	diff.Redact(res, sensitive)
	diff.Trim(res, maxDiffBytes)
	var b strings.Builder
	title := fmt.Sprintf("Diff of `%s` against `%s`", shortHead(head), sources.ShortRevision(base))
	if err := diff.WriteMarkdown(&b, res, title); err != nil {
		return "", err
	}
	return b.String(), nil
}

// variables reads the preview's spec.postBuild variables and spec.helm values as its
// service account, as the daemon does when it deploys it.
func (dr diffRenderer) variables(ctx context.Context, st *convergev1.SyncTarget) (postbuild.Variables, error) {
	if st.Spec.PostBuild == nil && (st.Spec.Helm == nil || len(st.Spec.Helm.ValuesFrom) == 0) {
		return postbuild.Variables{}, nil
	}
	c, err := dr.as(st.Namespace, st.Spec.ServiceAccountName)
	if err != nil {
		return postbuild.Variables{}, err
	}
	return postbuild.Read(ctx, c, st)
}

// renderAt fetches st's source at revision and renders it; it returns the objects and
// the values the render read that must not be shown.
func (dr diffRenderer) renderAt(ctx context.Context, st *convergev1.SyncTarget, revision string, vars postbuild.Variables) ([]*unstructured.Unstructured, []string, error) {
	co, err := diff.Fetch(ctx, dr.reader, st, revision)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = co.Close() }()
	opts, err := target.For(st, dr.reader, dr.mapper).RenderOptions(ctx, co.Dir, vars)
	if err != nil {
		return nil, nil, err
	}
	opts.KeepSensitive = true
	var res *render.Result
	if dr.pool != nil {
		res, err = dr.pool.Render(ctx, st.Namespace, opts)
	} else {
		res, err = diff.RenderResult(ctx, dr.mapper, opts)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("rendering %s: %w", sources.ShortRevision(co.Revision), err)
	}
	return res.Objects, res.Sensitive, nil
}

// previewDiffSection is the part of a pull request's comment that shows its preview's
// diff against the SyncTarget diffAgainst names: computed, being computed, or why not.
func (r *Reconciler) previewDiffSection(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator,
	pr convergev1.PullRequestState, t *Target) string {
	if g.DiffAgainst == "" || r.diffs == nil || t.Live == nil {
		return ""
	}
	base := &convergev1.SyncTarget{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: set.Namespace, Name: g.DiffAgainst}, base); err != nil {
		return fmt.Sprintf("\n_No diff: cannot read the SyncTarget `%s` of the base branch._\n", g.DiffAgainst)
	}
	if base.Status.LastAppliedRevision == "" {
		return fmt.Sprintf("\n_No diff: `%s` has applied nothing yet._\n", g.DiffAgainst)
	}
	key := diffKey{set: set, target: t.Name, head: pr.HeadSHA, base: base.Status.LastAppliedRevision,
		templateHash: t.Hash}
	out, ok := r.diffs.get(key, t.Live)
	switch {
	case !ok:
		return fmt.Sprintf("\n_Computing the diff against `%s`…_\n", g.DiffAgainst)
	case out.err != "":
		ctrl.LoggerFrom(ctx).Info("a preview's diff failed", "set", set.String(), "syncTarget", t.Name, "error", out.err)
		return fmt.Sprintf("\n_No diff against `%s`: %s._\n", g.DiffAgainst, commentText(out.err))
	}
	return "\n" + out.markdown
}
