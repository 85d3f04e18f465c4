package ui

import (
	"net/http"
	"strings"

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
	Summary  string
	Objects  []diffObject
	Error    string
}

var signs = map[diff.Action]string{diff.Create: "+", diff.Change: "~", diff.Prune: "-"}

func (s *Server) serveDiff(w http.ResponseWriter, r *http.Request) {
	st, err := s.readTarget(r.Context(), "get", keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := &diffView{}
	if s.opts.InCluster != nil {
		// A dry-run apply of every object and a read of the source credentials would be
		// made with the server's rights: not for a user.
		v.Error = "the pending diff is not shown here: run converge diff --target " + st.Name + " -n " + st.Namespace + " (or converge ui) with your own credentials"
		s.render(w, r, "diff", v)
		return
	}
	res, rev, err := diff.Pending(r.Context(), s.client, s.opts.Config, st, st.Status.LastFetchedRevision)
	if rev != "" {
		v.Revision = revisionOf(st, rev)
	}
	if err != nil {
		v.Error = s.explain(err)
		s.render(w, r, "diff", v)
		return
	}
	v.Summary = res.Summary().String()
	for _, o := range res.Objects {
		if o.Action == diff.Unchanged || o.Action == diff.Skip && o.Note == "" {
			continue
		}
		v.Objects = append(v.Objects, diffObject{Action: string(o.Action), Sign: signs[o.Action], Ref: o.Ref(), Note: o.Note, Lines: diffLines(o.Diff)})
	}
	s.render(w, r, "diff", v)
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
