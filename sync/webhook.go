package sync

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// repoURLIndex indexes SyncTargets by the normalized URL of their repository.
const repoURLIndex = ".spec.source.normalizedURL"

// Webhooks connects the push webhook receiver to the pollers: it finds the SyncTargets
// following a repository, with the token of their webhookSecretRef, and triggers an
// immediate poll of their sources; a new revision then wakes them. The scheduler
// coalesces a burst of pushes into at most one more poll per source.
type Webhooks struct {
	// Reader lists SyncTargets (from the manager's cache) and reads their Secrets.
	Reader  client.Reader
	Fetcher *GitFetcher
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
		src, err := w.Fetcher.Source(ctx, st)
		if err != nil {
			continue
		}
		out = append(out, sources.WebhookTarget{
			Key:    src.Key(),
			Secret: secret.Data["token"],
			Name:   client.ObjectKeyFromObject(st).String(),
		})
	}
	return out, nil
}

// Trigger implements sources.Triggerer.
func (w *Webhooks) Trigger(key sources.Key) error {
	return w.Fetcher.Scheduler.Trigger(key)
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
