package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/forgetest"
	"github.com/converge-gitops/converge/internal/gittest"
)

// The objects of the previews workload in benchNamespace.
const (
	previewSet       = "previews"
	previewPlain     = "preview-plain"
	previewForge     = "bench-forge"     // the forge token Secret
	previewAccount   = "bench-previewer" // the service account previews run as
	previewForgeToke = "bench-forge-token"
)

// previewNamespace is the namespace of the preview of pull request i; 0 is the plain
// SyncTarget's.
func previewNamespace(i int) string { return fmt.Sprintf("bench-preview-%d", i) }

// previewRun is one repetition of previews.
type previewRun struct {
	// opened is one pull request's webhook → its preview Ready, plain a push webhook →
	// the plain SyncTarget Ready; all is N-1 more pull requests' webhook → all Ready, closed N
	// closed → every preview gone.
	opened, plain, all, closed time.Duration
	// idle and idleHand are the requests the daemon sent per minute and per target with
	// the N previews Ready, and with N hand-written SyncTargets of the same specs.
	idle, idleHand float64
}

// previewRepo is the repository of the previews workload: podinfo on main, and a commit
// of its own for each pull request, at refs/pull/i/head.
type previewRepo struct {
	url, forgeRepo, main string
	repo                 *gittest.Repo
	heads                []string // heads[i] is pull request i's
}

func (b *Bench) previewRepo(n int) (*previewRepo, error) {
	archive, err := packageChart(helmVersion1)
	if err != nil {
		return nil, err
	}
	manifest, err := helmManifest(archive, 0)
	if err != nil {
		return nil, err
	}
	repo := gittest.NewRepo(b.tb, b.gitRoot, fmt.Sprintf("bench/previews-%d", n))
	pr := &previewRepo{url: b.git.RepoURL(repo), forgeRepo: strings.TrimSuffix(repo.Name, ".git"), repo: repo,
		heads: make([]string, n+1)}
	pr.main = repo.Commit(b.tb, "main", map[string]string{"app/podinfo.yaml": manifest, "app/pr.yaml": configMapYAML("pr", "main")})
	for i := 1; i <= n; i++ {
		pr.heads[i] = repo.CommitOnto(b.tb, fmt.Sprintf("pr-%d", i), pr.main,
			gittest.Files(map[string]string{"app/pr.yaml": configMapYAML("pr", fmt.Sprint(i))})...)
		repo.SetRef(b.tb, fmt.Sprintf("refs/pull/%d/head", i), pr.heads[i])
	}
	return pr, nil
}

// runPreviews measures preview environments: a pull request opened → its preview Ready
// against a push → Ready of a plain SyncTarget, N opened at once → all Ready, the API cost
// of N previews at idle against N hand-written SyncTargets, and N closed → all gone.
func (b *Bench) runPreviews(ctx context.Context, n int) error {
	if n > 200 {
		return fmt.Errorf("previews N=%d: a pullRequests generator keeps 200 previews at most", n)
	}
	pr, err := b.previewRepo(n)
	if err != nil {
		return err
	}
	if err := b.previewAccess(ctx); err != nil {
		return err
	}
	var runs []previewRun
	for rep := range b.cfg.Reps {
		r, err := b.previewsOnce(ctx, rep, n, pr)
		if err != nil {
			return fmt.Errorf("previews N=%d rep %d: %w", n, rep+1, err)
		}
		b.logf("previews N=%d rep %d/%d: opened → Ready %s (plain push → Ready %s); %d more opened → all Ready %s; idle: %.1f requests/min per preview, %.1f per hand-written SyncTarget; closed → all gone %s",
			n, rep+1, b.cfg.Reps, r.opened.Round(time.Millisecond), r.plain.Round(time.Millisecond), n-1, r.all.Round(time.Millisecond),
			r.idle, r.idleHand, r.closed.Round(time.Millisecond))
		runs = append(runs, r)
	}
	w := fmt.Sprintf("previews N=%d", n)
	pick := func(f func(previewRun) float64) []float64 {
		out := make([]float64, len(runs))
		for i, r := range runs {
			out[i] = f(r)
		}
		return out
	}
	b.res.add(w, "pull request opened → preview Ready (webhook)", Seconds, pick(func(r previewRun) float64 { return r.opened.Seconds() }),
		"push → Ready of a plain SyncTarget (webhook)", pick(func(r previewRun) float64 { return r.plain.Seconds() }),
		&Target{Text: "≤ 3 s", Max: 3})
	if n > 1 {
		b.res.add(w, fmt.Sprintf("%d more pull requests opened → their previews Ready", n-1), Seconds,
			pick(func(r previewRun) float64 { return r.all.Seconds() }), "", nil, nil)
	}
	b.res.add(w, "API requests sent per minute per preview, idle", Requests, pick(func(r previewRun) float64 { return r.idle }),
		"per hand-written SyncTarget of the same spec", pick(func(r previewRun) float64 { return r.idleHand }), nil)
	b.res.add(w, fmt.Sprintf("%d pull requests closed → all previews gone", n), Seconds, pick(func(r previewRun) float64 { return r.closed.Seconds() }), "", nil, nil)
	return nil
}

// previewAccess creates the forge's token Secret and the service account previews run
// as, bound to cluster-admin (the benchmark's previews deploy into namespaces of their own).
func (b *Bench) previewAccess(ctx context.Context) error {
	objs := []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: previewForge, Namespace: benchNamespace},
			StringData: map[string]string{"token": previewForgeToke}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: previewAccount, Namespace: benchNamespace}},
		&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: previewAccount},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: previewAccount, Namespace: benchNamespace}}},
	}
	for _, o := range objs {
		if err := b.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// previewSpec is the spec of pull request ref's preview in namespace ns.
func previewSpec(url, ref, ns string) convergev1.SyncTargetSpec {
	return convergev1.SyncTargetSpec{
		Source: convergev1.GitSource{URL: url, Ref: convergev1.GitRef{Name: ref}, Interval: &metav1.Duration{Duration: time.Hour},
			WebhookSecretRef: &convergev1.LocalObjectReference{Name: webhookSecret}},
		Path: "app", TargetNamespace: ns, Prune: true, ServiceAccountName: previewAccount,
	}
}

func (b *Bench) previewsOnce(ctx context.Context, rep, n int, pr *previewRepo) (previewRun, error) {
	var r previewRun
	namespaces := make([]string, n+1)
	for i := range namespaces {
		namespaces[i] = previewNamespace(i)
	}
	if err := b.createNamespaces(ctx, namespaces...); err != nil {
		return r, err
	}
	d, err := b.startDaemon(ctx, fmt.Sprintf("previews-%d-%d", n, rep), "--allow-loopback-clusters")
	if err != nil {
		_ = b.deleteNamespaces(ctx, namespaces...)
		return r, err
	}
	defer func() {
		b.stopDaemon(d)
		set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: previewSet, Namespace: benchNamespace}}
		if err := client.IgnoreNotFound(b.c.Delete(ctx, set)); err != nil {
			b.logf("deleting the set of previews: %v", err)
		}
		if err := b.deleteTargets(ctx, workloadPreviews); err != nil {
			b.logf("deleting the previews' SyncTargets: %v", err)
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			b.logf("deleting the previews' namespaces: %v", err)
		}
	}()
	prof := b.startProfile(d, fmt.Sprintf("previews N=%d", n))
	gh := forgetest.NewGitHub(b.tb, pr.forgeRepo, previewForgeToke)
	gh.Writer("dev")
	timeout := 5*time.Minute + time.Duration(n)*2*time.Second

	if r.plain, err = b.plainPush(ctx, d, pr, rep, timeout); err != nil {
		return r, err
	}
	if err := b.createPreviewSet(ctx, pr, gh.URL, n); err != nil {
		return r, err
	}
	// opened times the webhook of pull requests from..to, opened first, to their
	// previews Ready at their heads.
	opened := func(from, to int) (time.Duration, error) {
		names, heads := []string{}, map[string]string{}
		for i := from; i <= to; i++ {
			name := fmt.Sprintf("preview-%d", i)
			names = append(names, name)
			heads[name] = fmt.Sprintf("refs/pull/%d/head@sha1:%s", i, pr.heads[i])
		}
		return b.timeTargets(ctx, d, names, timeout, func(st *convergev1.SyncTarget) bool { return readyAt(st, heads[st.Name]) },
			func() error {
				for i := from; i <= to; i++ {
					gh.Open(i, fmt.Sprintf("pr-%d", i), pr.heads[i], "dev", false)
				}
				return b.pullRequestWebhook(ctx, d, pr.url)
			})
	}
	if r.opened, err = opened(1, 1); err != nil {
		return r, fmt.Errorf("pull request 1 opened: %w", err)
	}
	if n > 1 {
		if r.all, err = opened(2, n); err != nil {
			return r, fmt.Errorf("%d pull requests opened: %w", n-1, err)
		}
	}
	if r.idle, err = b.idleRequests(ctx, d, n); err != nil {
		return r, err
	}
	started := time.Now()
	for i := 1; i <= n; i++ {
		gh.Close(i)
	}
	if err := b.pullRequestWebhook(ctx, d, pr.url); err != nil {
		return r, err
	}
	if err := b.waitPreviewsGone(ctx, timeout); err != nil {
		return r, err
	}
	r.closed = time.Since(started)
	if err := b.finishProfile(prof); err != nil {
		return r, err
	}
	if r.idleHand, err = b.handWrittenIdle(ctx, d, pr, n, timeout); err != nil {
		return r, err
	}
	return r, nil
}

// plainPush times a push to a plain SyncTarget of the same app, announced by a webhook, to
// Ready at the new commit: the baseline of a preview's webhook → Ready.
func (b *Bench) plainPush(ctx context.Context, d *daemon, pr *previewRepo, rep int, timeout time.Duration) (time.Duration, error) {
	first := pr.repo.CommitOnto(b.tb, "plain", pr.main, gittest.Files(map[string]string{"app/pr.yaml": configMapYAML("pr", fmt.Sprintf("plain-%d-a", rep))})...)
	spec := previewSpec(pr.url, "refs/heads/plain", previewNamespace(0))
	names := []string{previewPlain}
	if _, err := b.timeTargets(ctx, d, names, timeout, func(st *convergev1.SyncTarget) bool {
		return readyAt(st, "refs/heads/plain@sha1:"+first)
	}, func() error {
		return b.c.Create(ctx, &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: previewPlain, Namespace: benchNamespace,
			Labels: map[string]string{workloadLabel: workloadPreviews}}, Spec: spec})
	}); err != nil {
		return 0, fmt.Errorf("the plain SyncTarget: %w", err)
	}
	next := pr.repo.CommitOnto(b.tb, "plain", first, gittest.Files(map[string]string{"app/pr.yaml": configMapYAML("pr", fmt.Sprintf("plain-%d-b", rep))})...)
	return b.timeTargets(ctx, d, names, timeout, func(st *convergev1.SyncTarget) bool {
		return readyAt(st, "refs/heads/plain@sha1:"+next)
	}, func() error { return b.sendWebhook(ctx, d, pr.url) })
}

// createPreviewSet creates the set of previews: one per open pull request of the forge at
// forgeURL, listed at once on a webhook and otherwise hourly.
func (b *Bench) createPreviewSet(ctx context.Context, pr *previewRepo, forgeURL string, n int) error {
	raw, err := json.Marshal(previewSpec(pr.url, "{{ .headRef }}", "bench-preview-{{ .number }}"))
	if err != nil {
		return err
	}
	most := int32(n)
	return b.c.Create(ctx, &convergev1.SyncTargetSet{
		ObjectMeta: metav1.ObjectMeta{Name: previewSet, Namespace: benchNamespace},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
				Provider: convergev1.GitHubForge, Address: forgeURL, Repository: pr.forgeRepo, MaxPreviews: &most,
				TokenSecretRef:   &convergev1.LocalObjectReference{Name: previewForge},
				WebhookSecretRef: &convergev1.LocalObjectReference{Name: webhookSecret},
				Interval:         &metav1.Duration{Duration: time.Hour}, ServiceAccountName: previewAccount,
			}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "preview-{{ .number }}",
					Labels: map[string]string{workloadLabel: workloadPreviews}},
				Spec: apiextensionsv1.JSON{Raw: raw},
			},
		},
	})
}

// pullRequestWebhook sends GitHub's pull_request webhook of the repository at url, signed
// with the benchmark's webhook token.
func (b *Bench) pullRequestWebhook(ctx context.Context, d *daemon, url string) error {
	body := fmt.Appendf(nil, `{"action": "synchronize", "number": 1, "repository": {"clone_url": %q}}`, url)
	return postWebhook(ctx, d, body, func(h http.Header, sig string) {
		h.Set("X-GitHub-Event", "pull_request")
		h.Set("X-Hub-Signature-256", "sha256="+sig)
	})
}

// idleRequests is what the daemon sent per minute and per target over PreviewIdle, once
// it finished reconciling.
func (b *Bench) idleRequests(ctx context.Context, d *daemon, n int) (float64, error) {
	if err := d.waitQuiet(ctx, 2*time.Second, 2*time.Minute); err != nil {
		return 0, err
	}
	before, err := d.counters(ctx)
	if err != nil {
		return 0, err
	}
	started := time.Now()
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(b.cfg.PreviewIdle):
	}
	after, err := d.counters(ctx)
	if err != nil {
		return 0, err
	}
	return after.requests.minus(before.requests).total() / time.Since(started).Minutes() / float64(n), nil
}

// waitPreviewsGone waits until the set's SyncTargets are deleted (their objects pruned).
func (b *Bench) waitPreviewsGone(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		list := &convergev1.SyncTargetList{}
		if err := b.c.List(ctx, list, client.InNamespace(benchNamespace), client.MatchingLabels{convergev1.SetLabel: previewSet}); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d previews still there after their pull requests closed", len(list.Items))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// handWrittenIdle deploys N hand-written SyncTargets of the previews' specs once the
// previews are gone, and measures them at idle as idleRequests does.
func (b *Bench) handWrittenIdle(ctx context.Context, d *daemon, pr *previewRepo, n int, timeout time.Duration) (float64, error) {
	names, heads := make([]string, n), map[string]string{}
	for i := 1; i <= n; i++ {
		names[i-1] = fmt.Sprintf("hand-%d", i)
		heads[names[i-1]] = fmt.Sprintf("refs/pull/%d/head@sha1:%s", i, pr.heads[i])
	}
	if _, err := b.timeTargets(ctx, d, names, timeout, func(st *convergev1.SyncTarget) bool { return readyAt(st, heads[st.Name]) },
		func() error {
			return parallel(n, 8, func(i int) error {
				return b.c.Create(ctx, &convergev1.SyncTarget{
					ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: benchNamespace, Labels: map[string]string{workloadLabel: workloadPreviews}},
					Spec:       previewSpec(pr.url, fmt.Sprintf("refs/pull/%d/head", i+1), previewNamespace(i+1)),
				})
			})
		}); err != nil {
		return 0, fmt.Errorf("the hand-written SyncTargets: %w", err)
	}
	return b.idleRequests(ctx, d, n)
}
