package health

import (
	"fmt"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// computeStatus reads the status of one live object: with the CEL rule of its kind when
// there is one, otherwise with kstatus. The message is bounded and built only from
// kstatus results, condition reasons and messages, or the rule's own expressions.
func computeStatus(u *unstructured.Unstructured, rule *exprRule) (Status, string) {
	if rule != nil {
		if s, msg, ok := genericStatus(u); ok {
			return s, truncate(msg, maxMessage)
		}
		s, msg := rule.evaluate(u.Object)
		return s, truncate(msg, maxMessage)
	}
	res, err := kstatus.Compute(u)
	if err != nil {
		return Unknown, truncate("cannot compute status: "+err.Error(), maxMessage)
	}
	return fromKstatus(res.Status), truncate(kstatusMessage(res), maxMessage)
}

// genericStatus applies the checks kstatus makes of every kind before its kind-specific
// rules, so that CEL rules are not asked about an object being deleted or a status its
// controller has not updated for the latest generation yet.
func genericStatus(u *unstructured.Unstructured) (Status, string, bool) {
	if u.GetDeletionTimestamp() != nil {
		return Terminating, "Resource scheduled for deletion", true
	}
	gen := u.GetGeneration()
	observed, found, err := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	if err == nil && found && gen != 0 && observed != gen {
		return InProgress, fmt.Sprintf("%s generation is %d, but latest observed generation is %d", u.GetKind(), gen, observed), true
	}
	return "", "", false
}

func fromKstatus(s kstatus.Status) Status {
	switch s {
	case kstatus.CurrentStatus:
		return Current
	case kstatus.InProgressStatus:
		return InProgress
	case kstatus.FailedStatus:
		return Failed
	case kstatus.TerminatingStatus:
		return Terminating
	case kstatus.NotFoundStatus:
		return NotFound
	default:
		return Unknown
	}
}

// kstatusMessage is the kstatus message followed by the reason (and message, when it
// adds something) of the Stalled or Reconciling condition kstatus derived, e.g.
// "Progress deadline exceeded (ProgressDeadlineExceeded: ReplicaSet "web-5d" has timed
// out progressing.)".
func kstatusMessage(res *kstatus.Result) string {
	msg := res.Message
	for _, c := range res.Conditions {
		if c.Status != corev1.ConditionTrue || c.Reason == "" ||
			(c.Type != kstatus.ConditionStalled && c.Type != kstatus.ConditionReconciling) {
			continue
		}
		detail := c.Reason
		if c.Message != "" && c.Message != res.Message {
			detail += ": " + c.Message
		}
		if msg == "" {
			return detail
		}
		return msg + " (" + detail + ")"
	}
	return msg
}

// discountStale turns a Failed verdict into InProgress when every condition that says so
// was last written before since, the start of the apply being waited for: it describes
// the rollout before this apply, which the object's controller has not re-judged yet. A
// Deployment rolled back from a revision that hit its progress deadline keeps
// Progressing=False (ProgressDeadlineExceeded) until the rollback completes.
func discountStale(u *unstructured.Unstructured, st Status, msg string, since time.Time) (Status, string) {
	if st != Failed || since.IsZero() {
		return st, msg
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var newest time.Time
	failing := 0
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		bad := (status == "False" && (typ == "Ready" || typ == "Progressing" || typ == "Available")) ||
			(status == "True" && (typ == "Stalled" || typ == "Failed"))
		if !bad {
			continue
		}
		failing++
		for _, key := range []string{"lastUpdateTime", "lastTransitionTime"} {
			if v, ok := m[key].(string); ok {
				if t, err := time.Parse(time.RFC3339, v); err == nil && t.After(newest) {
					newest = t
				}
			}
		}
	}
	// Condition times have a resolution of one second: one written in the second the
	// apply began may predate it, and is taken as stale. A controller needs longer than
	// that to judge a new spec failed (a progress deadline is at least a second).
	if failing == 0 || newest.IsZero() || newest.After(since) {
		return st, msg
	}
	return InProgress, truncate("waiting for a status newer than this apply; last: "+msg, maxMessage)
}
