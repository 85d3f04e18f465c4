package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// NewRequestToken is a fresh value for the requestedAt annotation.
func NewRequestToken() string { return time.Now().UTC().Format(time.RFC3339Nano) }

// SuspendedError says that a suspended SyncTarget will not sync, and how to let it.
func SuspendedError(key client.ObjectKey) error {
	return fmt.Errorf("SyncTarget %s is suspended: run converge resume %s -n %s to let it sync again",
		key, key.Name, key.Namespace)
}

// RequestReconcile sets the requestedAt annotation of st to requested (a merge patch of
// that annotation only): the daemon syncs it at once, fetching its source anew.
func RequestReconcile(ctx context.Context, c client.Client, st *convergev1.SyncTarget, requested string) error {
	key := client.ObjectKeyFromObject(st)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]string{convergev1.RequestedAtAnnotation: requested}}})
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, st, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("requesting a reconcile of %s: %w", key, err)
	}
	return nil
}

// Suspend sets spec.suspend of st.
func Suspend(ctx context.Context, c client.Client, st *convergev1.SyncTarget) error {
	if err := c.Patch(ctx, st, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`))); err != nil {
		return fmt.Errorf("suspending %s: %w", client.ObjectKeyFromObject(st), err)
	}
	return nil
}

// Rollback pins the SyncTarget key to the commit that to names (see ResolveCommit), or a
// chart SyncTarget to the chart revision it names (see ResolveChartRevision, PinChart),
// and asks for a reconcile with requested, retrying on conflicts; it returns the commit
// or chart revision pinned, and st receives the SyncTarget as patched. It refuses a
// suspended SyncTarget.
func Rollback(ctx context.Context, c client.Client, key client.ObjectKey, to, requested string, st *convergev1.SyncTarget) (string, error) {
	var commit string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Get(ctx, key, st); err != nil {
			return err
		}
		if st.Spec.Suspend {
			return fmt.Errorf("SyncTarget %s is suspended: converge resume %s -n %s lets it sync again (and unpins it)",
				key, key.Name, key.Namespace)
		}
		base := st.DeepCopy()
		var err error
		if commit, err = pinTo(st, to); err != nil {
			return err
		}
		SetAnnotation(st, convergev1.RequestedAtAnnotation, requested)
		return c.Patch(ctx, st, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return "", fmt.Errorf("rolling back %s: %w", key, err)
	}
	return commit, nil
}

// pinTo pins st to what to names: a chart revision for a chart SyncTarget, an artifact's
// digest for an OCI one, a commit otherwise; it returns what it pinned.
func pinTo(st *convergev1.SyncTarget, to string) (string, error) {
	var pinned string
	switch {
	case st.IsOCI() || st.IsChart():
		r, err := ResolveChartRevision(st, to)
		if err != nil {
			return "", err
		}
		pin := PinChart
		if st.IsOCI() {
			pin = PinOCI
		}
		if err := pin(st, r); err != nil {
			return "", err
		}
		pinned = r.String()
	default:
		commit, err := ResolveCommit(st, to)
		if err != nil {
			return "", err
		}
		if err := Pin(st, commit); err != nil {
			return "", err
		}
		pinned = commit
	}
	values, err := pinValues(st, pinned)
	return pinned + values, err
}

// Resume unpins and un-suspends the SyncTarget key and asks for a reconcile with
// requested, retrying on conflicts; it returns what it did, in words.
func Resume(ctx context.Context, c client.Client, key client.ObjectKey, requested string) ([]string, error) {
	var did []string
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		st := &convergev1.SyncTarget{}
		if err := c.Get(ctx, key, st); err != nil {
			return err
		}
		base := st.DeepCopy()
		var err error
		if did, err = Unpin(st); err != nil {
			return err
		}
		SetAnnotation(st, convergev1.RequestedAtAnnotation, requested)
		return c.Patch(ctx, st, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	})
	if err != nil {
		return nil, fmt.Errorf("resuming %s: %w", key, err)
	}
	if len(did) == 0 {
		did = append(did, "neither pinned nor suspended; requested a reconcile")
	}
	return did, nil
}
