package webhook

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/target"
)

// RepoURLIndex indexes SyncTargets by the normalized URL of their repository.
const RepoURLIndex = ".spec.source.normalizedURL"

// OCIRepoIndex indexes SyncTargets following an OCI artifact by their normalized
// repository, host[:port]/path (sources.NormalizeOCIRepository of spec.oci.url).
const OCIRepoIndex = ".spec.oci.normalizedRepository"

// Dispatcher connects the push webhook receiver to the pollers: it finds the SyncTargets
// following a repository, with the token of their webhookSecretRef, and triggers an
// immediate poll of their sources; a new revision then wakes them. The scheduler
// coalesces a burst of pushes into at most one more poll per source.
//
// The receiver answers anyone who can reach it, so a request must not cost API requests:
// tokens are read once per Secret and TokenTTL whatever the number of requests (a read that
// failed too), and a target's source key, which may need its credentials Secret, is looked up
// only once the target's token signed the request, then also kept for TokenTTL.
//
// Only the replica that reconciles a SyncTarget (the leader; with shards, the shard whose
// label selector matches it) polls its source, and a webhook may reach any replica: each
// SyncTarget whose token signed the request is therefore also announced through the API
// server, by a patch of its converge.dev/pushedAt annotation (at most one every AnnounceEvery
// per SyncTarget), and the replica reconciling it polls at once.
type Dispatcher struct {
	// Reader reads the Secrets, and lists the SyncTargets unless Targets is set.
	Reader client.Reader
	// Targets lists the SyncTargets by repository (RepoURLIndex), all of them: not through a
	// cache narrowed to one shard's SyncTargets.
	Targets client.Reader
	// Writer patches the converge.dev/pushedAt annotation; nil: pushes are not announced,
	// only this replica's poller is triggered.
	Writer client.Writer
	// AnnounceEvery is the least time between two announcements to one SyncTarget
	// (default DefaultAnnounceEvery); pushes in between are announced at its end.
	AnnounceEvery time.Duration
	// Log receives the announcements that failed (default: discard).
	Log logr.Logger
	// Scheduler runs the pollers that a push triggers.
	Scheduler *sources.Scheduler
	// TokenTTL is how long a webhook token, or a source key, is used before it is read again
	// (default DefaultTokenTTL): a rotated token is accepted, and the old one refused,
	// within TokenTTL.
	TokenTTL time.Duration
	// Clock times TokenTTL (default: the real clock).
	Clock clock.PassiveClock
	// Sets, when set, finds the SyncTargetSets a webhook of a repository wakes (those
	// listing its pull requests), each signed with its own Secret as a SyncTarget is.
	Sets SetHooks
	// Charts runs the pollers of OCI artifacts that a registry's push triggers (the
	// reconciler's, see reconciler.Reconciler.Charts); nil: such pushes are only announced.
	Charts SourceTrigger

	init   sync.Once
	tokens *ttlCache[[]byte]      // by Secret namespace/name
	keys   *ttlCache[sources.Key] // by SyncTarget namespace/name, UID and generation
	pushes *announcer             // nil without Writer
}

func (w *Dispatcher) caches() {
	w.init.Do(func() {
		ttl, clk := w.TokenTTL, w.Clock
		if ttl <= 0 {
			ttl = DefaultTokenTTL
		}
		if clk == nil {
			clk = clock.RealClock{}
		}
		w.tokens = newTTLCache[[]byte](ttl, clk)
		w.keys = newTTLCache[sources.Key](ttl, clk)
		if w.Writer != nil {
			log := w.Log
			if log.GetSink() == nil {
				log = logr.Discard()
			}
			w.pushes = newAnnouncer(w.Writer, clk, w.AnnounceEvery, log)
		}
	})
}

// SourceTrigger polls a source by its key now; reconciler.ChartFetcher is one, for the
// charts.Source.Key of artifacts. An unknown key is sources.ErrNotSubscribed.
type SourceTrigger interface {
	TriggerSource(key string) error
}

// following says how SyncTargets follow what the webhooks of a route name.
type following struct {
	// kind names the route in the keys of the source-key cache.
	kind string
	// index lists the SyncTargets by the normalized repository a webhook names.
	index string
	// secretRef is the SyncTarget's webhook Secret, nil for none.
	secretRef func(*convergev1.SyncTarget) *convergev1.LocalObjectReference
	// source is the key of the SyncTarget's poller.
	source func(context.Context, *convergev1.SyncTarget) (sources.Key, error)
}

// gitFollowing: SyncTargets of a Git repository (spec.source).
func (w *Dispatcher) gitFollowing() following {
	return following{kind: "git", index: RepoURLIndex,
		secretRef: func(st *convergev1.SyncTarget) *convergev1.LocalObjectReference {
			return st.Spec.Source.WebhookSecretRef
		},
		source: func(ctx context.Context, st *convergev1.SyncTarget) (sources.Key, error) {
			src, err := target.For(st, w.Reader, nil).Source(ctx)
			if err != nil {
				return "", err
			}
			return src.Key(), nil
		}}
}

// ociFollowing: SyncTargets of an OCI artifact (spec.oci).
func (w *Dispatcher) ociFollowing() following {
	return following{kind: "oci", index: OCIRepoIndex,
		secretRef: func(st *convergev1.SyncTarget) *convergev1.LocalObjectReference {
			if st.Spec.OCI == nil {
				return nil
			}
			return st.Spec.OCI.WebhookSecretRef
		},
		source: func(ctx context.Context, st *convergev1.SyncTarget) (sources.Key, error) {
			src, err := target.For(st, w.Reader, nil).Artifact(ctx)
			if err != nil {
				return "", err
			}
			return sources.Key(src.Key()), nil
		}}
}

// TargetsForRepo implements sources.WebhookTargets.
func (w *Dispatcher) TargetsForRepo(ctx context.Context, repo string) ([]sources.WebhookTarget, error) {
	tokens := map[client.ObjectKey][]byte{} // targets often share one Secret
	out, err := w.targetsFollowing(ctx, w.gitFollowing(), repo, tokens)
	if err != nil {
		return nil, err
	}
	return append(out, w.setTargets(ctx, repo, tokens)...), nil
}

// targetsFollowing lists the SyncTargets following repo by f.index, as webhook targets with
// the token of their webhook Secret (read through tokens, then the token cache).
func (w *Dispatcher) targetsFollowing(ctx context.Context, f following, repo string, tokens map[client.ObjectKey][]byte) ([]sources.WebhookTarget, error) {
	w.caches()
	list := &convergev1.SyncTargetList{}
	// The SyncTargets are only read: no deep copy of each, which would make a followed
	// repository slower to refuse than an unknown one.
	lister := w.Targets
	if lister == nil {
		lister = w.Reader
	}
	if err := lister.List(ctx, list, client.MatchingFields{f.index: repo}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var out []sources.WebhookTarget
	for i := range list.Items {
		st := &list.Items[i]
		ref := f.secretRef(st)
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
			SourceKey: w.sourceKey(st, f),
			Secret:    token,
			Name:      client.ObjectKeyFromObject(st).String(),
		})
	}
	return out, nil
}

// Registries is the route of registries' push notifications (POST /hooks/oci, see
// sources.WebhookOptions.Registry): it finds the SyncTargets following an OCI repository
// (OCIRepoIndex) with the token of their spec.oci.webhookSecretRef, announces the push to
// them as the Git route does, and triggers the poller of their artifact (Charts).
func (w *Dispatcher) Registries() *sources.WebhookRoute {
	r := registryHooks{w}
	return &sources.WebhookRoute{Targets: r, Trigger: r}
}

// registryHooks are the SyncTargets following OCI artifacts, and their pollers.
type registryHooks struct{ w *Dispatcher }

// TargetsForRepo implements sources.WebhookTargets: repo is host[:port]/path.
func (r registryHooks) TargetsForRepo(ctx context.Context, repo string) ([]sources.WebhookTarget, error) {
	return r.w.targetsFollowing(ctx, r.w.ociFollowing(), repo, map[client.ObjectKey][]byte{})
}

// Trigger implements sources.Triggerer, as Dispatcher.Trigger does for Git sources.
func (r registryHooks) Trigger(key sources.Key) error {
	err := sources.ErrNotSubscribed
	if r.w.Charts != nil {
		err = r.w.Charts.TriggerSource(string(key))
	}
	if r.w.pushes != nil && errors.Is(err, sources.ErrNotSubscribed) {
		return nil
	}
	return err
}

// SetHooks finds the SyncTargetSets that a webhook of a repository wakes.
type SetHooks interface {
	// HooksForRepo returns the sets following repo (a normalized URL).
	HooksForRepo(repo string) []SetHook
	// WakeSet wakes a set whose Secret signed a webhook.
	WakeSet(set client.ObjectKey)
}

// SetHook is a set a webhook wakes, and the Secret whose "token" signs its webhooks.
type SetHook struct {
	Set    client.ObjectKey
	Secret client.ObjectKey
}

// setTargets are the sets following repo as webhook targets: one whose Secret signed the
// request is woken, not polled.
func (w *Dispatcher) setTargets(ctx context.Context, repo string, tokens map[client.ObjectKey][]byte) []sources.WebhookTarget {
	if w.Sets == nil {
		return nil
	}
	var out []sources.WebhookTarget
	for _, h := range w.Sets.HooksForRepo(repo) {
		token, ok := tokens[h.Secret]
		if !ok {
			token, _ = w.tokens.get(ctx, h.Secret.String(), func(ctx context.Context) ([]byte, error) { return w.readToken(ctx, h.Secret) })
			tokens[h.Secret] = token
		}
		if len(token) == 0 {
			continue
		}
		set := h.Set
		out = append(out, sources.WebhookTarget{Secret: token, Name: "SyncTargetSet " + set.String(),
			Wake: func() { w.Sets.WakeSet(set) }})
	}
	return out
}

// readToken reads the token of a webhook Secret.
func (w *Dispatcher) readToken(ctx context.Context, key client.ObjectKey) ([]byte, error) {
	secret := &corev1.Secret{}
	if err := w.Reader.Get(ctx, key, secret); err != nil {
		return nil, err
	}
	return secret.Data["token"], nil
}

// sourceKey is called for a SyncTarget whose token signed the request: it announces the
// push, then looks the key of the SyncTarget's source up, reading its credentials; the key is
// looked up again when the SyncTarget's spec changes, or after TokenTTL for its credentials.
func (w *Dispatcher) sourceKey(st *convergev1.SyncTarget, f following) func(context.Context) (sources.Key, error) {
	key := client.ObjectKeyFromObject(st)
	return func(ctx context.Context) (sources.Key, error) {
		if w.pushes != nil {
			w.pushes.announce(key)
		}
		id := fmt.Sprintf("%s/%s/%s/%s/%d", f.kind, st.Namespace, st.Name, st.UID, st.Generation)
		return w.keys.get(ctx, id, func(ctx context.Context) (sources.Key, error) { return f.source(ctx, st) })
	}
}

// Trigger implements sources.Triggerer. A source this replica does not poll (it is not the
// leader, or not the shard of the SyncTarget) is polled by the replica the push was announced
// to: that is no failure.
func (w *Dispatcher) Trigger(key sources.Key) error {
	err := w.Scheduler.Trigger(key)
	if w.pushes != nil && errors.Is(err, sources.ErrNotSubscribed) {
		return nil
	}
	return err
}

// NormalizedURL is the index function of RepoURLIndex.
func NormalizedURL(o client.Object) []string {
	st, ok := o.(*convergev1.SyncTarget)
	if !ok || st.IsChart() || st.IsOCI() {
		return nil
	}
	u, err := sources.NormalizeURL(st.Spec.Source.URL)
	if err != nil {
		return nil
	}
	return []string{u}
}

// NormalizedOCIRepository is the index function of OCIRepoIndex.
func NormalizedOCIRepository(o client.Object) []string {
	st, ok := o.(*convergev1.SyncTarget)
	if !ok || st.Spec.OCI == nil {
		return nil
	}
	repo, err := sources.NormalizeOCIRepository(st.Spec.OCI.URL)
	if err != nil {
		return nil
	}
	return []string{repo}
}
