package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/internal/tree"
)

// Geometry and bounds of a SyncTarget's resource graph, in SVG user units.
const (
	rgColumn = 250
	rgNodeW  = 214
	rgNodeH  = 30
	rgRow    = 38
	rgPad    = 8
	// rgCollapseAt: a kind with more objects in a namespace starts collapsed (its objects
	// not Current stay drawn); a smaller one starts open.
	rgCollapseAt = 12
	// rgMaxNodes caps the nodes drawn; the rest are left out, said.
	rgMaxNodes = 2500
)

// rgNode is one box of the resource graph.
type rgNode struct {
	X, Y  int
	Label string
	// Kind is drawn small above the label.
	Kind  string
	Class string
	Href  string
	Title string
}

// resourceGraph is a SyncTarget, the kinds of its objects, its objects and what they
// own, drawn left to right.
type resourceGraph struct {
	Namespace, Name string
	Nodes           []rgNode
	Edges           []graphEdge
	Width, Height   int
	Total           int
	Counts          map[health.Status]int
	Notes           []string
	Error           string
	// Src is where the page reads itself again (live), with its open and folded kinds.
	Src string
}

// rgVertex is a node and what hangs right of it, before layout.
type rgVertex struct {
	node     rgNode
	children []*rgVertex
}

// graphState is which kinds the user opened (large ones) or folded (small ones).
type graphState struct {
	open, fold []string
}

func graphStateOf(q url.Values) graphState {
	split := func(s string) []string {
		if s == "" {
			return nil
		}
		return strings.Split(s, ",")
	}
	return graphState{open: split(q.Get("open")), fold: split(q.Get("fold"))}
}

// isOpen says whether the kind group key of n objects is drawn open.
func (g graphState) isOpen(key string, n int) bool {
	if n > rgCollapseAt {
		return slices.Contains(g.open, key)
	}
	return !slices.Contains(g.fold, key)
}

// toggled is the query that draws the kind group key of n objects the other way.
func (g graphState) toggled(key string, n int) string {
	open, fold := slices.Clone(g.open), slices.Clone(g.fold)
	flip := func(list []string) []string {
		if i := slices.Index(list, key); i >= 0 {
			return slices.Delete(list, i, i+1)
		}
		return append(list, key)
	}
	if n > rgCollapseAt {
		open = flip(open)
	} else {
		fold = flip(fold)
	}
	return g.with(open, fold)
}

func (g graphState) query() string { return g.with(g.open, g.fold) }

func (graphState) with(open, fold []string) string {
	q := url.Values{}
	if len(open) > 0 {
		q.Set("open", strings.Join(open, ","))
	}
	if len(fold) > 0 {
		q.Set("fold", strings.Join(fold, ","))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

// serveGraph draws a SyncTarget's resource graph: its objects by kind and what they own
// (ReplicaSets, Pods, Jobs, EndpointSlices), with live health on every node, read with
// the user's rights (in the cluster: each object's get and each kind's list, asked
// first). A kind with many objects starts collapsed, its objects that are not Current
// still drawn, so a failing one is never hidden; a node of a kind opens or folds it.
// ?fragment=1 is the graph alone, which the page reads again as the cluster changes.
func (s *Server) serveGraph(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	st, err := s.readTarget(ctx, "get", keyOf(r))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	state := graphStateOf(r.URL.Query())
	g := s.resourceGraph(ctx, st, state)
	name := "graph"
	if r.URL.Query().Get("fragment") != "" {
		name = "rgraph"
	}
	s.render(w, r, name, g)
}

// resourceGraph reads and lays out st's graph.
func (s *Server) resourceGraph(ctx context.Context, st *convergev1.SyncTarget, state graphState) *resourceGraph {
	base := "/targets/" + st.Namespace + "/" + st.Name
	g := &resourceGraph{Namespace: st.Namespace, Name: st.Name, Src: base + "/graph" + addQuery(state.query(), "fragment=1")}
	if s.client == nil {
		g.Error = "no cluster client"
		return g
	}
	t, c, release, why := s.treeAndClient(ctx, st)
	if t == nil {
		g.Error = why
		return g
	}
	defer release()
	g.Total, g.Counts = t.Total, t.Counts
	var nodes []tree.Node
	for _, ns := range t.Namespaces {
		for _, k := range ns.Kinds {
			nodes = append(nodes, k.Objects...)
		}
	}
	var may tree.MayList
	if s.opts.InCluster != nil {
		may = func(ctx context.Context, gvk schema.GroupVersionKind, ns string) bool {
			m, err := s.client.RESTMapper().RESTMapping(gvk.GroupKind(), gvk.Version)
			return err == nil && s.authorize(ctx, "list", gvk.Group, m.Resource.Resource, ns, "") == nil
		}
	}
	ix := tree.LoadOwnedIndex(ctx, c, nodes, may)
	root := &rgVertex{node: rgNode{Kind: "SyncTarget", Label: st.Name, Class: "target " + strings.ToLower(stateOf(st)),
		Href: base, Title: st.Namespace + "/" + st.Name + ": " + stateOf(st)}}
	budget := rgMaxNodes - 1
	for _, ns := range t.Namespaces {
		for _, k := range ns.Kinds {
			if budget <= 0 {
				break
			}
			root.children = append(root.children, s.kindVertex(base, ns.Namespace, k, state, ix, &budget))
		}
	}
	if budget <= 0 {
		g.Notes = append(g.Notes, fmt.Sprintf("only the first %d nodes are drawn: open fewer kinds", rgMaxNodes))
	}
	g.Notes = append(g.Notes, ix.Notes...)
	layoutResources(g, root)
	return g
}

// kindVertex is the node of one kind in one namespace and, open, its objects; folded,
// only those not Current, and one node counting the others.
func (s *Server) kindVertex(base, ns string, k tree.KindGroup, state graphState, ix *tree.OwnedIndex, budget *int) *rgVertex {
	key := ns + "/" + k.Kind
	n := len(k.Objects)
	open := state.isOpen(key, n)
	verb := "fold"
	if !open {
		verb = "open"
	}
	label := fmt.Sprintf("%s ×%d", k.Kind, n)
	v := &rgVertex{node: rgNode{Kind: nsLabel(ns), Label: label, Class: "kind " + worstClass(k.Objects),
		Href: base + "/graph" + state.toggled(key, n), Title: label + " in " + nsLabel(ns) + ": " + verb}}
	*budget--
	hidden := 0
	for _, o := range k.Objects {
		if !open && o.Status == health.Current {
			hidden++
			continue
		}
		if *budget <= 0 {
			return v
		}
		*budget--
		ov := &rgVertex{node: rgNode{Kind: k.Kind, Label: o.Name, Class: healthClassOf(o.Status),
			Href: base + "/objects/" + o.ID, Title: objectTitle(k.Kind, o.Name, o.Status, o.Message)}}
		ov.children = ownedVertices(ix.Of(o), budget)
		v.children = append(v.children, ov)
	}
	if hidden > 0 && *budget > 0 {
		*budget--
		v.children = append(v.children, &rgVertex{node: rgNode{Kind: k.Kind, Label: fmt.Sprintf("%d more Current", hidden),
			Class: "more", Href: base + "/graph" + state.toggled(key, n), Title: "open " + label}})
	}
	return v
}

// ownedVertices are owned objects and what they own.
func ownedVertices(owned []tree.Owned, budget *int) []*rgVertex {
	var out []*rgVertex
	for _, o := range owned {
		if *budget <= 0 {
			return out
		}
		*budget--
		v := &rgVertex{node: rgNode{Kind: o.Kind, Label: o.Name, Class: healthClassOf(o.Status),
			Title: objectTitle(o.Kind, o.Name, o.Status, o.Message)}}
		v.children = ownedVertices(o.Owned, budget)
		out = append(out, v)
	}
	return out
}

func objectTitle(kind, name string, st health.Status, msg string) string {
	t := kind + " " + name + ": " + string(st)
	if msg != "" {
		t += " (" + msg + ")"
	}
	return t
}

// healthClassOf is the class of a node of status st.
func healthClassOf(st health.Status) string {
	return "h-" + healthClass(st)
}

// worstClass is the class of the least healthy of objs.
func worstClass(objs []tree.Node) string {
	rank := map[health.Status]int{health.Failed: 4, health.NotFound: 4, health.InProgress: 3, health.Terminating: 3, health.Unknown: 2}
	worst := health.Current
	for _, o := range objs {
		if rank[o.Status] > rank[worst] {
			worst = o.Status
		}
	}
	return healthClassOf(worst)
}

// layoutResources places the vertices left to right, one row per leaf, a node level with
// its first child, and draws an edge from each node to each of its children.
func layoutResources(g *resourceGraph, root *rgVertex) {
	row := 0
	var place func(v *rgVertex, col int) int
	place = func(v *rgVertex, col int) int {
		var ys []int
		for _, c := range v.children {
			ys = append(ys, place(c, col+1))
		}
		y := rgPad + row*rgRow
		if len(ys) > 0 {
			y = ys[0]
		} else {
			row++
		}
		v.node.X, v.node.Y = rgPad+col*rgColumn, y
		g.Nodes = append(g.Nodes, v.node)
		g.Width = max(g.Width, v.node.X+rgNodeW+rgPad)
		for _, cy := range ys {
			x1, y1 := v.node.X+rgNodeW, y+rgNodeH/2
			x2, y2 := v.node.X+rgColumn-2, cy+rgNodeH/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, graphEdge{Path: fmt.Sprintf("M%d %dC%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2, y2)})
		}
		return y
	}
	place(root, 0)
	g.Height = rgPad + max(row, 1)*rgRow
}

// addQuery appends a parameter to a query string ("" or "?a=b").
func addQuery(q, param string) string {
	if q == "" {
		return "?" + param
	}
	return q + "&" + param
}
