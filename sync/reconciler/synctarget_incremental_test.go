package reconciler_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestNewCommitAppliesOnlyWhatChanged: with nothing drifted, a commit that changes one of
// 200 objects dry-runs and writes that one only, and a reconcile a user asks for applies
// them all again.
func TestNewCommitAppliesOnlyWhatChanged(t *testing.T) {
	f := newFixture(t)
	files := func(changed string) map[string]string {
		var b strings.Builder
		for i := range 200 {
			v := "v"
			if i == 7 {
				v = changed
			}
			fmt.Fprintf(&b, "---\n%s", configMap(fmt.Sprintf("cm-%03d", i), v))
		}
		return map[string]string{"deploy/cms.yaml": b.String()}
	}
	rev1 := f.commit(files("one"))
	st := f.syncTarget("incremental", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Second}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1), ready(st).Message)
	})

	g := NewWithT(t)
	before := requests.Load()
	rev2 := f.commit(files("two"))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2), ready(st).Message)
		g.Expect(st.Status.History[0]).To(And(HaveField("Configured", int32(1)), HaveField("Created", int32(0))))
		g.Expect(ready(st).Message).To(ContainSubstring("199 unchanged"))
	})
	sent := requests.Load() - before
	t.Logf("a commit changing 1 of 200 objects sent %d API requests", sent)
	g.Expect(sent).To(BeNumerically("<", 60), "a full apply sends at least one dry-run per object")
	g.Expect(getCM(g, f.app, "cm-007").Data["value"]).To(Equal("two"))

	// A reconcile a user asks for applies everything (and so repairs what no watch saw).
	before = requests.Load()
	latest := get(g, st)
	entries := len(latest.Status.History)
	latest.Annotations = map[string]string{convergev1.RequestedAtAnnotation: fmt.Sprint(time.Now().UnixNano())}
	g.Expect(k8s.Update(t.Context(), latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHandledReconcileAt).To(Equal(latest.Annotations[convergev1.RequestedAtAnnotation]))
		g.Expect(st.Status.History).To(HaveLen(entries + 1))
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue))
	})
	g.Expect(requests.Load()-before).To(BeNumerically(">=", 200), "every object dry-run again")
}

// TestCommitStatusWrites: the status is written once for a commit that changes objects (the
// outcome), and twice for one that adds an object (the inventory listing it before it is
// created, then the outcome).
func TestCommitStatusWrites(t *testing.T) {
	f := newFixture(t)
	rev1 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("writes", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Second}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1), ready(st).Message)
	})
	statusWrites := func(sent []string) int {
		n := 0
		for _, r := range sent {
			if strings.HasPrefix(r, "PATCH /apis/converge.dev/v1alpha1/namespaces/"+f.ns+"/synctargets/writes/status") {
				n++
			}
		}
		return n
	}

	stop := recorder.start()
	rev2 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2), ready(st).Message)
	})
	g := NewWithT(t)
	g.Expect(statusWrites(stop())).To(Equal(1), "a commit changing an object")

	stop = recorder.start()
	rev3 := f.commit(map[string]string{"deploy/b.yaml": configMap("b", "1")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev3), ready(st).Message)
	})
	g.Expect(statusWrites(stop())).To(Equal(2), "a commit adding an object")
	g.Expect(getCM(g, f.app, "b").Data["value"]).To(Equal("1"))
}
