package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources/forge"
)

// PullRequests lists the open pull requests of a pullRequests generator; the controller's
// is a ForgeLister.
type PullRequests interface {
	// List returns the open pull requests of g's repository, read with the token of the
	// set's namespace, each with whether the forge gives its author write access, and how
	// long the answer holds.
	List(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator) (PullRequestListing, error)
}

// PullRequestListing is a PullRequests' answer.
type PullRequestListing struct {
	PRs []forge.PullRequest
	// Writers are the authors of PRs the forge gives write access to the repository
	// (asked only for the pull requests whose trust depends on it).
	Writers map[string]bool
	// Truncated says that the forge held more open pull requests than were read.
	Truncated bool
	// Every is how long the answer holds before the forge is asked again.
	Every time.Duration
}

// defaultMaxPreviews is maxPreviews when the set does not say (the CRD defaults it too).
const defaultMaxPreviews = 10

// defaultApprovalLabel is approvalLabel when the set does not say.
const defaultApprovalLabel = "preview-approved"

// pullRequestsGenerator yields a parameter set per open pull request that passes its
// filters, is trusted, and is among the maxPreviews most recently updated.
type pullRequestsGenerator struct {
	g *convergev1.PullRequestsGenerator
}

func (pg pullRequestsGenerator) generate(ctx context.Context, env Env) (Generated, error) {
	if env.PullRequests == nil {
		return Generated{}, errors.New("no pull request lister configured")
	}
	got, err := env.PullRequests.List(ctx, client.ObjectKey{Namespace: env.Namespace, Name: env.Set}, pg.g)
	if err != nil {
		return Generated{}, err
	}
	now := time.Now()
	if env.Now != nil {
		now = env.Now()
	}
	kept, states := choosePullRequests(pg.g, got, now)
	out := Generated{Recheck: got.Every, PullRequests: states}
	// A pull request the filters leave out (a draft, one without the labels asked for) is
	// none of the set's business: no comment says so.
	filtered := map[int64]bool{}
	for _, pr := range got.PRs {
		if filteredOut(pg.g, pr) != "" {
			filtered[int64(pr.Number)] = true
		}
	}
	for _, st := range states {
		if !filtered[st.Number] {
			out.comments = append(out.comments, prComment{gen: pg.g, state: st})
		}
	}
	for _, pr := range kept {
		out.Params = append(out.Params, pullRequestParams(pr))
	}
	if got.Truncated {
		out.Held = append(out.Held, fmt.Sprintf("the repository has more than %d open pull requests: only those were read", len(got.PRs)))
	}
	return out, nil
}

// choosePullRequests keeps the pull requests that pass the filters and are trusted, the
// maxPreviews most recently updated of them, and says of every pull request read what
// became of it.
func choosePullRequests(g *convergev1.PullRequestsGenerator, l PullRequestListing, now time.Time) ([]forge.PullRequest, []convergev1.PullRequestState) {
	var eligible []forge.PullRequest
	var states []convergev1.PullRequestState
	for _, pr := range l.PRs {
		if !intoTarget(g, pr) {
			continue // into another branch: not the generator's business
		}
		why := filteredOut(g, pr)
		if why == "" {
			why = untrusted(g, pr, l.Writers)
		}
		if why == "" && g.TTL != nil && now.Sub(pr.UpdatedAt) > g.TTL.Duration {
			why = fmt.Sprintf("not updated for more than %s (ttl)", g.TTL.Duration)
		}
		if why != "" {
			states = append(states, prState(pr, why))
			continue
		}
		eligible = append(eligible, pr)
	}
	sort.SliceStable(eligible, func(i, j int) bool {
		if !eligible[i].UpdatedAt.Equal(eligible[j].UpdatedAt) {
			return eligible[i].UpdatedAt.After(eligible[j].UpdatedAt)
		}
		return eligible[i].Number > eligible[j].Number
	})
	limit := defaultMaxPreviews
	if g.MaxPreviews != nil {
		limit = int(*g.MaxPreviews)
	}
	var kept []forge.PullRequest
	for i, pr := range eligible {
		if i >= limit {
			states = append(states, prState(pr, fmt.Sprintf("waits: %d previews at most (maxPreviews), for more recently updated pull requests", limit)))
			continue
		}
		kept = append(kept, pr)
		states = append(states, prState(pr, ""))
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Number < kept[j].Number })
	sort.Slice(states, func(i, j int) bool { return states[i].Number < states[j].Number })
	return kept, states
}

// intoTarget says whether a pull request is into one of targetBranches (any, unset).
func intoTarget(g *convergev1.PullRequestsGenerator, pr forge.PullRequest) bool {
	return len(g.TargetBranches) == 0 || slices.Contains(g.TargetBranches, pr.BaseBranch)
}

// filteredOut says why the generator's filters leave a pull request out, or "".
func filteredOut(g *convergev1.PullRequestsGenerator, pr forge.PullRequest) string {
	if pr.Draft && !g.IncludeDrafts {
		return "a draft (includeDrafts is false)"
	}
	for _, want := range g.Labels {
		if !slices.Contains(pr.Labels, want) {
			return fmt.Sprintf("without the label %q", want)
		}
	}
	return ""
}

// untrusted says why a pull request may not be deployed yet: from a fork, or by an author
// the forge gives no write access, without the approval label. Bitbucket has no labels
// and no permission call for another user: its pull requests from the repository's own
// branches are trusted (pushing there takes write access), those from forks never.
func untrusted(g *convergev1.PullRequestsGenerator, pr forge.PullRequest, writers map[string]bool) string {
	label := approvalLabel(g)
	if slices.Contains(pr.Labels, label) {
		return ""
	}
	if g.Provider == convergev1.BitbucketForge {
		if pr.Fork {
			return "from a fork: Bitbucket pull requests from forks are not deployed"
		}
		return ""
	}
	if pr.Fork {
		return fmt.Sprintf("from a fork: waits for a maintainer to add the label %q", label)
	}
	if !writers[pr.Author] {
		return fmt.Sprintf("its author has no write access to the repository: waits for a maintainer to add the label %q", label)
	}
	return ""
}

// needsPermission says whether the trust of pr depends on its author's write access.
func needsPermission(g *convergev1.PullRequestsGenerator, pr forge.PullRequest) bool {
	return g.Provider != convergev1.BitbucketForge && !pr.Fork && !slices.Contains(pr.Labels, approvalLabel(g)) &&
		intoTarget(g, pr) && filteredOut(g, pr) == ""
}

func approvalLabel(g *convergev1.PullRequestsGenerator) string {
	if g.ApprovalLabel != "" {
		return g.ApprovalLabel
	}
	return defaultApprovalLabel
}

// prState is the status line of a pull request: waiting says why it yields no preview.
func prState(pr forge.PullRequest, waiting string) convergev1.PullRequestState {
	return convergev1.PullRequestState{Number: int64(pr.Number), URL: pr.URL, Author: pr.Author,
		Branch: pr.HeadBranch, HeadSHA: pr.HeadSHA, Waiting: waiting}
}

// maxSlug is the length of the slug parameter: a DNS label leaves room for a prefix.
const maxSlug = 40

var notSlug = regexp.MustCompile(`[^a-z0-9]+`)

// slug is the branch as a DNS label: lower case, runs of other characters as one "-",
// trimmed of "-", at most maxSlug characters; "pr" when nothing is left.
func slug(branch string) string {
	s := notSlug.ReplaceAllString(strings.ToLower(branch), "-")
	s = strings.Trim(s, "-")
	if len(s) > maxSlug {
		s = strings.TrimRight(s[:maxSlug], "-")
	}
	if s == "" {
		return "pr"
	}
	return s
}

// pullRequestParams are the parameters of a pull request. Every value is data: the
// template reads it as a string and never parses it.
func pullRequestParams(pr forge.PullRequest) Params {
	short := pr.HeadSHA
	if len(short) > 8 {
		short = short[:8]
	}
	labels := slices.Clone(pr.Labels)
	sort.Strings(labels)
	return Params{
		"number":       strconv.Itoa(pr.Number),
		"branch":       pr.HeadBranch,
		"targetBranch": pr.BaseBranch,
		"headSHA":      pr.HeadSHA,
		"shortSHA":     short,
		"headRef":      pr.HeadRef,
		"slug":         slug(pr.HeadBranch),
		"author":       pr.Author,
		"labels":       strings.Join(labels, ","),
		"url":          pr.URL,
	}
}

// checkPreviewIdentity refuses a set with a pullRequests generator whose template does not
// name, as written, the service account the generator says previews run as: what a pull
// request brings runs with no more rights than the set's author chose.
func checkPreviewIdentity(set *convergev1.SyncTargetSet) error {
	var gens []*convergev1.PullRequestsGenerator
	for _, g := range set.Spec.Generators {
		if g.PullRequests != nil {
			gens = append(gens, g.PullRequests)
		}
		if g.Matrix != nil {
			for _, b := range g.Matrix.Generators {
				if b.PullRequests != nil {
					gens = append(gens, b.PullRequests)
				}
			}
		}
	}
	if len(gens) == 0 {
		return nil
	}
	var spec struct {
		ServiceAccountName *string `json:"serviceAccountName"`
	}
	if err := json.Unmarshal(set.Spec.Template.Spec.Raw, &spec); err != nil {
		return fmt.Errorf("template.spec: %w", err)
	}
	for _, g := range gens {
		switch {
		case spec.ServiceAccountName == nil:
			return fmt.Errorf("a pullRequests generator runs its previews as %q: template.spec.serviceAccountName must say so", g.ServiceAccountName)
		case *spec.ServiceAccountName != g.ServiceAccountName:
			return fmt.Errorf("template.spec.serviceAccountName is %q, but the pullRequests generator runs its previews as %q: they must be the same, as written", *spec.ServiceAccountName, g.ServiceAccountName)
		}
	}
	return nil
}
