package e2e

import (
	"context"
	"encoding/json"
	"maps"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Scenario 41: a SyncTargetSet with a list generator of two elements over one repository
// with two directories: the daemon generates two SyncTargets, both deploy their directory
// and become Ready, and so does the set. Deleting the set deletes them (the garbage
// collector, through their owner reference), and their objects are pruned.
func TestFleetFromAList(t *testing.T) {
	run(t, 41, "SyncTargetSet from a list", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("fleet")
		rev := r.commit(map[string]string{
			"deploy/blue/cm.yaml":  configMap("blue", "b"),
			"deploy/green/cm.yaml": configMap("green", "g"),
		})
		set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: "colors", Namespace: s.ns},
			Spec: convergev1.SyncTargetSetSpec{
				Generators: []convergev1.Generator{{List: &convergev1.ListGenerator{Elements: []map[string]string{
					{"color": "blue"}, {"color": "green"}}}}},
				Template: convergev1.SyncTargetTemplate{
					Metadata: convergev1.SyncTargetTemplateMeta{Name: "app-{{ .color }}"},
					Spec:     fleetSpec(g, r, map[string]any{"path": "deploy/{{ .color }}", "targetNamespace": s.app}),
				},
			}}
		s.create(set)

		for _, color := range []string{"blue", "green"} {
			st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "app-" + color, Namespace: s.ns}}
			s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
				healthy(g, st, rev)
				g.Expect(st.Labels).To(HaveKeyWithValue(convergev1.SetLabel, "colors"))
			})
			g.Expect(configMapValue(g, s.app, color)).To(Equal(color[:1]))
		}
		expectSetReady(t, set, 2)

		g.Expect(suite.k8s.Delete(ctx, set)).To(Succeed())
		g.Eventually(func(g Gomega) {
			list := &convergev1.SyncTargetList{}
			g.Expect(suite.k8s.List(ctx, list, client.InNamespace(s.ns))).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
			gone(g, s.app, "blue", &corev1.ConfigMap{})
			gone(g, s.app, "green", &corev1.ConfigMap{})
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})
}

// fleetSpec is a SyncTarget spec template following main of r over HTTP, polling every
// 2 s, with prune and a 30 s timeout, and the fields of extra, as JSON.
func fleetSpec(g Gomega, r *repo, extra map[string]any) apiextensionsv1.JSON {
	spec := map[string]any{
		"source": map[string]any{"url": r.httpURL(), "ref": map[string]any{"branch": "main"},
			"secretRef": map[string]any{"name": httpSecret}, "interval": "2s"},
		"prune": true, "timeout": "30s",
	}
	maps.Copy(spec, extra)
	b, err := json.Marshal(spec)
	g.Expect(err).NotTo(HaveOccurred())
	return apiextensionsv1.JSON{Raw: b}
}

// generatedNames are the names of the SyncTargets the set generated.
func generatedNames(g Gomega, ns, set string) []string {
	list := &convergev1.SyncTargetList{}
	g.Expect(suite.k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{convergev1.SetLabel: set})).To(Succeed())
	names := make([]string, 0, len(list.Items))
	for _, st := range list.Items {
		names = append(names, st.Name)
	}
	return names
}

// getSet reads the SyncTargetSet as it is now.
func getSet(g Gomega, set *convergev1.SyncTargetSet) *convergev1.SyncTargetSet {
	out := &convergev1.SyncTargetSet{}
	g.Expect(suite.k8s.Get(context.Background(), client.ObjectKeyFromObject(set), out)).To(Succeed())
	return out
}

func setReady(set *convergev1.SyncTargetSet) metav1.Condition {
	if c := apimeta.FindStatusCondition(set.Status.Conditions, convergev1.ReadyCondition); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// expectSetReady waits for the set to be Ready with n SyncTargets.
func expectSetReady(t *testing.T, set *convergev1.SyncTargetSet, n int) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) {
		got := getSet(g, set)
		g.Expect(setReady(got).Status).To(Equal(metav1.ConditionTrue), "%v", got.Status.Conditions)
		g.Expect(got.Status.Targets).To(HaveLen(n))
	}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// Scenario 51: a SyncTargetSet over the matrix of two cluster Secrets (two names for the
// shared remote cluster, each deploying into a namespace of its own there) and the
// directories of a repository: 2 × 3 SyncTargets, Ready, with their objects on the remote
// cluster. A directory added in Git adds one SyncTarget per cluster; a directory removed
// deletes its two, and their objects are pruned on the remote cluster.
func TestFleetClustersTimesGitDirectories(t *testing.T) {
	run(t, 51, "SyncTargetSet: clusters × Git directories, remote", parallel, func(s *scenario) {
		rc := sharedRemote(t)
		g := NewWithT(t)
		clusters := []string{"east", "west"}
		nsOf := func(cluster string) string { return s.app + "-" + cluster }
		for _, c := range clusters {
			rc.namespace(t, nsOf(c))
			s.kubeconfigSecret(rc, c+"-kc", map[string]string{convergev1.ClusterLabel: c})
		}
		r := s.repo("fleet")
		apps := map[string]string{}
		for _, app := range []string{"web", "api", "db"} {
			apps["apps/"+app+"/cm.yaml"] = configMap(app, app+"-1")
		}
		rev := r.commit(apps)
		set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: s.ns},
			Spec: convergev1.SyncTargetSetSpec{
				Generators: []convergev1.Generator{{Matrix: &convergev1.MatrixGenerator{Generators: []convergev1.BaseGenerator{
					{Clusters: &convergev1.ClustersGenerator{}},
					{GitDirectories: &convergev1.GitDirectoriesGenerator{Include: []string{"apps/*"}, Source: convergev1.GitSource{
						URL: r.httpURL(), Ref: convergev1.GitRef{Branch: "main"},
						SecretRef: &convergev1.LocalObjectReference{Name: httpSecret},
						Interval:  &metav1.Duration{Duration: 2 * time.Second}}}},
				}}}},
				Template: convergev1.SyncTargetTemplate{
					Metadata: convergev1.SyncTargetTemplateMeta{Name: "{{ .name }}-{{ .path.basename }}",
						Labels: map[string]string{"cluster": "{{ .name }}"}},
					Spec: fleetSpec(g, r, map[string]any{"path": "{{ .path }}", "targetNamespace": s.app + "-{{ .name }}",
						"kubeConfig": map[string]any{"secretRef": map[string]any{"name": "{{ .secretName }}"}}}),
				},
			}}
		created := time.Now()
		s.create(set)

		// expect waits for the SyncTargets of every cluster × app, healthy at rev, with
		// each app's ConfigMap on the remote cluster in the cluster's namespace.
		expect := func(rev string, apps ...string) {
			t.Helper()
			var names []string
			for _, c := range clusters {
				for _, app := range apps {
					names = append(names, c+"-"+app)
				}
			}
			g.Eventually(func(g Gomega) []string { return generatedNames(g, s.ns, "fleet") }).
				WithTimeout(60*time.Second).WithPolling(200*time.Millisecond).Should(ConsistOf(names), "the generated SyncTargets")
			for _, c := range clusters {
				for _, app := range apps {
					st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: c + "-" + app, Namespace: s.ns}}
					s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
						healthy(g, st, rev)
						g.Expect(st.Labels).To(HaveKeyWithValue("cluster", c))
						g.Expect(st.Spec.Path).To(Equal("apps/" + app))
						g.Expect(st.Spec.KubeConfig.SecretRef.Name).To(Equal(c + "-kc"))
					})
					g.Expect(rc.value(nsOf(c), app)).To(Equal(app+"-1"), "%s/%s on the remote cluster", nsOf(c), app)
				}
			}
			expectSetReady(t, set, len(names))
		}
		expect(rev, "web", "api", "db")
		s.latency("set created→6 targets healthy (remote)", time.Since(created))

		// A directory added in Git: one more SyncTarget per cluster.
		added := time.Now()
		rev = r.commit(map[string]string{"apps/queue/cm.yaml": configMap("queue", "queue-1")})
		expect(rev, "web", "api", "db", "queue")
		s.latency("directory added→2 more targets healthy", time.Since(added))

		// A directory removed: its SyncTargets are deleted, and their objects pruned.
		rev = r.remove("apps/db/cm.yaml")
		expect(rev, "web", "api", "queue")
		g.Eventually(func(g Gomega) {
			for _, c := range clusters {
				rc.gone(g, nsOf(c), "db", &corev1.ConfigMap{})
			}
		}).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "the removed directory's objects are pruned")
	})
}

// Scenario 52: a SyncTargetSet rolls a template change out in two steps, staging then
// production. A change whose Deployment never becomes Available fails at staging: the
// production SyncTargets keep the old spec and their objects, and the set says which
// SyncTarget failed and where the rollout stopped. A fixed template then reaches staging,
// and after it production.
func TestFleetProgressiveRolloutStops(t *testing.T) {
	run(t, 52, "SyncTargetSet: a failed step stops the rollout", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		files := map[string]string{}
		for v, sel := range map[string]string{"v1": "", "v2": "no-such-node: anywhere", "v3": ""} {
			files[v+"/web.yaml"] = deployment("web", 1, "example.com/web:"+v, sel)
			files[v+"/settings.yaml"] = configMap("settings", v)
		}
		r := s.repo("rings")
		rev := r.commit(files)
		targets := map[string]string{"staging": "staging", "prod-eu": "production", "prod-us": "production"}
		elements := []map[string]string{}
		for name, env := range targets {
			s.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.app + "-" + name}})
			elements = append(elements, map[string]string{"name": name, "env": env})
		}
		spec := func(path string) apiextensionsv1.JSON {
			return fleetSpec(g, r, map[string]any{"path": path, "targetNamespace": s.app + "-{{ .name }}"})
		}
		set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: "rings", Namespace: s.ns},
			Spec: convergev1.SyncTargetSetSpec{
				Generators: []convergev1.Generator{{List: &convergev1.ListGenerator{Elements: elements}}},
				Template: convergev1.SyncTargetTemplate{
					Metadata: convergev1.SyncTargetTemplateMeta{Name: "{{ .name }}", Labels: map[string]string{"env": "{{ .env }}"}},
					Spec:     spec("v1"),
				},
				Strategy: &convergev1.RolloutStrategy{Steps: []convergev1.RolloutStep{
					{MatchLabels: map[string]string{"env": "staging"}}, {MatchLabels: map[string]string{"env": "production"}}}},
			}}
		s.create(set)
		target := func(name string) *convergev1.SyncTarget {
			return &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns}}
		}
		// expectAt waits for every SyncTarget to be healthy with path, and its objects.
		expectAt := func(path string) {
			t.Helper()
			for name := range targets {
				s.eventually(target(name), 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
					g.Expect(st.Spec.Path).To(Equal(path))
					healthy(g, st, rev)
				})
				g.Expect(configMapValue(g, s.app+"-"+name, "settings")).To(Equal(path))
			}
			expectSetReady(t, set, len(targets))
		}
		expectAt("v1")
		staging := get(g, target("staging"))
		for _, name := range []string{"prod-eu", "prod-us"} {
			g.Expect(get(g, target(name)).CreationTimestamp.Time).NotTo(BeTemporally("<", staging.Status.History[0].FinishedAt.Time),
				"production is created once staging is Ready")
		}
		update := func(path string) {
			t.Helper()
			g.Eventually(func(g Gomega) {
				got := getSet(g, set)
				got.Spec.Template.Spec = spec(path)
				g.Expect(suite.k8s.Update(ctx, got)).To(Succeed())
			}).WithTimeout(10 * time.Second).Should(Succeed())
		}

		// The bad change fails at staging; production is not touched.
		prod := map[string]*convergev1.SyncTarget{}
		for _, name := range []string{"prod-eu", "prod-us"} {
			prod[name] = get(g, target(name))
		}
		update("v2")
		s.eventually(target("staging"), 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Spec.Path).To(Equal("v2"))
			g.Expect(st.Status.ObservedGeneration).To(Equal(st.Generation))
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready(st).Reason).To(Equal(convergev1.HealthCheckFailedReason), ready(st).Message)
			g.Expect(ready(st).Message).To(ContainSubstring("Deployment " + s.app + "-staging/web"))
		})
		g.Eventually(func(g Gomega) {
			got := getSet(g, set)
			g.Expect(setReady(got).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(setReady(got).Reason).To(Equal(convergev1.RolloutFailedReason))
			g.Expect(setReady(got).Message).To(And(ContainSubstring("SyncTarget staging failed (HealthCheckFailed"),
				ContainSubstring("the rollout stopped at step 0")))
			for name := range prod {
				g.Expect(got.Status.Targets).To(ContainElement(And(HaveField("Name", name), HaveField("Pending", true), HaveField("Step", int32(1)))))
			}
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		g.Consistently(func(g Gomega) {
			for name, before := range prod {
				now := get(g, target(name))
				g.Expect(now.Generation).To(Equal(before.Generation), "%s is not updated", name)
				g.Expect(now.Spec.Path).To(Equal("v1"))
				healthy(g, now, rev)
				g.Expect(configMapValue(g, s.app+"-"+name, "settings")).To(Equal("v1"))
			}
		}).WithTimeout(5 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

		// Fixed: staging first, then production.
		update("v3")
		expectAt("v3")
		d := &appsv1.Deployment{}
		object(g, s.app+"-prod-eu", "web", d)
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/web:v3"))
	})
}
