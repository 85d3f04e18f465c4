package fleet

import (
	"context"
	"crypto/sha256"
	"fmt"
	"html"
	"slices"
	"sort"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/forge"
)

// commentTimeout bounds the comments of one reconcile: a forge that does not answer holds
// the set's worker no longer.
const commentTimeout = 20 * time.Second

// maxCommentMessage caps the message of a condition quoted in a comment.
const maxCommentMessage = 500

// maxURLs caps the preview URLs a comment lists.
const maxURLs = 10

// prComment is a pull request read by a pullRequests generator, and the generator: where
// its comment goes.
type prComment struct {
	gen   *convergev1.PullRequestsGenerator
	state convergev1.PullRequestState
}

// Comments writes the comment of converge on each pull request of a set's
// pullRequests generators, and the commit status of its previews; the controller's is its
// ForgeLister.
type Comments interface {
	// Comment makes sure pull request number carries body as converge's one comment,
	// marked with marker, with the token of the set's namespace.
	Comment(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator, number int, marker, body string) error
	// Status sets the commit status st on commit sha, with the token of the set's
	// namespace.
	Status(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator, sha string, st forge.Status) error
}

// commentMarker marks the comment of one set on a pull request.
func commentMarker(set client.ObjectKey) string {
	return "<!-- converge-preview " + set.String() + " -->"
}

// statusContext names the commit status of one set's previews.
func statusContext(set client.ObjectKey) string { return "converge/preview/" + set.String() }

// comment writes what became of each pull request the set read on the pull request
// itself: its preview's state, or why it has none, and the commit status of its head. A
// failure is logged and tried again at the set's next reconcile; it never fails the set.
func (r *Reconciler) comment(ctx context.Context, set *convergev1.SyncTargetSet, gen Generated, targets []*Target) {
	if r.Comments == nil || len(gen.comments) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, commentTimeout)
	defer cancel()
	key := client.ObjectKeyFromObject(set)
	targets = slices.Clone(targets)
	sort.SliceStable(targets, func(i, j int) bool { return targets[i].Name < targets[j].Name })
	byURL := map[string][]*Target{}
	for _, t := range targets {
		byURL[t.Params["url"]] = append(byURL[t.Params["url"]], t)
	}
	// A preview's URLs are read from the cluster once, for its comment and its status.
	read := map[string][]string{}
	urlsOf := func(t *Target) []string {
		if t.Live == nil || t.Live.Spec.KubeConfig != nil {
			return nil
		}
		if urls, ok := read[t.Name]; ok {
			return urls
		}
		read[t.Name] = r.previewURLs(ctx, t.Live)
		return read[t.Name]
	}
	seen := map[string]bool{}
	for _, c := range gen.comments {
		id := c.state.URL + "\x00" + fmt.Sprint(c.state.Number)
		if seen[id] || c.gen.TokenSecretRef == nil {
			continue
		}
		seen[id] = true
		log := ctrl.LoggerFrom(ctx).WithValues("set", key.String(), "pullRequest", c.state.Number)
		mine := byURL[c.state.URL]
		if !c.gen.DisableComments {
			body := commentMarker(key) + "\n" + r.commentBody(ctx, key, c.gen, c.state, mine, urlsOf)
			if err := r.Comments.Comment(ctx, key, c.gen, int(c.state.Number), commentMarker(key), body); err != nil {
				log.Info("commenting on a pull request failed; tried again at the next reconcile", "error", err.Error())
			}
		}
		if !c.gen.DisableCommitStatus && c.state.Waiting == "" && len(mine) > 0 && c.state.HeadSHA != "" {
			st := commitStatus(key, c.state.HeadSHA, mine, urlsOf)
			if err := r.Comments.Status(ctx, key, c.gen, c.state.HeadSHA, st); err != nil {
				log.Info("setting a pull request's commit status failed; tried again at the next reconcile", "error", err.Error())
			}
		}
	}
}

// commentBody says, in Markdown, what became of a pull request: each preview's state,
// where it answers (urlsOf) and its diff, or why there is none.
func (r *Reconciler) commentBody(ctx context.Context, set client.ObjectKey, g *convergev1.PullRequestsGenerator,
	pr convergev1.PullRequestState, targets []*Target, urlsOf func(*Target) []string) string {
	var b strings.Builder
	b.WriteString("#### converge preview\n\n")
	if pr.Waiting != "" {
		fmt.Fprintf(&b, "⏸ **Not deployed**: %s.\n", commentText(pr.Waiting))
		return b.String()
	}
	for _, t := range targets {
		fmt.Fprintf(&b, "- `%s`: %s\n", t.Name, previewState(t.Live, pr.HeadSHA))
		for _, u := range urlsOf(t) {
			fmt.Fprintf(&b, "  - %s\n", u)
		}
	}
	for _, t := range targets {
		b.WriteString(r.previewDiffSection(ctx, set, g, pr, t))
	}
	return b.String()
}

// commitStatus is the commit status of a pull request's head: failure when one of its
// previews failed or was rolled back, success when all are Ready at it, pending
// otherwise; it links to the first preview's first URL (urlsOf).
func commitStatus(set client.ObjectKey, head string, targets []*Target, urlsOf func(*Target) []string) forge.Status {
	st := forge.Status{State: forge.StatusSuccess, Context: statusContext(set)}
	var ready, deploying []string
	for _, t := range targets {
		switch phaseOf(t.Live, head) {
		case phaseFailed, phaseRolledBack:
			if st.State != forge.StatusFailure {
				st.State, st.Description = forge.StatusFailure, t.Name+" failed at "+shortHead(head)
			}
		case phaseReady:
			ready = append(ready, t.Name)
		default:
			deploying = append(deploying, t.Name)
		}
	}
	switch {
	case st.State == forge.StatusFailure:
	case len(deploying) > 0:
		st.State, st.Description = forge.StatusPending, "deploying "+strings.Join(deploying, ", ")
	default:
		st.Description = strings.Join(ready, ", ") + " Ready at " + shortHead(head)
	}
	if st.State == forge.StatusSuccess {
		if urls := urlsOf(targets[0]); len(urls) > 0 {
			st.TargetURL = urls[0]
		}
	}
	return st
}

// previewPhase is where a preview stands at a pull request's head.
type previewPhase int

const (
	phaseDeploying previewPhase = iota
	phaseReady
	phaseFailed
	phaseRolledBack
)

// phaseOf is where the preview SyncTarget st (nil: not written yet) stands at head: Ready
// there, failed, rolled back from it, or deploying it.
func phaseOf(st *convergev1.SyncTarget, head string) previewPhase {
	if st == nil {
		return phaseDeploying
	}
	ready := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
	last := lastEntry(st)
	atHead := head != "" && strings.Contains(st.Status.LastAppliedRevision, head)
	switch {
	case last != nil && strings.Contains(last.Revision, head) && last.Result == convergev1.SyncRolledBack:
		return phaseRolledBack
	case ready != nil && ready.Status == "True" && atHead && ready.ObservedGeneration == st.Generation:
		return phaseReady
	case ready != nil && ready.Status == "False" && ready.Reason != convergev1.ProgressingReason:
		return phaseFailed
	}
	return phaseDeploying
}

func lastEntry(st *convergev1.SyncTarget) *convergev1.HistoryEntry {
	if len(st.Status.History) == 0 {
		return nil
	}
	return &st.Status.History[0]
}

// previewState is a preview SyncTarget's state in a few words: deploying the head, Ready
// at it with what changed, failed or rolled back with why.
func previewState(st *convergev1.SyncTarget, head string) string {
	short := shortHead(head)
	switch phaseOf(st, head) {
	case phaseRolledBack:
		return fmt.Sprintf("↩️ **Rolled back**: `%s` failed (%s); the preview runs `%s` again", short,
			commentText(lastEntry(st).Message), sources.ShortRevision(st.Status.LastAppliedRevision))
	case phaseReady:
		out := fmt.Sprintf("✅ **Ready** at `%s`", short)
		if last := lastEntry(st); last != nil && strings.Contains(last.Revision, head) {
			out += fmt.Sprintf(": %d created, %d configured, %d deleted", last.Created, last.Configured, last.Deleted)
		}
		return out
	case phaseFailed:
		ready := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
		return fmt.Sprintf("❌ **Failed** at `%s`: %s", short, commentText(ready.Message))
	}
	return fmt.Sprintf("🔄 **Deploying** `%s`…", short)
}

// shortHead is a pull request's head commit as its comment names it: 7 digits, as the
// forges show commits.
func shortHead(head string) string {
	if len(head) > 7 {
		return head[:7]
	}
	return head
}

// commentText is a message for Markdown: one line, capped, its HTML escaped and its
// backticks made plain, so that it cannot open a block or a tag.
func commentText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > maxCommentMessage {
		s = s[:maxCommentMessage] + "…"
	}
	return strings.ReplaceAll(html.EscapeString(s), "`", "'")
}

// routeKinds are the kinds whose host names a preview answers on.
var routeKinds = map[string]schema.GroupVersionKind{
	"networking.k8s.io_Ingress":           {Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"},
	"gateway.networking.k8s.io_HTTPRoute": {Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"},
}

// previewURLs are the URLs of the Ingresses and HTTPRoutes a preview applied, read from
// the cluster: https for an Ingress host its TLS lists, http otherwise.
func (r *Reconciler) previewURLs(ctx context.Context, st *convergev1.SyncTarget) []string {
	if st.Status.Inventory == nil || r.APIReader == nil {
		return nil
	}
	var urls []string
	for _, e := range st.Status.Inventory.Entries {
		parts := strings.Split(e.ID, "_")
		if len(parts) != 4 {
			continue
		}
		gvk, ok := routeKinds[parts[2]+"_"+parts[3]]
		if !ok {
			continue
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: parts[0], Name: parts[1]}, u); err != nil {
			continue
		}
		urls = append(urls, hostURLs(u)...)
		if len(urls) >= maxURLs {
			break
		}
	}
	slices.Sort(urls)
	urls = slices.Compact(urls)
	return urls[:min(len(urls), maxURLs)]
}

// hostURLs are the URLs of an Ingress's or HTTPRoute's host names, wildcards left out.
func hostURLs(u *unstructured.Unstructured) []string {
	tls := map[string]bool{}
	var hosts []string
	if u.GetKind() == "Ingress" {
		items, _, _ := unstructured.NestedSlice(u.Object, "spec", "tls")
		for _, it := range items {
			m, _ := it.(map[string]any)
			hs, _, _ := unstructured.NestedStringSlice(m, "hosts")
			for _, h := range hs {
				tls[h] = true
			}
		}
		rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "rules")
		for _, it := range rules {
			m, _ := it.(map[string]any)
			if h, ok := m["host"].(string); ok {
				hosts = append(hosts, h)
			}
		}
	} else {
		hosts, _, _ = unstructured.NestedStringSlice(u.Object, "spec", "hostnames")
	}
	var out []string
	for _, h := range hosts {
		if h == "" || strings.ContainsAny(h, "*/ <>\"'`()[]") {
			continue
		}
		scheme := "http://"
		if tls[h] || u.GetKind() == "HTTPRoute" {
			scheme = "https://"
		}
		out = append(out, scheme+h)
	}
	return out
}

// commentID identifies a comment's body, to skip writing one the forge already holds.
func commentID(body string) [32]byte { return sha256.Sum256([]byte(body)) }
