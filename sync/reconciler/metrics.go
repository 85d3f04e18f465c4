package reconciler

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics of the daemon, served with controller-runtime's (reconcile totals, durations
// and errors per controller) on the metrics endpoint.
var (
	syncTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_sync_total",
		Help: "Sync attempts of a revision, by result (Succeeded, Failed, RolledBack).",
	}, []string{"result"})
	syncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "converge_sync_duration_seconds",
		Help:    "Duration of a sync attempt from fetch to recorded result, by result.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 14),
	}, []string{"result"})
	phaseDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "converge_sync_phase_duration_seconds",
		Help:    "Duration of each phase of a deploy: checkout, render, ownership (reading what the cluster holds), apply, prune, health.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
	}, []string{"phase"})
	objectsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_objects_total",
		Help: "Objects written by syncs, by action (created, configured, pruned, restored).",
	}, []string{"action"})
	seenToHealthy = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "converge_revision_to_healthy_seconds",
		Help:    "Time from a revision being first fetched to it being applied and healthy, once per revision.",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 14),
	})
	commitToHealthy = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "converge_commit_to_healthy_seconds",
		Help:    "Time from a revision's commit (its committer time) to it being applied and healthy, once per revision.",
		Buckets: prometheus.ExponentialBuckets(0.1, 2, 16),
	})
)

func init() {
	metrics.Registry.MustRegister(syncTotal, syncDuration, phaseDuration, objectsTotal, seenToHealthy, commitToHealthy,
		renderWorkerStops)
}

var renderWorkerStops = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "converge_render_worker_stops_total",
	Help: "Render workers killed or lost during a render, by the SyncTarget's namespace and why (memory, timeout, stack, crash).",
}, []string{"namespace", "reason"})

// RenderWorkerStopped counts a render worker stopped during a render of namespace's
// (render.PoolOptions.Stopped).
func RenderWorkerStopped(namespace, reason string) {
	renderWorkerStops.WithLabelValues(namespace, reason).Inc()
}
