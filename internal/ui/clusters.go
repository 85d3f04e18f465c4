package ui

import (
	"context"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	synccluster "github.com/converge-gitops/converge/sync/cluster"
)

const (
	// probeTimeout bounds the question whether a cluster answers.
	probeTimeout = 5 * time.Second
	// probeKept is how long an answer is kept: the page's reloads do not dial again.
	probeKept = 30 * time.Second
)

// clustersPage lists the clusters the SyncTargets a user may see deploy to: the daemon's
// own and each remote one (a kubeconfig Secret of a namespace).
type clustersPage struct {
	Clusters []clusterRow
	// Probed is true when the page asked each cluster whether it answers (converge ui,
	// with the user's own credentials); in the cluster, reachability is read from the
	// SyncTargets' last syncs only.
	Probed bool
}

// clusterRow is one cluster: its SyncTargets and how they stand, whether it answers and
// why not.
type clusterRow struct {
	Name, Namespace string // Name "in-cluster" for the daemon's own
	Href            string // the overview filtered by it
	Targets, Ready  int
	Failing         int
	// LastSuccess is the newest successful sync of its SyncTargets.
	LastSuccess timeView
	// Reachable says whether it answered ("yes", "no", "unknown"), Why what it said.
	Reachable, Why, Version string
}

// probes keeps the answers of the clusters asked.
type probes struct {
	mu   sync.Mutex
	kept map[string]probeAnswer
}

type probeAnswer struct {
	version, err string
	at           time.Time
}

// serveClusters shows each cluster with its SyncTargets.
func (s *Server) serveClusters(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	targets, err := s.store.Targets(ctx)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	tally := tallyClusters(s.visible(ctx, targets), s.opts.Now())
	page := &clustersPage{Probed: s.opts.InCluster == nil}
	for key, row := range tally.rows {
		switch {
		case page.Probed:
			a := s.probe(ctx, key, tally.first[key])
			row.Reachable, row.Version, row.Why = "yes", a.version, ""
			if a.err != "" {
				row.Reachable, row.Why, row.Version = "no", a.err, ""
			}
		case row.Why == "" && tally.succeeded[key]:
			row.Reachable = "yes"
		default:
			row.Reachable = "unknown"
		}
		page.Clusters = append(page.Clusters, *row)
	}
	sort.Slice(page.Clusters, func(i, j int) bool {
		a, b := page.Clusters[i], page.Clusters[j]
		if (a.Namespace == "") != (b.Namespace == "") {
			return a.Namespace == ""
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	s.render(w, r, "clusters", page)
}

// clusterTally is the SyncTargets of each cluster, counted: by "namespace/secret" (the
// daemon's own cluster is "/in-cluster"), the row, a SyncTarget to reach it through and
// whether one ever synced.
type clusterTally struct {
	rows      map[string]*clusterRow
	first     map[string]*convergev1.SyncTarget
	succeeded map[string]bool
}

func tallyClusters(targets []convergev1.SyncTarget, now time.Time) clusterTally {
	t := clusterTally{rows: map[string]*clusterRow{}, first: map[string]*convergev1.SyncTarget{}, succeeded: map[string]bool{}}
	newest := map[string]time.Time{}
	for i := range targets {
		st := &targets[i]
		name, ns := "in-cluster", ""
		if remote := remoteCluster(st); remote != "" {
			name, ns = remote, st.Namespace
		}
		key := ns + "/" + name
		row := t.rows[key]
		if row == nil {
			q := url.Values{"cluster": {name}}
			if ns != "" {
				q.Set("ns", ns)
			}
			row = &clusterRow{Name: name, Namespace: ns, Href: "/?" + q.Encode()}
			t.rows[key], t.first[key] = row, st
		}
		row.Targets++
		switch stateOf(st) {
		case stateReady:
			row.Ready++
		case stateFailed, stateStalled:
			row.Failing++
		}
		for _, h := range st.Status.History {
			if h.Result == convergev1.SyncSucceeded && h.StartedAt.After(newest[key]) {
				newest[key] = h.StartedAt.Time
				row.LastSuccess, t.succeeded[key] = timeOf(h.StartedAt.Time, now), true
			}
		}
		if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition); c != nil &&
			c.Status == "False" && c.Reason == convergev1.ApplyFailedReason && row.Why == "" {
			row.Why = c.Message
		}
	}
	return t
}

// probe asks the cluster st deploys to for its version, with the user's credentials,
// keeping the answer probeKept.
func (s *Server) probe(ctx context.Context, key string, st *convergev1.SyncTarget) probeAnswer {
	now := time.Now()
	s.clusters.mu.Lock()
	a, ok := s.clusters.kept[key]
	s.clusters.mu.Unlock()
	if ok && now.Sub(a.at) < probeKept {
		return a
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	answered := make(chan probeAnswer, 1)
	go func() {
		got := probeAnswer{at: now}
		defer func() { answered <- got }()
		on, release, err := synccluster.ForCaller(ctx, s.client, s.opts.Config, st, true)
		if err != nil {
			got.err = s.explain(err)
			return
		}
		defer release()
		caps, err := on.Capabilities()
		if err != nil {
			got.err = s.explain(err)
			return
		}
		got.version = caps.KubeVersion
	}()
	select {
	case a = <-answered:
	case <-ctx.Done():
		a = probeAnswer{at: now, err: "no answer within " + probeTimeout.String()}
	}
	s.clusters.mu.Lock()
	if s.clusters.kept == nil {
		s.clusters.kept = map[string]probeAnswer{}
	}
	s.clusters.kept[key] = a
	s.clusters.mu.Unlock()
	return a
}
