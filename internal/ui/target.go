package ui

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/actions"
	"github.com/converge-gitops/converge/internal/tree"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
	synccluster "github.com/converge-gitops/converge/sync/cluster"
)

// errNotFound is a SyncTarget that does not exist (or is not visible to the user).
var errNotFound = errors.New("not found")

// historyEntry is one sync attempt on the timeline.
type historyEntry struct {
	Revision   revisionView
	Result     string
	Started    timeView
	Duration   string
	Created    int32
	Configured int32
	Deleted    int32
	Message    string
	// Rollback is true when the UI offers to roll back to this revision.
	Rollback bool
	// Hooks are the hooks the attempt ran.
	Hooks []hookRunView
	// Origin is where the attempt's OCI artifact says it comes from, when it says.
	Origin *convergev1.ArtifactOrigin
}

// hookRunView is a hook an attempt ran: when, what, how it ended and why.
type hookRunView struct {
	Event, Object, Result, Duration, Message string
}

// eventView is one event of the SyncTarget.
type eventView struct {
	Type, Reason, Message string
	Count                 int32
	When                  timeView
}

// targetPage is the page of one SyncTarget; its Live part is swapped as it changes.
type targetPage struct {
	Namespace, Name string
	URL, Ref, Path  string
	// Chart is the chart of spec.chart (URL, Ref and Path are then empty); Helm says
	// where a chart kept in Git is.
	Chart     *chartView
	Helm      string
	Pinned    string
	Suspended bool
	// Cluster names the kubeconfig Secret of spec.kubeConfig, or is "in-cluster".
	Cluster string
	// Set names the SyncTargetSet that generated it, if one did.
	Set  string
	Live *targetLive
}

// targetLive is the part of the target page that follows the cluster.
type targetLive struct {
	Namespace, Name string
	State           string
	Applied         revisionView
	Fetched         revisionView
	Conditions      []metav1.Condition
	History         []historyEntry
	Tree            *tree.Tree
	TreeError       string
	Events          []eventView
}

func (s *Server) target(ctx context.Context, key client.ObjectKey) (*targetPage, error) {
	st, err := s.readTarget(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	live, err := s.targetLive(ctx, st)
	if err != nil {
		return nil, err
	}
	p := &targetPage{Namespace: st.Namespace, Name: st.Name, URL: sources.RedactURL(st.Spec.Source.URL),
		Ref: actions.DescribeRef(st.Spec.Source.Ref), Path: st.Spec.Path, Suspended: st.Spec.Suspend, Live: live,
		Chart: chartOf(st), Cluster: clusterOf(st), Set: st.Labels[convergev1.SetLabel]}
	if o := st.Spec.OCI; o != nil {
		p.URL, p.Ref = sources.RedactURL(o.URL), actions.DescribeOCIRef(o.Ref)
		if _, ok := st.Annotations[actions.PinnedOCIAnnotation]; ok {
			p.Pinned = actions.DescribeOCIRef(actions.RecordedOCIRef(st))
		}
	}
	if st.Spec.Helm != nil && p.Chart == nil {
		p.Helm = helmInGit(st)
	}
	if raw, ok := st.Annotations[actions.PinnedFromAnnotation]; ok {
		if ref, err := actions.ParsePinnedFrom(raw); err == nil {
			p.Pinned = actions.DescribeRef(ref)
		}
	}
	return p, nil
}

func (s *Server) targetLive(ctx context.Context, st *convergev1.SyncTarget) (*targetLive, error) {
	now := s.opts.Now()
	v := &targetLive{Namespace: st.Namespace, Name: st.Name, State: stateOf(st),
		Applied:    revisionOf(st, st.Status.LastAppliedRevision),
		Fetched:    revisionOf(st, st.Status.LastFetchedRevision),
		Conditions: st.Status.Conditions, History: historyOf(st, now)}
	var events []corev1.Event
	if s.authorize(ctx, "list", "", "events", st.Namespace, "") == nil {
		var err error
		if events, err = s.store.Events(ctx, client.ObjectKeyFromObject(st)); err != nil {
			return nil, err
		}
	}
	for _, e := range events {
		v.Events = append(v.Events, eventView{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count, When: timeOf(eventTime(e), now)})
	}
	if s.client == nil {
		v.TreeError = "no cluster client"
		return v, nil
	}
	v.Tree, v.TreeError = s.tree(ctx, st)
	return v, nil
}

// tree reads the objects st applied, where they live: a SyncTarget of a remote cluster
// has them read there with its kubeconfig, as `converge tree` does — but not by the
// in-cluster UI, which would read them with credentials its user may not hold.
func (s *Server) tree(ctx context.Context, st *convergev1.SyncTarget) (*tree.Tree, string) {
	t, _, release, why := s.treeAndClient(ctx, st)
	if release != nil {
		release()
	}
	return t, why
}

// treeAndClient is tree, and the client of the cluster the objects were read in, for
// further reads until release is called (nil when there is no client). A tree that
// could not be read is nil, with why.
func (s *Server) treeAndClient(ctx context.Context, st *convergev1.SyncTarget) (*tree.Tree, client.Client, func(), string) {
	var opts tree.Options
	if s.opts.InCluster != nil {
		if st.Spec.KubeConfig != nil {
			return nil, nil, nil, "the objects of a remote cluster are not shown here: run converge tree " + st.Name + " -n " + st.Namespace + " (or converge ui) with your own credentials"
		}
		opts.MayRead = s.mayRead
	}
	on, release, err := synccluster.ForCaller(ctx, s.client, s.opts.Config, st, true)
	if err != nil {
		return nil, nil, nil, s.explain(err)
	}
	c, err := on.Client("")
	if err != nil {
		release()
		return nil, nil, nil, s.explain(err)
	}
	t, err := tree.LoadWith(ctx, c, st, opts)
	if err != nil {
		release()
		return nil, nil, nil, err.Error()
	}
	return t, c, release, ""
}

// historyOf is the timeline, newest first; every commit (or chart revision) but the
// applied one can be rolled back to, from its newest entry.
func historyOf(st *convergev1.SyncTarget, now time.Time) []historyEntry {
	commitOf := commitOf
	if st.IsChart() || st.IsOCI() {
		commitOf = chartRevisionOf
	}
	seen := map[string]bool{commitOf(st.Status.LastAppliedRevision): true}
	var out []historyEntry
	for _, e := range st.Status.History {
		commit := commitOf(e.Revision)
		out = append(out, historyEntry{
			Revision: revisionOf(st, e.Revision), Result: string(e.Result),
			Started: timeOf(e.StartedAt.Time, now), Duration: durationText(e),
			Created: e.Created, Configured: e.Configured, Deleted: e.Deleted, Message: e.Message,
			Rollback: commit != "" && !seen[commit] && !st.Spec.Suspend, Hooks: hookRunsOf(e), Origin: e.Origin,
		})
		seen[commit] = true
	}
	return out
}

// hookRunsOf are the hooks of a history entry.
func hookRunsOf(e convergev1.HistoryEntry) []hookRunView {
	var out []hookRunView
	for _, h := range e.Hooks {
		v := hookRunView{Event: h.Event, Object: h.Kind + " " + h.Name, Result: string(h.Result), Message: h.Message}
		if h.Duration != nil {
			v.Duration = durationText(convergev1.HistoryEntry{Duration: h.Duration})
		}
		out = append(out, v)
	}
	return out
}

// chartRevisionOf is a chart revision ("6.5.0@sha256:…") as it is, else "".
func chartRevisionOf(rev string) string {
	if _, err := charts.ParseRevision(rev); err != nil {
		return ""
	}
	return rev
}

// commitOf is the commit SHA of a revision ("main@sha1:…" or "sha1:…"), else "".
func commitOf(rev string) string {
	r, err := sources.ParseRevision(rev)
	if err != nil {
		return ""
	}
	return r.Commit
}

func keyOf(r *http.Request) client.ObjectKey {
	return client.ObjectKey{Namespace: r.PathValue("ns"), Name: r.PathValue("name")}
}

func (s *Server) serveTarget(w http.ResponseWriter, r *http.Request) {
	p, err := s.target(r.Context(), keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "target", p)
}

func (s *Server) serveTargetLive(w http.ResponseWriter, r *http.Request) {
	p, err := s.target(r.Context(), keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "live", p)
}

// fail shows err as a page (or a fragment) with the status it deserves.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	msg := err.Error()
	var denied *deniedError
	if errors.As(err, &denied) {
		code = http.StatusForbidden
	}
	if errors.Is(err, errNotFound) {
		code = http.StatusNotFound
		msg = fmt.Sprintf("SyncTarget %s not found", keyOf(r))
	}
	if errors.Is(err, errNoSuchObject) {
		code = http.StatusNotFound
		msg = fmt.Sprintf("SyncTarget %s has no object %s in its inventory", keyOf(r), r.PathValue("id"))
	}
	if errors.Is(err, errNoSuchPod) {
		code = http.StatusNotFound
		msg = fmt.Sprintf("SyncTarget %s has no such Pod under its object %s", keyOf(r), r.PathValue("id"))
	}
	if errors.Is(err, errSetNotFound) {
		code = http.StatusNotFound
		msg = fmt.Sprintf("SyncTargetSet %s not found", keyOf(r))
	}
	s.renderStatus(w, r, code, "error", map[string]any{"Code": code, "Message": msg})
}
