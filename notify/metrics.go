package notify

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Metrics of notifications, served on the daemon's metrics endpoint.
var (
	notificationsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_notifications_total",
		Help: "Notifications by result: delivered, failed (given up or refused), deduplicated (identical to the previous one, not sent), skipped (not sent by decision, e.g. a repository on another host than the Notifier's forge).",
	}, []string{"result"})
	notificationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_notification_failures_total",
		Help: "Notifications given up on after their retries, or refused by the provider, by provider type.",
	}, []string{"provider"})
	notificationRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "converge_notification_retries_total",
		Help: "Notification requests retried after a 429, a 5xx or no answer, by provider type.",
	}, []string{"provider"})
	queueDepth = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "converge_notification_queue_depth",
		Help: "Notifications waiting to be delivered, over every Notifier.",
	})
	readyDesc = prometheus.NewDesc("converge_synctarget_ready",
		"1 when a SyncTarget's Ready condition is True, else 0; reason is the condition's reason.",
		[]string{"namespace", "name", "reason"}, nil)
)

// ready exports converge_synctarget_ready once SetupWithManager gave it the cache.
var ready = &readyCollector{}

func init() {
	metrics.Registry.MustRegister(notificationsTotal, notificationFailures, notificationRetries, queueDepth, ready)
}

// readyCollector exports the Ready condition of every SyncTarget in the manager's cache,
// at scrape time, so that alerts can say which target has not been Ready for how long
// and why (FetchFailed, HealthCheckFailed, ...).
type readyCollector struct {
	reader atomic.Pointer[client.Reader]
}

// Describe sends the one descriptor.
func (c *readyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- readyDesc }

// Collect lists SyncTargets from the cache (no API request).
func (c *readyCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.reader.Load()
	if r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var list convergev1.SyncTargetList
	if err := (*r).List(ctx, &list); err != nil {
		return
	}
	for i := range list.Items {
		st := &list.Items[i]
		v, reason := 0.0, "Unknown"
		if cond := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition); cond != nil {
			reason = cond.Reason
			if cond.Status == metav1.ConditionTrue {
				v = 1
			}
		}
		ch <- prometheus.MustNewConstMetric(readyDesc, prometheus.GaugeValue, v, st.Namespace, st.Name, reason)
	}
}
