package ui

import (
	"context"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/diff"
)

// diffLine is one line of a unified diff and its class: a(dded), r(emoved), h(unk), f(ile).
type diffLine struct {
	Class, Text string
}

// diffObject is one object an apply would touch.
type diffObject struct {
	Action, Sign, Ref, Note string
	Lines                   []diffLine
}

// diffView is the pending diff of a SyncTarget: what syncing the revision it fetched
// last would change, Secret values masked (internal/diff never lets them out).
type diffView struct {
	Revision revisionView
	// From is the older revision when two revisions are compared with each other
	// (Compare).
	From    revisionView
	Compare bool
	Summary string
	Objects []diffObject
	Error   string
}

// compareView is the page comparing two revisions of a SyncTarget.
type compareView struct {
	Namespace, Name string
	Diff            *diffView
}

var signs = map[diff.Action]string{diff.Create: "+", diff.Change: "~", diff.Prune: "-"}

func (s *Server) serveDiff(w http.ResponseWriter, r *http.Request) {
	st, err := s.readTarget(r.Context(), "get", keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := &diffView{}
	if res := s.pendingDiff(r.Context(), st, v, "the pending diff is not shown here"); res != nil {
		v.fill(res)
	}
	s.render(w, r, "diff", v)
}

// pendingDiff is what syncing the revision st fetched last would change in the cluster
// (diff.Pending), its revision set on v; nil, and v.Error saying why, when it cannot be
// shown. In the cluster it is refused, said as refusal: a dry-run apply of every object
// and a read of the source credentials would be made with the server's rights, not the
// user's.
func (s *Server) pendingDiff(ctx context.Context, st *convergev1.SyncTarget, v *diffView, refusal string) *diff.Result {
	if s.opts.InCluster != nil {
		v.Error = refusal + ": run converge diff --target " + st.Name + " -n " + st.Namespace + " (or converge ui) with your own credentials"
		return nil
	}
	res, rev, err := diff.Pending(ctx, s.client, s.opts.Config, st, st.Status.LastFetchedRevision)
	if rev != "" {
		v.Revision = revisionOf(st, rev)
	}
	if err != nil {
		v.Error = s.explain(err)
		return nil
	}
	return res
}

// fill lists res's changes.
func (v *diffView) fill(res *diff.Result) {
	v.Summary = res.Summary().String()
	for _, o := range res.Objects {
		if o.Action == diff.Unchanged || o.Action == diff.Skip && o.Note == "" {
			continue
		}
		v.Objects = append(v.Objects, diffObject{Action: string(o.Action), Sign: signs[o.Action], Ref: o.Ref(), Note: o.Note, Lines: diffLines(o.Diff)})
	}
}

// serveCompare shows what changes between two revisions of a SyncTarget (?from=&to=, as
// its history records them), object by object, as converge diff --target NAME --from
// FROM --revision TO does.
func (s *Server) serveCompare(w http.ResponseWriter, r *http.Request) {
	st, err := s.readTarget(r.Context(), "get", keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	from, to := r.URL.Query().Get("from"), r.URL.Query().Get("to")
	v := &compareView{Namespace: st.Namespace, Name: st.Name, Diff: &diffView{Compare: true,
		From: revisionOf(st, from), Revision: revisionOf(st, to)}}
	switch {
	case s.opts.InCluster != nil:
		// Fetching the source is done with its credentials, read with the server's rights:
		// not for a user.
		v.Diff.Error = "revisions are not compared here: run converge diff --target " + st.Name + " -n " + st.Namespace +
			" --from " + from + " --revision " + to + " (or converge ui) with your own credentials"
	case !recorded(st, from) || !recorded(st, to):
		v.Diff.Error = "pick two revisions of the SyncTarget's history"
	default:
		res, revs, err := diff.Revisions(r.Context(), s.client, s.opts.Config, st, from, to)
		if err != nil {
			v.Diff.Error = s.explain(err)
			break
		}
		v.Diff.From, v.Diff.Revision = revisionOf(st, revs[0]), revisionOf(st, revs[1])
		v.Diff.fill(res)
	}
	s.render(w, r, "compare", v)
}

// recorded says whether rev is a revision of st's history: the only ones compared.
func recorded(st *convergev1.SyncTarget, rev string) bool {
	for _, h := range st.Status.History {
		if rev != "" && h.Revision == rev {
			return true
		}
	}
	return false
}

func diffLines(d string) []diffLine {
	if d == "" {
		return nil
	}
	var out []diffLine
	for _, l := range strings.Split(strings.TrimSuffix(d, "\n"), "\n") {
		c := ""
		switch {
		case strings.HasPrefix(l, "+++"), strings.HasPrefix(l, "---"):
			c = "f"
		case strings.HasPrefix(l, "+"):
			c = "a"
		case strings.HasPrefix(l, "-"):
			c = "r"
		case strings.HasPrefix(l, "@@"):
			c = "h"
		}
		out = append(out, diffLine{Class: c, Text: l})
	}
	return out
}

// serveObjectDiff is the pending diff of one object of the SyncTarget's inventory: what
// syncing the revision fetched last would change in it (its live state against Git), as
// the SyncTarget's pending diff shows it, and with the same refusal in the cluster.
func (s *Server) serveObjectDiff(w http.ResponseWriter, r *http.Request) {
	st, want, err := s.readObject(r.Context(), keyOf(r), r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := &diffView{}
	res := s.pendingDiff(r.Context(), st, v, "the diff against Git is not shown here")
	if res == nil {
		s.render(w, r, "diff", v)
		return
	}
	gvk := want.GroupVersionKind()
	mine := &diff.Result{}
	for _, o := range res.Objects {
		gv, _ := schema.ParseGroupVersion(o.APIVersion)
		if gv.Group == gvk.Group && o.Kind == gvk.Kind && o.Namespace == want.GetNamespace() && o.Name == want.GetName() {
			mine.Objects = append(mine.Objects, o)
		}
	}
	if len(mine.Objects) == 0 {
		v.Error = "the revision no longer renders it: a sync prunes it unless its policy keeps it"
	}
	v.fill(mine)
	s.render(w, r, "diff", v)
}
