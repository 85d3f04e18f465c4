package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	toolswatch "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// watcher follows objects through a watch, from before the action it times, and records
// when a condition first held: the time an event arrived, not when someone polled.
type watcher struct {
	synced chan struct{}
	done   chan struct{}
	at     time.Time
	err    error
	cancel context.CancelFunc
}

// startWatch starts watching lw; cond sees every object added or modified with the time its
// event arrived and returns true when the wait is over. It returns once the initial list is
// in, so that nothing done afterwards is missed.
func startWatch(ctx context.Context, lw cache.ListerWatcher, objType runtime.Object, timeout time.Duration,
	cond func(obj runtime.Object, at time.Time) bool) (*watcher, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	w := &watcher{synced: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(w.done)
		_, err := toolswatch.UntilWithSync(ctx, lw, objType,
			func(cache.Store) (bool, error) { close(w.synced); return false, nil },
			func(ev watch.Event) (bool, error) {
				if ev.Type != watch.Added && ev.Type != watch.Modified {
					return false, nil
				}
				now := time.Now()
				if cond(ev.Object, now) {
					w.at = now
					return true, nil
				}
				return false, nil
			})
		w.err = err
	}()
	select {
	case <-w.synced:
		return w, nil
	case <-w.done:
		cancel()
		if w.err == nil {
			w.err = errors.New("watch ended before it synced")
		}
		return nil, w.err
	}
}

// wait returns when the condition held, or the error that ended the watch.
func (w *watcher) wait() (time.Time, error) {
	<-w.done
	w.cancel()
	if w.err != nil {
		if wait.Interrupted(w.err) {
			return time.Time{}, errors.New("timed out")
		}
		return time.Time{}, w.err
	}
	return w.at, nil
}

func (w *watcher) stop() { w.cancel(); <-w.done }

// targetsLW lists and watches the SyncTargets of benchNamespace.
func (b *Bench) targetsLW() cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			list := &convergev1.SyncTargetList{}
			err := b.c.List(ctx, list, client.InNamespace(benchNamespace), &client.ListOptions{Raw: &o})
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return b.c.Watch(ctx, &convergev1.SyncTargetList{}, client.InNamespace(benchNamespace), &client.ListOptions{Raw: &o})
		},
	}
}

// configMapLW lists and watches one ConfigMap.
func (b *Bench) configMapLW(ns, name string) cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(b.cs.CoreV1().RESTClient(), "configmaps", ns, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
}

// readyAt is true when a SyncTarget is Ready at revision for its current generation.
func readyAt(st *convergev1.SyncTarget, revision string) bool {
	return st.Status.LastHealthyRevision == revision && st.Status.LastAppliedRevision == revision &&
		st.Status.ObservedGeneration == st.Generation &&
		apimeta.IsStatusConditionTrue(st.Status.Conditions, convergev1.ReadyCondition)
}

// readyMessage describes why a SyncTarget is not ready, for errors.
func readyMessage(st *convergev1.SyncTarget) string {
	c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
	if c == nil {
		return fmt.Sprintf("%s: no Ready condition (observedGeneration %d, generation %d)", st.Name, st.Status.ObservedGeneration, st.Generation)
	}
	return fmt.Sprintf("%s: Ready=%s %s: %s (lastHealthyRevision %q)", st.Name, c.Status, c.Reason, c.Message, st.Status.LastHealthyRevision)
}

// targetsWatch waits for every named SyncTarget to satisfy a condition.
type targetsWatch struct {
	*watcher
	readyAt map[string]time.Time
	last    map[string]*convergev1.SyncTarget
}

// watchTargets watches the named SyncTargets until cond held for each of them.
func (b *Bench) watchTargets(ctx context.Context, names []string, timeout time.Duration,
	cond func(*convergev1.SyncTarget) bool) (*targetsWatch, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	tw := &targetsWatch{readyAt: map[string]time.Time{}, last: map[string]*convergev1.SyncTarget{}}
	w, err := startWatch(ctx, b.targetsLW(), &convergev1.SyncTarget{}, timeout, func(obj runtime.Object, at time.Time) bool {
		st, ok := obj.(*convergev1.SyncTarget)
		if !ok || !want[st.Name] {
			return false
		}
		tw.last[st.Name] = st
		if _, done := tw.readyAt[st.Name]; !done && cond(st) {
			tw.readyAt[st.Name] = at
		}
		return len(tw.readyAt) == len(want)
	})
	if err != nil {
		return nil, err
	}
	tw.watcher = w
	return tw, nil
}

// watchTargetsReady waits for the named SyncTargets to be Ready at revision.
func (b *Bench) watchTargetsReady(ctx context.Context, names []string, revision string, timeout time.Duration) (*targetsWatch, error) {
	return b.watchTargets(ctx, names, timeout, func(st *convergev1.SyncTarget) bool { return readyAt(st, revision) })
}

// wait returns when the last SyncTarget became Ready, or an error saying what is not.
func (tw *targetsWatch) wait() (time.Time, error) {
	at, err := tw.watcher.wait()
	if err != nil {
		// The watch goroutine is done: reading its maps is safe.
		msg := fmt.Sprintf("%d of %d SyncTargets Ready", len(tw.readyAt), len(tw.last))
		for name, st := range tw.last {
			if _, ok := tw.readyAt[name]; !ok {
				msg += "; first not ready: " + readyMessage(st)
				break
			}
		}
		return at, fmt.Errorf("%s: %w", msg, err)
	}
	return at, nil
}

// watchConfigMapValue waits for data.value of a ConfigMap to be value; with after set, only
// after it was seen holding after first (a restore after an edit).
func (b *Bench) watchConfigMapValue(ctx context.Context, ns, name, value, after string, timeout time.Duration) (*watcher, error) {
	seen := after == ""
	return startWatch(ctx, b.configMapLW(ns, name), &corev1.ConfigMap{}, timeout, func(obj runtime.Object, _ time.Time) bool {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return false
		}
		v := cm.Data["value"]
		if !seen {
			seen = v == after
			return false
		}
		return v == value
	})
}
