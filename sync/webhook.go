package sync

import (
	"context"
	"fmt"
	gosync "sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
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
//
// The receiver answers anyone who can reach it, so a request must not cost API requests:
// tokens are read once per Secret and TokenTTL whatever the number of requests (a read that
// failed too), and a target's source key, which may need its credentials Secret, is looked up
// only once the target's token signed the request, then also kept for TokenTTL.
type Webhooks struct {
	// Reader lists SyncTargets (from the manager's cache) and reads their Secrets.
	Reader  client.Reader
	Fetcher *GitFetcher
	// TokenTTL is how long a webhook token, or a source key, is used before it is read again
	// (default DefaultWebhookTokenTTL): a rotated token is accepted, and the old one refused,
	// within TokenTTL.
	TokenTTL time.Duration
	// Clock times TokenTTL (default: the real clock).
	Clock clock.PassiveClock

	init   gosync.Once
	tokens *ttlCache[[]byte]      // by Secret namespace/name
	keys   *ttlCache[sources.Key] // by SyncTarget namespace/name, UID and generation
}

func (w *Webhooks) caches() {
	w.init.Do(func() {
		ttl, clk := w.TokenTTL, w.Clock
		if ttl <= 0 {
			ttl = DefaultWebhookTokenTTL
		}
		if clk == nil {
			clk = clock.RealClock{}
		}
		w.tokens = newTTLCache[[]byte](ttl, clk)
		w.keys = newTTLCache[sources.Key](ttl, clk)
	})
}

// TargetsForRepo implements sources.WebhookTargets.
func (w *Webhooks) TargetsForRepo(ctx context.Context, repo string) ([]sources.WebhookTarget, error) {
	w.caches()
	list := &convergev1.SyncTargetList{}
	// The SyncTargets are only read: no deep copy of each, which would make a followed
	// repository slower to refuse than an unknown one.
	if err := w.Reader.List(ctx, list, client.MatchingFields{repoURLIndex: repo}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []sources.WebhookTarget
	tokens := map[client.ObjectKey][]byte{} // targets often share one Secret
	for i := range list.Items {
		st := &list.Items[i]
		ref := st.Spec.Source.WebhookSecretRef
		if ref == nil || st.Spec.Suspend {
			continue
		}
		secret := client.ObjectKey{Namespace: st.Namespace, Name: ref.Name}
		token, ok := tokens[secret]
		if !ok {
			token, _ = w.tokens.get(ctx, secret.String(), func(ctx context.Context) ([]byte, error) { return w.readToken(ctx, secret) })
			tokens[secret] = token
		}
		if len(token) == 0 {
			continue // a target whose secret cannot be read is never triggered
		}
		out = append(out, sources.WebhookTarget{
			SourceKey: w.sourceKey(st),
			Secret:    token,
			Name:      client.ObjectKeyFromObject(st).String(),
		})
	}
	return out, nil
}

// readToken reads the token of a webhook Secret.
func (w *Webhooks) readToken(ctx context.Context, key client.ObjectKey) ([]byte, error) {
	secret := &corev1.Secret{}
	if err := w.Reader.Get(ctx, key, secret); err != nil {
		return nil, err
	}
	return secret.Data["token"], nil
}

// sourceKey looks the key of the SyncTarget's source up, reading its credentials; it is
// looked up again when the SyncTarget's spec changes, or after TokenTTL for its credentials.
func (w *Webhooks) sourceKey(st *convergev1.SyncTarget) func(context.Context) (sources.Key, error) {
	return func(ctx context.Context) (sources.Key, error) {
		id := fmt.Sprintf("%s/%s/%s/%d", st.Namespace, st.Name, st.UID, st.Generation)
		return w.keys.get(ctx, id, func(ctx context.Context) (sources.Key, error) {
			src, err := w.Fetcher.Source(ctx, st)
			if err != nil {
				return "", err
			}
			return src.Key(), nil
		})
	}
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
