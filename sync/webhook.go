package sync

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// repoURLIndex indexes SyncTargets by the normalized URL of their repository.
const repoURLIndex = ".spec.source.normalizedURL"

// ErrQueueFull is returned by Trigger when the reconciler is too far behind; the webhook
// answers 503 and the sender retries.
var ErrQueueFull = errors.New("trigger queue is full")

// Webhooks connects the push webhook receiver to the reconciler: it finds the SyncTargets
// following a repository (with the token of their webhookSecretRef) and wakes them.
type Webhooks struct {
	// Reader lists SyncTargets (from the manager's cache) and reads their Secrets.
	Reader client.Reader
	// Events carries the wake-ups to the controller.
	Events chan event.GenericEvent
}

// TargetsForRepo implements sources.WebhookTargets.
func (w *Webhooks) TargetsForRepo(ctx context.Context, repo string) ([]sources.WebhookTarget, error) {
	list := &convergev1.SyncTargetList{}
	if err := w.Reader.List(ctx, list, client.MatchingFields{repoURLIndex: repo}); err != nil {
		return nil, err
	}
	var out []sources.WebhookTarget
	for i := range list.Items {
		st := &list.Items[i]
		ref := st.Spec.Source.WebhookSecretRef
		if ref == nil || st.Spec.Suspend {
			continue
		}
		secret := &corev1.Secret{}
		if err := w.Reader.Get(ctx, client.ObjectKey{Namespace: st.Namespace, Name: ref.Name}, secret); err != nil {
			continue // a target whose secret cannot be read is never triggered
		}
		out = append(out, sources.WebhookTarget{
			Key:    webhookKey(st),
			Secret: secret.Data["token"],
			Name:   client.ObjectKeyFromObject(st).String(),
		})
	}
	return out, nil
}

// webhookKey carries the SyncTarget's own name: each target validated by its own secret
// is woken, and the controller's queue coalesces a burst into one reconcile.
func webhookKey(st *convergev1.SyncTarget) sources.Key {
	return sources.Key(client.ObjectKeyFromObject(st).String())
}

// Trigger implements sources.Triggerer.
func (w *Webhooks) Trigger(key sources.Key) error {
	ns, name, ok := cutKey(string(key))
	if !ok {
		return fmt.Errorf("invalid trigger key %q", key)
	}
	st := &convergev1.SyncTarget{}
	st.Namespace, st.Name = ns, name
	select {
	case w.Events <- event.GenericEvent{Object: st}:
		return nil
	default:
		return ErrQueueFull
	}
}

func cutKey(k string) (string, string, bool) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i], k[i+1:], k[:i] != "" && k[i+1:] != ""
		}
	}
	return "", "", false
}

// normalizedURL is the index function of repoURLIndex.
func normalizedURL(o client.Object) []string {
	st, ok := o.(*convergev1.SyncTarget)
	if !ok {
		return nil
	}
	u, err := sources.NormalizeURL(st.Spec.Source.URL)
	if err != nil {
		return nil
	}
	return []string{u}
}
