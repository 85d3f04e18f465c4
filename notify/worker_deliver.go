package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// The results of an item, as the converge_notifications_total metric counts them.
const (
	resultDelivered    = "delivered"
	resultFailed       = "failed"
	resultDeduplicated = "deduplicated"
	resultSkipped      = "skipped"
)

// TargetSkippedReason is the reason of a Notifier's Ready condition (False) when it did
// not send a notification about a SyncTarget by decision, e.g. a commit status for a
// repository on another host than the Notifier's forge.
const TargetSkippedReason = "TargetSkipped"

// process delivers one item (or only marks it seen), retrying with backoff, and records
// the cursor. When ctx ends before the item is done, nothing is recorded: the next
// instance derives it again and delivers it.
func (w *worker) process(ctx context.Context, n *convergev1.Notifier, it item) {
	cur := w.cursor(it.target)
	result, digest, err := w.deliver(ctx, n, it, cur.Digest)
	if ctx.Err() != nil {
		return
	}
	it.advance(&cur)
	if digest != "" {
		cur.Digest = digest
	}
	w.setCursor(cur)
	w.written = false
	w.record(ctx, n, it, result, err)
	if result != "" {
		notificationsTotal.WithLabelValues(result).Inc()
	}
	w.flush(ctx, n)
}

// record counts what became of an item and says so on Ready.
func (w *worker) record(ctx context.Context, n *convergev1.Notifier, it item, result string, err error) {
	what := fmt.Sprintf("%s of %s/%s", it.msg.Event, it.msg.Namespace, it.target)
	switch result {
	case resultDelivered:
		w.status.Delivered++
		w.setReady(n, metav1.ConditionTrue, convergev1.DeliveredReason, "delivered "+what)
	case resultSkipped:
		w.setReady(n, metav1.ConditionFalse, TargetSkippedReason, fmt.Sprintf("%s: %v", what, err))
		ctrl.LoggerFrom(ctx).Info("skipped a notification", "target", it.target, "event", it.msg.Event, "reason", err.Error())
	case resultFailed:
		w.status.Failed++
		notificationFailures.WithLabelValues(string(n.Spec.Provider.Type)).Inc()
		w.setReady(n, metav1.ConditionFalse, convergev1.DeliveryFailedReason, fmt.Sprintf("gave up on %s: %v", what, err))
		ctrl.LoggerFrom(ctx).Info("gave up on a notification", "target", it.target, "event", it.msg.Event, "error", err.Error())
	}
}

// deliver sends it unless it is only to be marked seen, has nothing to say to this
// provider, is skipped, or is identical to the last message sent for its target. result
// is one of the results above, or "" (nothing sent).
func (w *worker) deliver(ctx context.Context, n *convergev1.Notifier, it item, lastDigest string) (result, digest string, err error) {
	if !it.send {
		return "", "", nil
	}
	req, err := w.request(ctx, n, it)
	var skip *skipError
	switch {
	case errors.As(err, &skip):
		return resultSkipped, "", err
	case err != nil:
		return resultFailed, "", err
	case req == nil:
		return "", "", nil
	}
	digest = req.digest()
	if digest == lastDigest {
		return resultDeduplicated, digest, nil
	}
	if err := w.send(ctx, n, it, req); err != nil {
		if ctx.Err() != nil {
			return "", "", ctx.Err()
		}
		return resultFailed, "", err
	}
	return resultDelivered, digest, nil
}

// send sends req within the Notifier's rate limit towards its host, retrying with backoff
// what may succeed later, at most MaxTries times.
func (w *worker) send(ctx context.Context, n *convergev1.Notifier, it item, req *request) error {
	kind := string(n.Spec.Provider.Type)
	for try := 1; ; try++ {
		if !w.sleep(ctx, w.r.limits.delay(w.key, req.url, w.r.opts.Clock.Now())) {
			return ctx.Err()
		}
		err := send(ctx, w.r.opts.HTTPClient, req, kind, w.r.opts.Clock.Now())
		if err == nil {
			return nil
		}
		var se *sendError
		if !errors.As(err, &se) || !se.retryable || try >= w.r.opts.MaxTries {
			if se != nil && se.retryable {
				err = fmt.Errorf("%w (after %d tries)", err, try)
			}
			return err
		}
		notificationRetries.WithLabelValues(kind).Inc()
		wait := backoff(try, w.r.opts.BaseBackoff, w.r.opts.MaxBackoff, se.retryAfter, w.r.opts.Jitter)
		ctrl.LoggerFrom(ctx).V(1).Info("retrying a notification", "target", it.target, "error", err.Error(), "after", wait)
		if !w.sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

// request builds the provider's request: the message text and the credentials. The
// summary template is checked again before it is executed.
func (w *worker) request(ctx context.Context, n *convergev1.Notifier, it item) (*request, error) {
	sum, err := parseSummary(n.Spec.Summary)
	if err != nil {
		return nil, err
	}
	txt, err := sum.text(ctx, it.msg)
	if err != nil {
		return nil, err
	}
	creds, err := w.credentials(ctx, n)
	if err != nil {
		return nil, err
	}
	return buildRequest(n.Spec.Provider, creds, notification{msg: it.msg, text: txt, sourceURL: it.source})
}

// credentials reads the Notifier's Secret by name (Secrets are never cached or listed).
// Errors name the Secret and the problem, never a value.
func (w *worker) credentials(ctx context.Context, n *convergev1.Notifier) (credentials, error) {
	ref := n.Spec.Provider.SecretRef
	if ref == nil {
		return credentials{}, nil
	}
	var s corev1.Secret
	if err := w.r.APIReader.Get(ctx, types.NamespacedName{Namespace: n.Namespace, Name: ref.Name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return credentials{}, fmt.Errorf("secret %q not found", ref.Name)
		}
		return credentials{}, fmt.Errorf("reading secret %q: %s", ref.Name, apierrors.ReasonForError(err))
	}
	v := func(k string) string { return string(s.Data[k]) }
	return credentials{token: v("token"), username: v("username"), password: v("password"),
		hmacKey: v("hmacKey"), address: v("address")}, nil
}

// sleep waits d on the injected clock; false when ctx ended first.
func (w *worker) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-w.r.opts.Clock.After(d):
		return true
	}
}

// statusPatch is a merge patch that sets every field of the status, empty ones included.
func statusPatch(s convergev1.NotifierStatus) ([]byte, error) {
	return json.Marshal(map[string]any{"status": map[string]any{
		"observedGeneration": s.ObservedGeneration,
		"conditions":         s.Conditions,
		"targets":            s.Targets,
		"delivered":          s.Delivered,
		"failed":             s.Failed,
	}})
}
