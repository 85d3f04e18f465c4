package e2e

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Scenario 23: spec.postBuild substitutes variables from a ConfigMap; a change to the
// ConfigMap deploys the same revision again with the new value at once (the SyncTarget
// polls hourly), and a change made while the daemon is down is deployed when it starts.
func TestPostBuildVariables(t *testing.T) {
	run(t, 23, "postBuild variables: a ConfigMap change redeploys", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("app")
		rev := r.commit(map[string]string{"deploy/cm.yaml": configMap("greeting", "${greeting}, ${who:=world}")})
		vars := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vars", Namespace: s.ns},
			Data: map[string]string{"greeting": "hello"}}
		s.create(vars)
		st := s.syncTarget("vars", r, func(st *convergev1.SyncTarget) {
			st.Labels = map[string]string{shardLabel: "postbuild"}
			st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
			st.Spec.PostBuild = &convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}}}
		})
		d := startDaemon(t, "postbuild", "--watch-label-selector", shardLabel+"=postbuild")
		s.explainWith(d)
		s.waitHealthy(st, rev, 90*time.Second)
		g.Expect(configMapValue(g, s.app, "greeting")).To(Equal("hello, world"))

		setGreeting := func(v string) {
			g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(vars), vars)).To(Succeed())
			vars.Data["greeting"] = v
			g.Expect(suite.k8s.Update(ctx, vars)).To(Succeed())
		}
		changed := time.Now()
		setGreeting("goodbye")
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(configMapValue(g, s.app, "greeting")).To(Equal("goodbye, world"))
			healthy(g, st, rev)
			g.Expect(st.Status.History[0].Message).To(ContainSubstring("(variables changed)"))
		})
		s.latency("variables change→applied", time.Since(changed))

		// Changed while the daemon is down: nothing remembers the old value, so the
		// first reconcile after the start reads the variables and applies.
		d.stop()
		setGreeting("welcome back")
		g.Expect(d.start()).To(Succeed())
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(configMapValue(g, s.app, "greeting")).To(Equal("welcome back, world"))
			healthy(g, st, rev)
			g.Expect(st.Status.History[0].Message).To(ContainSubstring("(variables read anew)"))
		})
	})
}
