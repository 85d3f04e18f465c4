package ui

import (
	"net/http"
	"sort"
	"strings"
	"time"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxMessage bounds the message shown in an overview row; the target page has it all.
const maxMessage = 160

// filter is what the overview shows: ?ns=, ?state=, ?q= (a substring of the name,
// namespace, message or source URL, case-insensitive).
type filter struct {
	Namespace string
	State     string
	Query     string
}

func filterOf(r *http.Request) filter {
	q := r.URL.Query()
	return filter{Namespace: q.Get("ns"), State: q.Get("state"), Query: strings.TrimSpace(q.Get("q"))}
}

func (f filter) matches(st *convergev1.SyncTarget, state string) bool {
	if f.Namespace != "" && st.Namespace != f.Namespace {
		return false
	}
	if f.State != "" && state != f.State {
		return false
	}
	if f.Query == "" {
		return true
	}
	q := strings.ToLower(f.Query)
	for _, s := range []string{st.Namespace + "/" + st.Name, message(st), st.Spec.Source.URL} {
		if strings.Contains(strings.ToLower(s), q) {
			return true
		}
	}
	return false
}

// row is one SyncTarget in the overview.
type row struct {
	Namespace, Name string
	State           string
	Ready, Health   string
	Revision        revisionView
	LastSync        timeView
	Message         string
}

func rowOf(st *convergev1.SyncTarget, now time.Time) row {
	return row{
		Namespace: st.Namespace, Name: st.Name, State: stateOf(st),
		Ready:    condStatus(st, convergev1.ReadyCondition),
		Health:   condStatus(st, convergev1.HealthyCondition),
		Revision: revisionOf(st, st.Status.LastAppliedRevision),
		LastSync: timeOf(lastSync(st), now),
		Message:  tableMessage(message(st), maxMessage),
	}
}

// stateCount is one state and how many SyncTargets are in it.
type stateCount struct {
	State string
	Count int
	// Selected is true when the overview is filtered to this state.
	Selected bool
}

// overview is the overview page.
type overview struct {
	Filter     filter
	Namespaces []string
	Counts     []stateCount
	Total      int
	Rows       []row
	Graph      *graph
}

func (s *Server) overview(r *http.Request) (*overview, error) {
	targets, err := s.store.Targets(r.Context())
	if err != nil {
		return nil, err
	}
	targets = s.visible(r.Context(), targets)
	f := filterOf(r)
	now := s.opts.Now()
	counts := map[string]int{}
	namespaces := map[string]bool{}
	v := &overview{Filter: f, Total: len(targets)}
	var shown []*convergev1.SyncTarget
	anyState := f
	anyState.State = ""
	for i := range targets {
		st := &targets[i]
		state := stateOf(st)
		namespaces[st.Namespace] = true
		if !anyState.matches(st, state) {
			continue
		}
		counts[state]++
		if f.matches(st, state) {
			v.Rows = append(v.Rows, rowOf(st, now))
			shown = append(shown, st)
		}
	}
	for _, state := range allStates {
		v.Counts = append(v.Counts, stateCount{State: state, Count: counts[state], Selected: f.State == state})
	}
	for ns := range namespaces {
		v.Namespaces = append(v.Namespaces, ns)
	}
	sort.Strings(v.Namespaces)
	v.Graph = layoutGraph(shown)
	return v, nil
}

func (s *Server) serveOverview(w http.ResponseWriter, r *http.Request) {
	v, err := s.overview(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "overview", v)
}

// serveOverviewFragment is the counts and the graph, swapped in when a target changes.
func (s *Server) serveOverviewFragment(w http.ResponseWriter, r *http.Request) {
	v, err := s.overview(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, "summary", v)
}

// serveRow is one row of the overview; 204 when the target is gone or filtered out.
func (s *Server) serveRow(w http.ResponseWriter, r *http.Request) {
	key := keyOf(r)
	st, found, err := s.store.Target(r.Context(), key)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !found || !filterOf(r).matches(st, stateOf(st)) || s.authorizeTarget(r.Context(), "get", key.Namespace, key.Name) != nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.render(w, r, "row", rowOf(st, s.opts.Now()))
}
