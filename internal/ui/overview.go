package ui

import (
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxMessage bounds the message shown in an overview row; the target page has it all.
const maxMessage = 160

// pageSize is the number of rows of one overview page: it bounds the page (about 450
// bytes a row at most) and its render whatever the number of SyncTargets; the counts and
// the graph cover every SyncTarget the filter matches.
const pageSize = 500

// filter is what the overview shows: ?ns=, ?state=, ?set= (the SyncTargetSet that
// generated them), ?cluster= (the kubeconfig Secret they deploy with, or in-cluster),
// ?q= (a substring of the name, namespace, message or source URL, case-insensitive);
// ?group=set or cluster groups the rows shown.
type filter struct {
	Namespace string
	State     string
	Set       string
	Cluster   string
	Query     string
	Group     string
}

func filterOf(r *http.Request) filter {
	q := r.URL.Query()
	f := filter{Namespace: q.Get("ns"), State: q.Get("state"), Set: q.Get("set"), Cluster: q.Get("cluster"),
		Query: strings.TrimSpace(q.Get("q")), Group: q.Get("group")}
	if f.Group != groupBySet && f.Group != groupByCluster {
		f.Group = ""
	}
	return f
}

// What the overview groups its rows by.
const (
	groupBySet     = "set"
	groupByCluster = "cluster"
)

// rowGroup is the rows of one set or one cluster.
type rowGroup struct {
	Label string
	Href  string // the set's page, or the overview filtered by the cluster
	Rows  []row
}

// groupRows groups rows by their set ("no set" last) or cluster (the daemon's own first),
// keeping their order within each group.
func groupRows(rows []row, by string) []rowGroup {
	index := map[string]int{}
	var out []rowGroup
	for _, r := range rows {
		var key string
		var g rowGroup
		switch by {
		case groupBySet:
			key = r.Namespace + "/" + r.Set
			g = rowGroup{Label: "set " + r.Namespace + "/" + r.Set, Href: "/sets/" + r.Namespace + "/" + r.Set}
			if r.Set == "" {
				key, g = "", rowGroup{Label: "no set"}
			}
		default:
			key = r.Cluster
			g = rowGroup{Label: "cluster " + r.Cluster, Href: "/?cluster=" + url.QueryEscape(r.Cluster)}
			if r.Cluster == "" {
				g = rowGroup{Label: "cluster in-cluster", Href: "/?cluster=in-cluster"}
			}
		}
		i, ok := index[key]
		if !ok {
			i = len(out)
			index[key] = i
			out = append(out, g)
		}
		out[i].Rows = append(out[i].Rows, r)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].Label, out[j].Label
		switch {
		case a == "no set" || b == "cluster in-cluster":
			return false
		case b == "no set" || a == "cluster in-cluster":
			return true
		}
		return a < b
	})
	return out
}

// Any says whether the filter narrows anything.
func (f filter) Any() bool {
	return f != filter{}
}

func (f filter) matches(st *convergev1.SyncTarget, state string) bool {
	if f.Namespace != "" && st.Namespace != f.Namespace {
		return false
	}
	if f.Set != "" && st.Labels[convergev1.SetLabel] != f.Set {
		return false
	}
	if f.Cluster != "" && clusterOf(st) != f.Cluster {
		return false
	}
	if f.State != "" && state != f.State {
		return false
	}
	if f.Query == "" {
		return true
	}
	q := strings.ToLower(f.Query)
	for _, s := range []string{st.Namespace + "/" + st.Name, message(st), st.Spec.Source.URL, sourceSummary(st)} {
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
	// Source is what it deploys when that is a Helm chart, else empty.
	Source string
	// Cluster is the kubeconfig Secret it deploys with, empty for the local cluster.
	Cluster string
	// Set is the SyncTargetSet that generated it, if one did.
	Set string
}

func rowOf(st *convergev1.SyncTarget, now time.Time) row {
	return row{
		Namespace: st.Namespace, Name: st.Name, State: stateOf(st),
		Ready:    condStatus(st, convergev1.ReadyCondition),
		Health:   condStatus(st, convergev1.HealthyCondition),
		Revision: revisionOf(st, st.Status.LastAppliedRevision),
		LastSync: timeOf(lastSync(st), now),
		Message:  tableMessage(message(st), maxMessage),
		Source:   sourceSummary(st),
		Cluster:  remoteCluster(st),
		Set:      st.Labels[convergev1.SetLabel],
	}
}

// remoteCluster is the name of the kubeconfig Secret a SyncTarget deploys with, or ""
// when it deploys to the cluster the daemon runs in.
func remoteCluster(st *convergev1.SyncTarget) string {
	if st.Spec.KubeConfig == nil {
		return ""
	}
	return st.Spec.KubeConfig.SecretRef.Name
}

// clusterOf is remoteCluster, saying "in-cluster" for the local cluster.
func clusterOf(st *convergev1.SyncTarget) string {
	if c := remoteCluster(st); c != "" {
		return c
	}
	return "in-cluster"
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
	// Sets and Clusters are those of the SyncTargets shown, to filter by.
	Sets, Clusters []string
	Counts         []stateCount
	Total          int
	Rows           []row
	// Groups are Rows grouped, when the filter asks.
	Groups []rowGroup
	Graph  *graph
	// Pages is set when the rows the filter matches take more than one page.
	Pages *pageNav
}

// pageNav says where an overview page is among those of its filter.
type pageNav struct {
	First, Last, Of int    // the rows shown, 1-based, and how many match
	Prev, Next      string // links to the neighbouring pages, "" at an end
}

// pageOf returns the page'th (1-based) pageSize rows of n, and the links around it;
// a page out of range is the nearest one.
func pageOf(r *http.Request, n int) (from, to int, p *pageNav) {
	if n <= pageSize {
		return 0, n, nil
	}
	last := (n + pageSize - 1) / pageSize
	page, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil || page < 1 {
		page = 1
	}
	page = min(page, last)
	from, to = (page-1)*pageSize, min(page*pageSize, n)
	p = &pageNav{First: from + 1, Last: to, Of: n}
	link := func(page int) string {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(page))
		return "?" + q.Encode()
	}
	if page > 1 {
		p.Prev = link(page - 1)
	}
	if page < last {
		p.Next = link(page + 1)
	}
	return from, to, p
}

func (s *Server) overview(r *http.Request) (*overview, error) {
	targets, err := s.store.Targets(r.Context())
	if err != nil {
		return nil, err
	}
	targets = s.visible(r.Context(), targets)
	sortTargets(targets)
	f := filterOf(r)
	now := s.opts.Now()
	counts := map[string]int{}
	namespaces, sets, clusters := map[string]bool{}, map[string]bool{}, map[string]bool{}
	v := &overview{Filter: f, Total: len(targets)}
	var shown []*convergev1.SyncTarget
	anyState := f
	anyState.State = ""
	for i := range targets {
		st := &targets[i]
		state := stateOf(st)
		namespaces[st.Namespace] = true
		clusters[clusterOf(st)] = true
		if set := st.Labels[convergev1.SetLabel]; set != "" {
			sets[set] = true
		}
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
	v.Namespaces, v.Sets, v.Clusters = sortedKeys(namespaces), sortedKeys(sets), sortedKeys(clusters)
	v.Graph = layoutGraph(shown)
	from, to, p := pageOf(r, len(v.Rows))
	v.Rows, v.Pages = v.Rows[from:to], p
	if f.Group != "" {
		v.Groups = groupRows(v.Rows, f.Group)
	}
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

// serveRow is one row of the overview; 204 when the target is gone, filtered out or
// not the user's to read.
func (s *Server) serveRow(w http.ResponseWriter, r *http.Request) {
	st, err := s.readTarget(r.Context(), "get", keyOf(r))
	var denied *deniedError
	switch {
	case errors.Is(err, errNotFound), errors.As(err, &denied):
		w.WriteHeader(http.StatusNoContent)
		return
	case err != nil:
		s.fail(w, r, err)
		return
	case !filterOf(r).matches(st, stateOf(st)):
		w.WriteHeader(http.StatusNoContent)
		return
	}
	s.render(w, r, "row", rowOf(st, s.opts.Now()))
}
