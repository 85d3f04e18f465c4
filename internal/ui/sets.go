package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/actions"
	"github.com/converge-gitops/converge/sources"
)

// synctargetsets is the resource of SyncTargetSets, as RBAC names it.
const synctargetsets = "synctargetsets"

// errSetNotFound is a SyncTargetSet that does not exist, or that the store does not watch.
var errSetNotFound = errors.New("set not found")

// setPage is the page of one SyncTargetSet: what generates its SyncTargets, how a change
// rolls out to them and where the rollout stands, and each SyncTarget's state.
type setPage struct {
	Namespace, Name string
	State           string
	Conditions      []metav1.Condition
	Generators      []string
	Strategy        string
	Steps           []setStep
	Targets         []setTarget
	PullRequests    []setPullRequest
}

// setPullRequest is a pull request a pullRequests generator read: its preview
// SyncTargets, or why it has none.
type setPullRequest struct {
	Number         int64
	URL            string // its page on the forge; "" unless http(s)
	Author, Branch string
	Head           string
	Previews       []setTarget
	Waiting        string
}

// setStep is one rollout step: which SyncTargets it takes, how many are Ready, and
// whether the rollout is past it, at it or not there yet.
type setStep struct {
	Number       int
	Match        string
	Total, Ready int
	Where        string
}

// setTarget is one generated SyncTarget.
type setTarget struct {
	Name, Href string
	State      string
	Step       string
	Pending    bool
	Revision   revisionView
	// Missing: the set's status names it, but it is not there (yet, or any more).
	Missing bool
}

// Where a rollout stands on a step.
const (
	stepDone    = "done"
	stepCurrent = "rolling out"
	stepWaiting = "waiting"
)

// readSet reads the SyncTargetSet key for a user who may get it, asking first: a user who
// may not gets the same deniedError whether it exists or not.
func (s *Server) readSet(ctx context.Context, key client.ObjectKey) (*convergev1.SyncTargetSet, error) {
	if err := s.authorize(ctx, "get", convergev1.GroupVersion.Group, synctargetsets, key.Namespace, key.Name); err != nil {
		return nil, err
	}
	set, found, err := s.store.Set(ctx, key)
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, errSetNotFound
	}
	return set, nil
}

func (s *Server) setPage(ctx context.Context, key client.ObjectKey) (*setPage, error) {
	set, err := s.readSet(ctx, key)
	if err != nil {
		return nil, err
	}
	p := &setPage{Namespace: set.Namespace, Name: set.Name, State: stateOfConditions(set.Status.Conditions), Conditions: set.Status.Conditions,
		Strategy: strategyOf(set.Spec.Strategy)}
	for _, g := range set.Spec.Generators {
		p.Generators = append(p.Generators, describeGenerator(g))
	}
	// The generated SyncTargets the user may read: the set's status names them, their
	// label points back at the set.
	mine := map[string]*convergev1.SyncTarget{}
	if s.authorizeTarget(ctx, "list", set.Namespace, "") == nil {
		all, err := s.store.Targets(ctx)
		if err != nil {
			return nil, err
		}
		for i := range all {
			if st := &all[i]; st.Namespace == set.Namespace && st.Labels[convergev1.SetLabel] == set.Name {
				mine[st.Name] = st
			}
		}
	}
	steps := len(stepsOf(set))
	for _, g := range set.Status.Targets {
		t := setTarget{Name: g.Name, Href: "/targets/" + set.Namespace + "/" + g.Name, Pending: g.Pending,
			Step: stepName(int(g.Step), steps), State: stateUnknown, Missing: true}
		if st := mine[g.Name]; st != nil {
			t.State, t.Revision, t.Missing = stateOf(st), revisionOf(st, st.Status.LastAppliedRevision), false
			delete(mine, g.Name)
		}
		p.Targets = append(p.Targets, t)
	}
	for name, st := range mine { // labelled by the set, not yet in its status
		p.Targets = append(p.Targets, setTarget{Name: name, Href: "/targets/" + set.Namespace + "/" + name,
			State: stateOf(st), Revision: revisionOf(st, st.Status.LastAppliedRevision), Step: "-"})
	}
	sort.SliceStable(p.Targets, func(i, j int) bool { return p.Targets[i].Name < p.Targets[j].Name })
	p.Steps = rolloutSteps(set)
	p.PullRequests = pullRequestsOf(set, p.Targets)
	return p, nil
}

// pullRequestsOf are the pull requests of the set's status, each with its SyncTargets as
// the page shows them. A link goes only to an http(s) page.
func pullRequestsOf(set *convergev1.SyncTargetSet, targets []setTarget) []setPullRequest {
	byName := map[string]setTarget{}
	for _, t := range targets {
		byName[t.Name] = t
	}
	var out []setPullRequest
	for _, pr := range set.Status.PullRequests {
		v := setPullRequest{Number: pr.Number, Author: pr.Author, Branch: pr.Branch, Waiting: pr.Waiting}
		if u, err := url.Parse(pr.URL); err == nil && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" {
			v.URL = u.String()
		}
		if len(pr.HeadSHA) >= 7 {
			v.Head = pr.HeadSHA[:7]
		}
		for _, name := range pr.SyncTargets {
			t, ok := byName[name]
			if !ok {
				t = setTarget{Name: name, Href: "/targets/" + set.Namespace + "/" + name, State: stateUnknown, Missing: true}
			}
			v.Previews = append(v.Previews, t)
		}
		out = append(out, v)
	}
	return out
}

func stepsOf(set *convergev1.SyncTargetSet) []convergev1.RolloutStep {
	if set.Spec.Strategy == nil {
		return nil
	}
	return set.Spec.Strategy.Steps
}

// stepName names step i of n steps (n: the SyncTargets no step matches, which come last).
func stepName(i, n int) string {
	switch {
	case n == 0:
		return "-"
	case i >= n:
		return "last (no step matches)"
	}
	return fmt.Sprint(i + 1)
}

// rolloutSteps are the set's steps with their SyncTargets and where the rollout stands.
func rolloutSteps(set *convergev1.SyncTargetSet) []setStep {
	steps := stepsOf(set)
	if len(steps) == 0 {
		return nil
	}
	out := make([]setStep, len(steps)+1)
	for i, st := range steps {
		out[i] = setStep{Number: i + 1, Match: labels.Set(st.MatchLabels).String()}
	}
	out[len(steps)] = setStep{Number: len(steps) + 1, Match: "the SyncTargets no step matches"}
	for _, g := range set.Status.Targets {
		i := min(max(int(g.Step), 0), len(steps))
		out[i].Total++
		if g.Ready == metav1.ConditionTrue && !g.Pending {
			out[i].Ready++
		}
	}
	current := int(set.Status.CurrentStep)
	for i := range out {
		switch {
		case i < current:
			out[i].Where = stepDone
		case i == current && out[i].Ready < out[i].Total:
			out[i].Where = stepCurrent
		case i == current:
			out[i].Where = stepDone
		default:
			out[i].Where = stepWaiting
		}
	}
	if out[len(steps)].Total == 0 {
		out = out[:len(steps)]
	}
	return out
}

// strategyOf says how a change of the set reaches its SyncTargets.
func strategyOf(s *convergev1.RolloutStrategy) string {
	if s == nil || (s.MaxConcurrent == nil && len(s.Steps) == 0) {
		return "every SyncTarget at once"
	}
	var parts []string
	if len(s.Steps) > 0 {
		parts = append(parts, fmt.Sprintf("%d steps, each waiting until the ones before are Ready", len(s.Steps)))
	}
	if s.MaxConcurrent != nil {
		parts = append(parts, fmt.Sprintf("at most %d not Ready at once", *s.MaxConcurrent))
	}
	return strings.Join(parts, "; ")
}

// describeGenerator says in words what one generator yields.
func describeGenerator(g convergev1.Generator) string {
	if g.Matrix != nil {
		var parts []string
		for _, b := range g.Matrix.Generators {
			parts = append(parts, describeBase(b))
		}
		return "matrix: every pair of (" + strings.Join(parts, ") × (") + ")"
	}
	return describeBase(convergev1.BaseGenerator{List: g.List, Clusters: g.Clusters, GitDirectories: g.GitDirectories,
		PullRequests: g.PullRequests})
}

func describeBase(b convergev1.BaseGenerator) string {
	switch {
	case b.List != nil:
		return fmt.Sprintf("list of %d parameter sets", len(b.List.Elements))
	case b.Clusters != nil:
		sel := "every cluster Secret"
		if b.Clusters.Selector != nil {
			if s, err := metav1.LabelSelectorAsSelector(b.Clusters.Selector); err == nil && !s.Empty() {
				sel = "cluster Secrets matching " + s.String()
			}
		}
		return "clusters: " + sel + " of the namespace"
	case b.GitDirectories != nil:
		d := b.GitDirectories
		out := fmt.Sprintf("directories of %s (%s) matching %s", sources.RedactURL(d.Source.URL),
			actions.DescribeRef(d.Source.Ref), strings.Join(d.Include, ", "))
		if len(d.Exclude) > 0 {
			out += ", except " + strings.Join(d.Exclude, ", ")
		}
		return out
	case b.PullRequests != nil:
		p := b.PullRequests
		out := fmt.Sprintf("open pull requests of %s on %s", p.Repository, p.Provider)
		if len(p.TargetBranches) > 0 {
			out += " into " + strings.Join(p.TargetBranches, ", ")
		}
		if len(p.Labels) > 0 {
			out += " labelled " + strings.Join(p.Labels, ", ")
		}
		return out + ", previews run as " + p.ServiceAccountName
	}
	return "no generator"
}

func (s *Server) serveSet(w http.ResponseWriter, r *http.Request) {
	p, err := s.setPage(r.Context(), keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "set", p)
}
