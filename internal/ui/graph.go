package ui

import (
	"fmt"
	"sort"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxGraphNodes bounds the dependsOn graph drawn; a bigger one asks for a filter.
const maxGraphNodes = 200

// Geometry of the graph, in SVG user units.
const (
	graphColumn = 230
	graphNodeW  = 190
	graphNodeH  = 28
	graphRow    = 40
	graphPad    = 8
)

// graphNode is one SyncTarget drawn as a box; Missing when it is named by a dependsOn
// but does not exist (or is filtered out).
type graphNode struct {
	Key, Label, State string
	Href              string
	X, Y              int
	Missing           bool
}

// graphEdge goes from a dependency to the SyncTarget that depends on it, as a path.
type graphEdge struct {
	Path string
}

// graph is the dependsOn graph, laid out in layers: a SyncTarget is one column right
// of the rightmost of its dependencies.
type graph struct {
	Nodes         []graphNode
	Edges         []graphEdge
	Width, Height int
	// TooBig is the node count when it exceeds maxGraphNodes (nothing is drawn).
	TooBig int
}

// layoutGraph lays out the SyncTargets that depend on others or that others depend on;
// nil when there are none.
func layoutGraph(targets []*convergev1.SyncTarget) *graph {
	byKey := map[string]*convergev1.SyncTarget{}
	for _, st := range targets {
		byKey[st.Namespace+"/"+st.Name] = st
	}
	deps := map[string][]string{}
	involved := map[string]bool{}
	for _, st := range targets {
		key := st.Namespace + "/" + st.Name
		for _, d := range st.Spec.DependsOn {
			ns := d.Namespace
			if ns == "" {
				ns = st.Namespace
			}
			dk := ns + "/" + d.Name
			deps[key] = append(deps[key], dk)
			involved[key], involved[dk] = true, true
		}
	}
	if len(involved) == 0 {
		return nil
	}
	if len(involved) > maxGraphNodes {
		return &graph{TooBig: len(involved)}
	}
	layers := layerOf(involved, deps)
	return place(layers, deps, byKey)
}

// layerOf puts every key one layer right of its deepest dependency (cycles are cut).
func layerOf(involved map[string]bool, deps map[string][]string) [][]string {
	layer := map[string]int{}
	visiting := map[string]bool{}
	var depth func(string) int
	depth = func(k string) int {
		if l, ok := layer[k]; ok {
			return l
		}
		if visiting[k] {
			return 0
		}
		visiting[k] = true
		l := 0
		for _, d := range deps[k] {
			l = max(l, depth(d)+1)
		}
		visiting[k] = false
		layer[k] = l
		return l
	}
	var layers [][]string
	for _, k := range sortedKeys(involved) {
		l := depth(k)
		for len(layers) <= l {
			layers = append(layers, nil)
		}
		layers[l] = append(layers[l], k)
	}
	return layers
}

// place gives each node its position and each edge its path; within a column nodes
// are ordered by the mean row of their dependencies, then by name.
func place(layers [][]string, deps map[string][]string, byKey map[string]*convergev1.SyncTarget) *graph {
	g := &graph{}
	pos := map[string][2]int{}
	rowOf := map[string]float64{}
	for col, keys := range layers {
		sort.SliceStable(keys, func(i, j int) bool { return meanRow(deps[keys[i]], rowOf) < meanRow(deps[keys[j]], rowOf) })
		for i, k := range keys {
			rowOf[k] = float64(i)
			x, y := graphPad+col*graphColumn, graphPad+i*graphRow
			pos[k] = [2]int{x, y}
			g.Nodes = append(g.Nodes, nodeOf(k, byKey[k], x, y))
			g.Height = max(g.Height, y+graphNodeH+graphPad)
		}
		g.Width = graphPad + col*graphColumn + graphNodeW + graphPad
	}
	for _, k := range sortedKeys(deps) {
		to := pos[k]
		for _, d := range deps[k] {
			from := pos[d]
			x1, y1 := from[0]+graphNodeW, from[1]+graphNodeH/2
			x2, y2 := to[0]-4, to[1]+graphNodeH/2
			mid := (x1 + x2) / 2
			g.Edges = append(g.Edges, graphEdge{Path: fmt.Sprintf("M%d %dC%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2, y2)})
		}
	}
	return g
}

func meanRow(deps []string, rowOf map[string]float64) float64 {
	if len(deps) == 0 {
		return 0
	}
	sum := 0.0
	for _, d := range deps {
		sum += rowOf[d]
	}
	return sum / float64(len(deps))
}

func nodeOf(key string, st *convergev1.SyncTarget, x, y int) graphNode {
	n := graphNode{Key: key, Label: shorten(key, 26), X: x, Y: y}
	if st == nil {
		n.Missing, n.State = true, "Missing"
		return n
	}
	n.State = stateOf(st)
	n.Href = "/targets/" + key
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
