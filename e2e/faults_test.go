package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/faultproxy"
)

// manyConfigMaps spreads ConfigMaps named names, holding value, over 10 files.
func manyConfigMaps(names []string, value string) map[string]string {
	files := map[string]string{}
	per := (len(names) + 9) / 10
	for i := range 10 {
		var b strings.Builder
		for _, n := range names[min(i*per, len(names)):min((i+1)*per, len(names))] {
			fmt.Fprintf(&b, "---\n%s", configMap(n, value))
		}
		files[fmt.Sprintf("deploy/cms-%d.yaml", i)] = b.String()
	}
	return files
}

func names(prefix string, from, to int) []string {
	out := make([]string, 0, to-from)
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s-%03d", prefix, i))
	}
	return out
}

// ownedConfigMaps returns name → value of the ConfigMaps in ns carrying st's owner labels.
func ownedConfigMaps(g Gomega, st *convergev1.SyncTarget, ns string) map[string]string {
	list := &corev1.ConfigMapList{}
	g.Expect(suite.k8s.List(context.Background(), list, client.InNamespace(ns), ownerLabels(st))).To(Succeed())
	out := make(map[string]string, len(list.Items))
	for _, cm := range list.Items {
		out[cm.Name] = cm.Data["value"]
	}
	return out
}

func inventoryIDs(st *convergev1.SyncTarget) []string {
	if st.Status.Inventory == nil {
		return nil
	}
	ids := make([]string, 0, len(st.Status.Inventory.Entries))
	for _, e := range st.Status.Inventory.Entries {
		ids = append(ids, e.ID)
	}
	sort.Strings(ids)
	return ids
}

func configMapIDs(ns string, names []string) []string {
	ids := make([]string, 0, len(names))
	for _, n := range names {
		ids = append(ids, ns+"_"+n+"__ConfigMap")
	}
	sort.Strings(ids)
	return ids
}

// Scenario 8: the daemon is killed (SIGKILL) while it applies a 500-object commit and
// started again: it converges, the inventory is complete, nothing is orphaned and nothing
// is wrongly pruned.
func TestCrashMidApply(t *testing.T) {
	run(t, 8, "crash mid-apply (500 objects)", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("big")
		old := names("cm", 0, 500)
		rev1 := r.commit(manyConfigMaps(old, "v1"))
		st := s.syncTarget("big", r, func(st *convergev1.SyncTarget) {
			st.Labels = map[string]string{shardLabel: "crash"}
			st.Spec.Timeout = &metav1.Duration{Duration: 3 * time.Minute}
		})
		d := startDaemon(t, "crash", "--watch-label-selector", shardLabel+"=crash", "--apply-concurrency", "2")
		s.explainWith(d)
		s.eventually(st, 4*time.Minute, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev1)
			g.Expect(st.Status.Inventory.Entries).To(HaveLen(500))
		})

		// The next commit keeps 450 (changed), drops 50 and adds 50; the new ones sort,
		// and so are applied, first.
		want := append(names("a-new", 0, 50), names("cm", 0, 450)...)
		var rev string
		killedAt, interruptedFirst := -1, false
		for attempt, value := range []string{"v2", "v3", "v4"} {
			rev = r.commit(manyConfigMaps(want, value))
			for deadline := time.Now().Add(3 * time.Minute); killedAt < 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				list := &corev1.ConfigMapList{}
				if err := suite.k8s.List(context.Background(), list, client.InNamespace(s.app), ownerLabels(st)); err != nil {
					continue
				}
				applied := 0
				for _, cm := range list.Items {
					if cm.Data["value"] == value {
						applied++
					}
				}
				if applied == len(want) {
					break // too late
				}
				if applied > 0 {
					d.kill()
					killedAt = applied
				}
			}
			if killedAt >= 0 {
				interruptedFirst = attempt == 0
				t.Logf("attempt %d: the daemon was killed with %d of %d objects of %s applied", attempt+1, killedAt, len(want), rev)
				break
			}
			t.Logf("attempt %d: %s was applied completely before the kill; trying again", attempt+1, rev)
		}
		g.Expect(killedAt).To(BeNumerically(">", 0), "the daemon was killed mid-apply")
		interrupted := get(g, st)
		g.Expect(interrupted.Status.LastAttemptedRevision).To(Equal(rev))
		g.Expect(interrupted.Status.History[0].Revision).NotTo(Equal(rev), "the interrupted sync did not finish")

		g.Expect(d.start()).To(Succeed())
		restarted := time.Now()
		s.eventually(st, 4*time.Minute, func(g Gomega, st *convergev1.SyncTarget) { healthy(g, st, rev) })
		s.latency("restart→converged", time.Since(restarted))
		final := get(g, st)
		g.Expect(inventoryIDs(final)).To(Equal(configMapIDs(s.app, want)), "the inventory is complete and exact")
		if interruptedFirst {
			g.Expect(final.Status.History[0].Deleted).To(Equal(int32(50)),
				"the restarted daemon pruned what the interrupted revision dropped")
		}
		owned := ownedConfigMaps(g, st, s.app)
		g.Expect(owned).To(HaveLen(len(want)), "nothing orphaned, nothing wrongly pruned")
		for _, n := range want {
			g.Expect(owned).To(HaveKey(n))
		}
		value := owned[want[0]]
		for n, v := range owned {
			g.Expect(v).To(Equal(value), "%s holds the last revision's value", n)
		}
		all := &corev1.ConfigMapList{}
		g.Expect(suite.k8s.List(context.Background(), all, client.InNamespace(s.app))).To(Succeed())
		for _, cm := range all.Items {
			g.Expect(cm.Name).NotTo(MatchRegexp(`^cm-4[5-9][0-9]$`), "dropped objects are pruned")
		}
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, rev)
	})
}

// Scenario 9 (serial: it affects every client): kube-apiserver restarts while a sync is
// under way; converge finishes it once the API server is back, with no object lost or
// duplicated.
func TestAPIServerRestart(t *testing.T) {
	run(t, 9, "API server restart during a sync", serial, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("app")
		cms := names("cm", 0, 40)
		files := func(image, value string, minReady int) map[string]string {
			f := manyConfigMaps(cms, value)
			// A real rollout deadline: the 60 s of the other scenarios is shorter than the
			// outage, and a rollout stalled by it would rightly be rolled back. A new Pod
			// counts as available minReady seconds after it is Ready, and the rollout
			// replaces the three one at a time: the sync waits for it long enough for the
			// restart to land inside it, however quickly the rest is applied.
			f["deploy/web.yaml"] = progressDeadline(deployment("web", 3, image, ""),
				fmt.Sprintf("  progressDeadlineSeconds: 120\n  minReadySeconds: %d", minReady))
			return f
		}
		rev1 := r.commit(files("example.com/web:1", "v1", 0))
		st := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
			st.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Minute}
		})
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev1)
			g.Expect(st.Status.Inventory.Entries).To(HaveLen(41))
		})

		rev2 := r.commit(files("example.com/web:2", "v2", 4))
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastAttemptedRevision).To(Equal(rev2))
		})
		began := time.Now()
		g.Expect(suite.cluster.RestartAPIServer(ctx)).To(Succeed())
		back := time.Now()
		t.Logf("kube-apiserver was restarted in %s", back.Sub(began).Round(time.Millisecond))

		s.eventually(st, 3*time.Minute, func(g Gomega, st *convergev1.SyncTarget) { healthy(g, st, rev2) })
		s.latency("API server back→converged", time.Since(back))
		g.Expect(suite.daemon.exited()).To(BeFalse(), "the daemon lived through it")
		final := get(g, st)
		g.Expect(final.Status.History[0].FinishedAt.Time).To(BeTemporally(">=", began.Truncate(time.Second)),
			"the sync of the new revision ended after the restart began")
		want := append(configMapIDs(s.app, cms), s.app+"_web_apps_Deployment")
		sort.Strings(want)
		g.Expect(inventoryIDs(final)).To(Equal(want))
		owned := ownedConfigMaps(g, st, s.app)
		g.Expect(owned).To(HaveLen(len(cms)))
		for _, n := range cms {
			g.Expect(owned).To(HaveKeyWithValue(n, "v2"))
		}
		d := &appsv1.Deployment{}
		object(g, s.app, "web", d)
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/web:2"))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(int32(3)))
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(3)))
		rsList := &appsv1.ReplicaSetList{}
		g.Expect(suite.k8s.List(ctx, rsList, client.InNamespace(s.app))).To(Succeed())
		g.Expect(rsList.Items).To(HaveLen(2), "one ReplicaSet per revision of the template, no duplicate")
		g.Eventually(func(g Gomega) {
			pods := &corev1.PodList{}
			g.Expect(suite.k8s.List(ctx, pods, client.InNamespace(s.app), client.MatchingLabels{"app": "web"})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(3))
			for _, p := range pods.Items {
				g.Expect(p.Spec.Containers[0].Image).To(Equal("example.com/web:2"))
			}
		}).WithTimeout(60 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, rev2)
	})
}

// Scenario 10: the git server goes down: Ready=False with a clear message and the cluster
// untouched; back up, syncing resumes on its own.
func TestGitServerDown(t *testing.T) {
	run(t, 10, "git server down", parallel, func(s *scenario) {
		g := NewWithT(t)
		p, err := faultproxy.Listen(freeAddr(t), strings.TrimPrefix(suite.http.URL, "http://"))
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(p.Close)
		r := s.repo("app")
		rev1 := r.commit(map[string]string{
			"deploy/settings.yaml": configMap("settings", "1"),
			"deploy/other.yaml":    configMap("other", "x"),
		})
		st := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = "http://" + p.Addr() + "/" + r.Name
		})
		s.waitHealthy(st, rev1, 90*time.Second)

		p.Down()
		down := time.Now()
		rev2 := r.commit(map[string]string{"deploy/settings.yaml": configMap("settings", "2")})
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready(st).Reason).To(Equal(convergev1.FetchFailedReason))
			g.Expect(ready(st).Message).To(And(ContainSubstring(p.Addr()), ContainSubstring("connection refused")))
			g.Expect(ready(st).Message).NotTo(ContainSubstring(suite.gitPass))
			g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1))
		})
		s.latency("git down→reported", time.Since(down))
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.FetchFailedReason, p.Addr())
		g.Consistently(func(g Gomega) {
			g.Expect(configMapValue(g, s.app, "settings")).To(Equal("1"))
			g.Expect(configMapValue(g, s.app, "other")).To(Equal("x"))
			now := get(g, st)
			g.Expect(now.Status.LastAppliedRevision).To(Equal(rev1))
			g.Expect(now.Status.Inventory.Entries).To(HaveLen(2))
		}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

		g.Expect(p.Up()).To(Succeed())
		up := time.Now()
		s.waitHealthy(st, rev2, 90*time.Second)
		s.latency("git back→resumed", time.Since(up))
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("2"))
		g.Expect(configMapValue(g, s.app, "other")).To(Equal("x"))
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, rev2)
	})
}

// Scenario 11: two daemons elect a leader; the leader is killed and the other takes over
// within the lease duration and keeps syncing, with no conflicting applies.
func TestLeaderFailover(t *testing.T) {
	run(t, 11, "leader failover", parallel, func(s *scenario) {
		g := NewWithT(t)
		// Short enough for a quick takeover, long enough that a loaded machine's API server
		// answers a renewal within the deadline (a replica that misses it exits, and the
		// scenario then fails over the other way).
		const leaseDuration = 8 * time.Second
		args := []string{"--watch-label-selector", shardLabel + "=failover",
			"--leader-elect", "--leader-election-namespace", s.ns, "--leader-election-id", "e2e-failover",
			"--leader-election-lease-duration", leaseDuration.String(), "--leader-election-renew-deadline", "6s",
			"--leader-election-retry-period", "1s"}
		const acquired = "Successfully acquired lease"

		r := s.repo("app")
		rev1 := r.commit(map[string]string{
			"deploy/web.yaml": deployment("web", 2, "example.com/web:1", ""),
			"deploy/cm.yaml":  configMap("settings", "1"),
		})
		first := startDaemon(t, "failover-1", args...)
		s.explainWith(first)
		g.Eventually(func() bool { return first.logged(acquired) }).WithTimeout(60 * time.Second).Should(BeTrue())
		second := startDaemon(t, "failover-2", args...)
		s.explainWith(second)
		g.Expect(second.waitReady(60 * time.Second)).To(Succeed())

		st := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
			st.Labels = map[string]string{shardLabel: "failover"}
		})
		s.waitHealthy(st, rev1, 90*time.Second)
		// One leader at a time: the second leads only once the first lost the lease, and a
		// replica that loses it exits. Then the first, started again, is the standby.
		leader, standby := first, second
		if second.logged(acquired) {
			g.Expect(first.logged("leader election lost")).To(BeTrue(), "one leader at a time: the first lost its lease")
			g.Eventually(first.exited).WithTimeout(5*time.Second).Should(BeTrue(), "a replica that lost its lease exits")
			g.Expect(first.start()).To(Succeed())
			g.Expect(first.waitReady(60 * time.Second)).To(Succeed())
			leader, standby = second, first
		}
		g.Expect(standby.loggedSinceStart(acquired)).To(BeFalse(), "one leader at a time")

		leader.kill()
		killed := time.Now()
		// kubectl edit while no replica leads: no watch sees it happen.
		cm := &corev1.ConfigMap{}
		object(g, s.app, "settings", cm)
		cm.Data["value"] = "by hand"
		g.Expect(suite.k8s.Update(context.Background(), cm, client.FieldOwner("kubectl-edit"))).To(Succeed())
		g.Eventually(func() bool { return standby.loggedSinceStart(acquired) }).
			WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(BeTrue())
		takeover := time.Since(killed)
		s.latency("leader killed→new leader", takeover)
		// The lease runs out at most leaseDuration after the kill; the other's next try, a
		// retry period later at most, wins it. The rest is slack for a loaded machine.
		g.Expect(takeover).To(BeNumerically("<", 2*leaseDuration), "takeover within the lease duration")
		// Drift restored across a failover (soak invariant 4): the new leader finds the
		// edit in what its watch lists, long before the hourly full sync.
		g.Eventually(func(g Gomega) { g.Expect(configMapValue(g, s.app, "settings")).To(Equal("1")) }).
			WithTimeout(30*time.Second).Should(Succeed(), "the edit made while no replica led is undone")
		s.latency("leader killed→drift restored", time.Since(killed))

		committed := time.Now()
		rev2 := r.commit(map[string]string{
			"deploy/web.yaml": deployment("web", 2, "example.com/web:2", ""),
			"deploy/cm.yaml":  configMap("settings", "2"),
		})
		s.waitHealthy(st, rev2, 90*time.Second)
		s.latency("commit→healthy after failover", time.Since(committed))
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("2"))

		// No conflicts: every sync succeeded, no warning, one field manager.
		final := get(g, st)
		for _, h := range final.Status.History {
			g.Expect(h.Result).To(Equal(convergev1.SyncSucceeded), h.Message)
		}
		for _, e := range events(g, st) {
			g.Expect(e.Type).To(Equal(corev1.EventTypeNormal), "%s: %s", e.Reason, e.Message)
		}
		cm = &corev1.ConfigMap{}
		object(g, s.app, "settings", cm)
		var managers []string
		for _, f := range cm.ManagedFields {
			managers = append(managers, f.Manager+"/"+string(f.Operation))
		}
		g.Expect(managers).To(Equal([]string{"converge/Apply"}))
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, rev2)
	})
}

// killInHealthWait pushes bad (its Deployment never becomes Available) and kills d while
// it waits for bad to become healthy: what a replica that loses its lease there leaves.
func killInHealthWait(s *scenario, d *daemon, st *convergev1.SyncTarget, bad string) {
	s.t.Helper()
	s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(bad))
		g.Expect(condition(st, convergev1.ReconcilingCondition).Message).To(ContainSubstring("waiting for"))
	})
	d.kill()
	g := NewWithT(s.t)
	dep := &appsv1.Deployment{}
	object(g, s.app, "web", dep)
	g.Expect(dep.Spec.Template.Spec.NodeSelector).NotTo(BeEmpty(), "the daemon was killed with bad applied")
	g.Expect(get(g, st).Status.History[0].Revision).NotTo(Equal(bad), "the attempt of bad did not end")
}

// waitingDeployment is the Deployment of a revision that fails health slowly: it never
// becomes Available and says so only after 30 s, so that a test can stop the daemon in
// its health wait.
func waitingDeployment(image string) string {
	return progressDeadline(deployment("web", 1, image, "no-such-node: anywhere"), "  progressDeadlineSeconds: 30")
}

// Scenario 61: invariant 3, a failed revision ends rolled back. The daemon is killed
// while it waits for a revision that never becomes healthy, and the next commit fails to
// render: the daemon that starts again applies the last healthy revision again, not
// leaving the unhealthy one in place behind a status that says nothing of it.
func TestFailedRevisionRolledBackAfterAKillInItsHealthWait(t *testing.T) {
	run(t, 61, "killed in a health wait, then a broken commit", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("app")
		good := r.commit(map[string]string{
			"deploy/web.yaml": deployment("web", 1, "example.com/web:1", ""),
			"deploy/cm.yaml":  configMap("settings", "good"),
		})
		st := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
			st.Labels = map[string]string{shardLabel: "wait-kill"}
			st.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
		})
		d := startDaemon(t, "wait-kill", "--watch-label-selector", shardLabel+"=wait-kill")
		s.explainWith(d)
		s.waitHealthy(st, good, 90*time.Second)

		bad := r.commit(map[string]string{
			"deploy/web.yaml":   waitingDeployment("example.com/web:2"),
			"deploy/extra.yaml": configMap("extra", "added by the bad revision"),
		})
		killInHealthWait(s, d, st, bad)
		broken := r.commit(map[string]string{"deploy/broken.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: [name\n"})
		g.Expect(d.start()).To(Succeed())

		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Reason).To(Equal(convergev1.BuildFailedReason), ready(st).Message)
			g.Expect(ready(st).Message).To(And(ContainSubstring(broken), ContainSubstring(good+" applied again in place of "+bad)))
			g.Expect(condition(st, convergev1.ReconcilingCondition).Status).NotTo(Equal(metav1.ConditionTrue))
			g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
			g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
			g.Expect(st.Status.History[0]).To(And(HaveField("Revision", broken), HaveField("Result", convergev1.SyncFailed)))
		})
		dep := &appsv1.Deployment{}
		object(g, s.app, "web", dep)
		g.Expect(dep.Spec.Template.Spec.NodeSelector).To(BeEmpty(), "the Deployment is the good revision's again")
		g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/web:1"))
		gone(g, s.app, "extra", &corev1.ConfigMap{})
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("good"))
		final := get(g, st)
		g.Expect(inventoryIDs(final)).To(ConsistOf(s.app+"_settings__ConfigMap", s.app+"_web_apps_Deployment"))
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.BuildFailedReason, broken, "applied again")
	})
}

// Scenario 62: invariant 7, everything converges. The daemon is killed while it waits for
// a revision that added objects and never becomes healthy; the next commit drops one of
// the healthy revision's objects, within spec.maxDeletions: it deploys, and what the
// interrupted revision added is pruned without counting against the limit.
func TestConvergesAfterAKillInAHealthWait(t *testing.T) {
	run(t, 62, "killed in a health wait, then a good commit under maxDeletions", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("app")
		files := func(web string, cms ...string) map[string]string {
			out := map[string]string{"deploy/web.yaml": web}
			for _, n := range cms {
				out["deploy/"+n+".yaml"] = configMap(n, "1")
			}
			return out
		}
		good := r.commit(files(deployment("web", 1, "example.com/web:1", ""), "a", "b", "c", "d", "e"))
		limit := intstr.FromInt32(2)
		st := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
			st.Labels = map[string]string{shardLabel: "wait-kill-prune"}
			st.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
			st.Spec.MaxDeletions = &limit
		})
		d := startDaemon(t, "wait-kill-prune", "--watch-label-selector", shardLabel+"=wait-kill-prune")
		s.explainWith(d)
		s.waitHealthy(st, good, 90*time.Second)

		bad := r.commit(files(waitingDeployment("example.com/web:2"), "a", "b", "c", "d", "e", "x1", "x2", "x3"))
		killInHealthWait(s, d, st, bad)
		g.Expect(inventoryIDs(get(g, st))).To(HaveLen(9), "the inventory lists what bad was to create")
		r.remove("deploy/e.yaml", "deploy/x1.yaml", "deploy/x2.yaml", "deploy/x3.yaml")
		next := r.commit(map[string]string{"deploy/web.yaml": deployment("web", 1, "example.com/web:3", "")})
		g.Expect(d.start()).To(Succeed())

		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, next)
			g.Expect(st.Status.History[0].Deleted).To(Equal(int32(4)))
		})
		final := get(g, st)
		g.Expect(inventoryIDs(final)).To(ConsistOf(s.app+"_a__ConfigMap", s.app+"_b__ConfigMap", s.app+"_c__ConfigMap",
			s.app+"_d__ConfigMap", s.app+"_web_apps_Deployment"))
		for _, n := range []string{"e", "x1", "x2", "x3"} {
			gone(g, s.app, n, &corev1.ConfigMap{})
		}
		dep := &appsv1.Deployment{}
		object(g, s.app, "web", dep)
		g.Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/web:3"))

		// The limit still holds for what the healthy revision declares.
		typo := r.remove("deploy/a.yaml", "deploy/b.yaml", "deploy/c.yaml")
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Reason).To(Equal(convergev1.TooManyDeletionsReason), ready(st).Message)
			g.Expect(ready(st).Message).To(And(ContainSubstring(typo), ContainSubstring("prunes 3 of the 5 objects applied")))
		})
		g.Expect(configMapValue(g, s.app, "a")).To(Equal("1"), "nothing was pruned")
	})
}
