package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// fakeSyncTargets is a ListerWatcher the test drives: a list answers with list (or
// listErr), a watch with watchErr when set, and each watch started is handed to the test with the resourceVersion it
// starts from. Like an API server without watch-list, it declines a watch that asks for
// the initial events.
type fakeSyncTargets struct {
	mu      sync.Mutex
	list    *convergev1.SyncTargetList
	listErr error
	lists   int

	watchErr error // what every watch answers, when set
	watches  chan startedWatch
}

type startedWatch struct {
	resourceVersion string
	*watch.RaceFreeFakeWatcher
}

func (f *fakeSyncTargets) ListWithContext(_ context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	if f.listErr != nil {
		return nil, f.listErr
	}
	return f.list.DeepCopy(), nil
}

func (f *fakeSyncTargets) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if f.watchErr != nil {
		return nil, f.watchErr
	}
	if o.SendInitialEvents != nil && *o.SendInitialEvents {
		return nil, apierrors.NewBadRequest("no watch-list here")
	}
	w := watch.NewRaceFreeFake()
	select {
	case f.watches <- startedWatch{o.ResourceVersion, w}:
		return w, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeSyncTargets) setList(rv string, items ...convergev1.SyncTarget) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = &convergev1.SyncTargetList{ListMeta: metav1.ListMeta{ResourceVersion: rv}, Items: items}
}

func (f *fakeSyncTargets) listed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

// follow runs followSyncTargets on f printing a table to out, until the returned stop.
func (f *fakeSyncTargets) follow(t *testing.T, out *syncedBuffer) (stop func() error) {
	p := &syncTargetPrinter{out: out, format: outputTable, now: func() time.Time { return stNow }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- followSyncTargets(ctx, f,
			func(items []convergev1.SyncTarget) (bool, error) { return false, p.printList(items, false) },
			func(typ watch.EventType, st *convergev1.SyncTarget) (bool, error) {
				return false, p.printChange(typ, st)
			})
	}()
	t.Cleanup(cancel)
	return func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("the follow did not end with its context")
			return nil
		}
	}
}

func (f *fakeSyncTargets) nextWatch(t *testing.T) startedWatch {
	t.Helper()
	select {
	case w := <-f.watches:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no watch started")
		return startedWatch{}
	}
}

func withVersion(st convergev1.SyncTarget, rv string, mutate func(*convergev1.SyncTarget)) *convergev1.SyncTarget {
	out := st.DeepCopy()
	out.ResourceVersion = rv
	if mutate != nil {
		mutate(out)
	}
	return out
}

// TestFollowResumesAndRelists: a watch the server drops is resumed where it left off, with no
// list; a watch whose point the server no longer has lists again, and what changed meanwhile
// shows as rows. Each change is one row: none lost, none twice, none from the replayed list.
func TestFollowResumesAndRelists(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(10 * time.Second) // a list again waits the informer's backoff, 0.8-1.6s
	fixtures := tableFixtures()
	shop, api := fixtures[0], fixtures[1]
	f := &fakeSyncTargets{watches: make(chan startedWatch)}
	f.setList("10", *withVersion(shop, "10", nil), *withVersion(api, "9", nil))
	var out syncedBuffer
	stop := f.follow(t, &out)

	w := f.nextWatch(t)
	g.Expect(w.resourceVersion).To(Equal("10"), "the watch starts where the list was")
	g.Eventually(out.String).Should(ContainSubstring("shop "))
	applying := withVersion(shop, "11", func(st *convergev1.SyncTarget) {
		st.Status.Conditions = append(st.Status.Conditions,
			cond(convergev1.ReconcilingCondition, metav1.ConditionTrue, convergev1.ProgressingReason, "applying main@sha1:"+shaNew))
	})
	w.Modify(applying)
	g.Eventually(out.String).Should(ContainSubstring("applying main@sha1:5eed5ee"))

	w.Stop() // the server drops the watch
	w = f.nextWatch(t)
	g.Expect(w.resourceVersion).To(Equal("11"), "resumed where it left off")
	g.Expect(f.listed()).To(Equal(1), "a dropped watch is resumed, not listed again")
	applied := withVersion(shop, "12", func(st *convergev1.SyncTarget) {
		st.Status.LastAppliedRevision = "main@sha1:" + shaNew
	})
	w.Add(withVersion(api, "9", nil)) // a server resending what the follow has seen
	w.Modify(applying)
	w.Modify(applied)
	g.Eventually(out.String).Should(ContainSubstring("main@sha1:5eed5ee   True"))

	// The server no longer has the watch's point: the follow lists again. Meanwhile shop
	// failed and api was deleted.
	failed := withVersion(shop, "15", func(st *convergev1.SyncTarget) {
		st.Status.LastAppliedRevision = "main@sha1:" + shaNew
		st.Status.Conditions[0] = cond(convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.HealthCheckFailedReason, "health check failed")
	})
	f.setList("20", *failed)
	w.Error(&apierrors.NewResourceExpired("too old resource version").ErrStatus)
	w = f.nextWatch(t)
	g.Expect(w.resourceVersion).To(Equal("20"), "the watch starts where the new list was")
	g.Eventually(out.String).Should(ContainSubstring("(deleted)"))
	g.Expect(stop()).To(Succeed(), "Ctrl-C is no error")
	g.Expect(f.listed()).To(Equal(2))

	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	g.Expect(lines).To(HaveLen(7), "the table, then one row per change:\n%s", out.String())
	g.Expect(strings.Fields(lines[0])[0]).To(Equal("NAME"))
	g.Expect(strings.Fields(lines[1])[0]).To(Equal("api"))
	g.Expect(strings.Fields(lines[2])[0]).To(Equal("shop"))
	g.Expect(lines[3]).To(MatchRegexp(`^shop .*applying main@sha1:5eed5ee$`))
	g.Expect(lines[4]).To(MatchRegexp(`^shop .*main@sha1:5eed5ee   True .*applied revision`))
	relisted := []string{lines[5], lines[6]} // one change per SyncTarget: in no given order
	g.Expect(relisted).To(ContainElements(MatchRegexp(`^shop .*False .*HealthCheckFailed: health check failed$`),
		MatchRegexp(`^api .*\(deleted\)$`)))
}

// TestFollowGivesUp: where the informer would retry for ever, the follow ends with the error.
func TestFollowGivesUp(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "converge.dev", Resource: "synctargets"}, "",
		errors.New("no"))
	unreachable := errors.New("dial tcp 127.0.0.1:6443: connect: connection refused")
	for name, f := range map[string]*fakeSyncTargets{
		"forbidden":   {listErr: forbidden},
		"unreachable": {watchErr: unreachable, listErr: unreachable},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f.watches = make(chan startedWatch)
			done := make(chan error, 1)
			go func() {
				done <- followSyncTargets(context.Background(), f,
					func([]convergev1.SyncTarget) (bool, error) { return false, nil },
					func(watch.EventType, *convergev1.SyncTarget) (bool, error) { return false, nil })
			}()
			var err error
			g.Eventually(done).WithTimeout(10 * time.Second).Should(Receive(&err))
			g.Expect(err).To(MatchError(ContainSubstring("listing SyncTargets: ")))
			g.Expect(errors.Is(err, f.listErr) || apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		})
	}
}
