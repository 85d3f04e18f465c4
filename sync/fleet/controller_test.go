package fleet

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
)

// spec is a SyncTarget spec template following url at path, as JSON.
func spec(g Gomega, fields map[string]any) apiextensionsv1.JSON {
	b, err := json.Marshal(fields)
	g.Expect(err).NotTo(HaveOccurred())
	return apiextensionsv1.JSON{Raw: b}
}

func gitSpec(url, path string) map[string]any {
	return map[string]any{
		"source": map[string]any{"url": url, "ref": map[string]any{"branch": "main"}},
		"path":   path, "prune": true,
	}
}

func createSet(t *testing.T, set *convergev1.SyncTargetSet) {
	t.Helper()
	if err := k8s.Create(context.Background(), set); err != nil {
		t.Fatal(err)
	}
}

func clusterSecret(t *testing.T, ns, name, cluster string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
		Labels: map[string]string{convergev1.ClusterLabel: cluster}}, Data: map[string][]byte{"value": []byte("x")}}
	if err := k8s.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// A set of clusters × Git directories: 2 × 3 SyncTargets; a directory added in Git adds
// one per cluster, one removed deletes them; a template change updates them in place.
func TestClustersTimesGitDirectories(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "fleet")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	repo.Commit(t, "main", map[string]string{"apps/web/k.yaml": "a", "apps/api/k.yaml": "b", "apps/db/k.yaml": "c"})
	clusterSecret(t, ns, "prod-kubeconfig", "prod")
	clusterSecret(t, ns, "staging", "")

	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "fleet"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{Matrix: &convergev1.MatrixGenerator{Generators: []convergev1.BaseGenerator{
				{Clusters: &convergev1.ClustersGenerator{}},
				{GitDirectories: &convergev1.GitDirectoriesGenerator{Include: []string{"apps/*"}, Source: convergev1.GitSource{
					URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"}, Interval: &metav1.Duration{Duration: time.Second}}}},
			}}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "{{ .name }}-{{ .path.basename }}",
					Labels: map[string]string{"cluster": "{{ .name }}"}},
				Spec: spec(g, gitSpec(srv.RepoURL(repo), "{{ .path }}")),
			},
		}}
	createSet(t, set)
	want := []string{"prod-web", "prod-api", "prod-db", "staging-web", "staging-api", "staging-db"}
	eventually(t, func(g Gomega) { g.Expect(generated(g, ns, "fleet")).To(HaveLen(6)) })
	sts := generated(g, ns, "fleet")
	for _, name := range want {
		g.Expect(sts).To(HaveKey(name))
	}
	st := sts["staging-api"]
	g.Expect(st.Spec.Path).To(Equal("apps/api"))
	g.Expect(st.Labels).To(HaveKeyWithValue("cluster", "staging"))
	g.Expect(metav1ControllerOf(st)).To(HaveField("Name", "fleet"))
	eventually(t, func(g Gomega) {
		set := getSet(g, ns, "fleet")
		g.Expect(set.Status.Targets).To(HaveLen(6))
		g.Expect(setReady(set).Reason).To(Equal(convergev1.RolloutProgressingReason), "no SyncTarget is Ready here")
	})
	uid := st.UID

	// A directory added in Git: one more SyncTarget per cluster.
	repo.Commit(t, "main", map[string]string{"apps/queue/k.yaml": "d"})
	eventually(t, func(g Gomega) {
		g.Expect(generated(g, ns, "fleet")).To(And(HaveLen(8), HaveKey("prod-queue"), HaveKey("staging-queue")))
	})
	// One removed: its SyncTargets are deleted.
	repo.CommitChanges(t, "main", gittest.Change{Path: "apps/db/k.yaml", Delete: true})
	eventually(t, func(g Gomega) {
		g.Expect(generated(g, ns, "fleet")).To(And(HaveLen(6), Not(HaveKey("prod-db")), Not(HaveKey("staging-db"))))
	})
	gone := &convergev1.SyncTarget{}
	g.Expect(apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "prod-db"}, gone))).To(BeTrue())

	// A template change: updated in place.
	eventually(t, func(g Gomega) {
		set := getSet(g, ns, "fleet")
		set.Spec.Template.Spec = spec(g, gitSpec(srv.RepoURL(repo), "{{ .path }}/overlays/{{ .name }}"))
		g.Expect(k8s.Update(ctx, set)).To(Succeed())
	})
	eventually(t, func(g Gomega) {
		st := generated(g, ns, "fleet")["staging-api"]
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.Spec.Path).To(Equal("apps/api/overlays/staging"))
		g.Expect(st.UID).To(Equal(uid))
	})
}

func listSet(ns, name string, preserve bool, elems ...map[string]string) *convergev1.SyncTargetSet {
	return &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{List: &convergev1.ListGenerator{Elements: elems}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "{{ .name }}", Labels: map[string]string{"ring": "{{ .ring }}"}},
				Spec:     apiextensionsv1.JSON{Raw: []byte(`{"source": {"url": "https://git.example.com/{{ .name }}.git", "ref": {"branch": "main"}}, "path": "{{ .path }}"}`)},
			},
			PreserveOnDeletion: preserve,
		}}
}

func updateSet(t *testing.T, ns, name string, mutate func(*convergev1.SyncTargetSet)) {
	t.Helper()
	eventually(t, func(g Gomega) {
		set := getSet(g, ns, name)
		mutate(set)
		g.Expect(k8s.Update(context.Background(), set)).To(Succeed())
	})
}

// With preserveOnDeletion, a SyncTarget no longer generated, then every one when the set
// is deleted, is released: it stays, without the set's owner reference and label.
func TestPreserveOnDeletionReleases(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	createSet(t, listSet(ns, "keep", true, map[string]string{"name": "a", "ring": "x", "path": "a"},
		map[string]string{"name": "b", "ring": "x", "path": "b"}))
	eventually(t, func(g Gomega) { g.Expect(generated(g, ns, "keep")).To(HaveLen(2)) })

	updateSet(t, ns, "keep", func(s *convergev1.SyncTargetSet) {
		s.Spec.Generators[0].List.Elements = s.Spec.Generators[0].List.Elements[:1]
	})
	eventually(t, func(g Gomega) { g.Expect(generated(g, ns, "keep")).To(And(HaveLen(1), HaveKey("a"))) })
	released := &convergev1.SyncTarget{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "b"}, released)).To(Succeed())
	g.Expect(released.OwnerReferences).To(BeEmpty())
	g.Expect(released.Labels).NotTo(HaveKey(convergev1.SetLabel))
	g.Expect(released.Spec.Path).To(Equal("b"))

	set := getSet(g, ns, "keep")
	g.Expect(set.Finalizers).To(ContainElement(Finalizer))
	g.Expect(k8s.Delete(ctx, set)).To(Succeed())
	eventually(t, func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKeyFromObject(set), &convergev1.SyncTargetSet{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue())
	})
	a := &convergev1.SyncTarget{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, a)).To(Succeed())
	g.Expect(a.OwnerReferences).To(BeEmpty())
	g.Expect(a.Labels).NotTo(HaveKey(convergev1.SetLabel))
}

// A progressive rollout in two steps: step 1 waits for step 0 to be Ready at its new
// generation, and a failure of step 0 stops it.
func TestProgressiveRollout(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	set := listSet(ns, "rings", false, map[string]string{"name": "canary", "ring": "canary", "path": "v1"},
		map[string]string{"name": "main", "ring": "main", "path": "v1"})
	set.Spec.Strategy = &convergev1.RolloutStrategy{Steps: []convergev1.RolloutStep{
		{MatchLabels: map[string]string{"ring": "canary"}}, {MatchLabels: map[string]string{"ring": "main"}}}}
	createSet(t, set)

	// Created in their step's turn.
	eventually(t, func(g Gomega) { g.Expect(generated(g, ns, "rings")).To(And(HaveLen(1), HaveKey("canary"))) })
	markTarget(t, ns, "canary", metav1.ConditionTrue, convergev1.SucceededReason)
	eventually(t, func(g Gomega) { g.Expect(generated(g, ns, "rings")).To(HaveLen(2)) })
	markTarget(t, ns, "main", metav1.ConditionTrue, convergev1.SucceededReason)
	eventually(t, func(g Gomega) { g.Expect(setReady(getSet(g, ns, "rings")).Status).To(Equal(metav1.ConditionTrue)) })
	mainUID := generated(g, ns, "rings")["main"].UID

	// A change reaches step 0; step 0 fails: step 1 is untouched.
	updateSet(t, ns, "rings", func(s *convergev1.SyncTargetSet) {
		s.Spec.Template.Spec.Raw = []byte(`{"source": {"url": "https://git.example.com/{{ .name }}.git", "ref": {"branch": "main"}}, "path": "v2"}`)
	})
	eventually(t, func(g Gomega) { g.Expect(generated(g, ns, "rings")["canary"].Spec.Path).To(Equal("v2")) })
	markTarget(t, ns, "canary", metav1.ConditionFalse, convergev1.RolledBackReason)
	eventually(t, func(g Gomega) {
		set := getSet(g, ns, "rings")
		g.Expect(setReady(set).Reason).To(Equal(convergev1.RolloutFailedReason))
		g.Expect(setReady(set).Message).To(ContainSubstring("SyncTarget canary failed (RolledBack"))
		g.Expect(set.Status.Targets).To(ContainElement(And(HaveField("Name", "main"), HaveField("Pending", true), HaveField("Step", int32(1)))))
	})
	g.Consistently(func(g Gomega) {
		g.Expect(generated(g, ns, "rings")["main"].Spec.Path).To(Equal("v1"))
	}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

	// Step 0 Ready at its new generation: step 1 is updated, in place.
	markTarget(t, ns, "canary", metav1.ConditionTrue, convergev1.SucceededReason)
	eventually(t, func(g Gomega) {
		st := generated(g, ns, "rings")["main"]
		g.Expect(st.Spec.Path).To(Equal("v2"))
		g.Expect(st.UID).To(Equal(mainUID))
		g.Expect(getSet(g, ns, "rings").Status.CurrentStep).To(Equal(int32(1)))
	})
}

// One rendering the API server refuses (a CEL rule of the SyncTarget CRD), or an invalid
// name, or a name another SyncTarget holds: the set says which parameter set, and nothing
// is written.
func TestInvalidRenderingWritesNothing(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	set := listSet(ns, "cel", false, map[string]string{"name": "good", "ring": "x", "path": "ok"},
		map[string]string{"name": "bad", "ring": "x", "path": "../escape"})
	createSet(t, set)
	expectInvalid := func(name string, parts ...string) {
		eventually(t, func(g Gomega) {
			c := setReady(getSet(g, ns, name))
			g.Expect(c.Reason).To(Equal(convergev1.TemplateInvalidReason))
			for _, p := range parts {
				g.Expect(c.Message).To(ContainSubstring(p))
			}
		})
		g.Consistently(func(g Gomega) { g.Expect(generated(g, ns, name)).To(BeEmpty()) }).
			WithTimeout(time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
	expectInvalid("cel", `name="bad"`, `path="../escape"`, "must be a relative path inside the repository")

	createSet(t, listSet(ns, "badname", false, map[string]string{"name": "Not_Valid", "ring": "x", "path": "p"}))
	expectInvalid("badname", `name="Not_Valid"`, "is not a valid SyncTarget name")

	// Someone's own SyncTarget of that name is not taken over.
	mine := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken"},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: "https://git.example.com/mine.git", Ref: convergev1.GitRef{Branch: "main"}}}}
	g.Expect(k8s.Create(ctx, mine)).To(Succeed())
	createSet(t, listSet(ns, "thief", false, map[string]string{"name": "taken", "ring": "x", "path": "p"}))
	expectInvalid("thief", "exists and was not generated by this set")
	g.Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "taken"}, mine)).To(Succeed())
	g.Expect(mine.Spec.Source.URL).To(Equal("https://git.example.com/mine.git"))
	g.Expect(mine.OwnerReferences).To(BeEmpty())

	// A template cannot name another namespace: the API server refuses the field, or, when
	// not asked to be strict, drops it; the SyncTarget lands in the set's namespace.
	other := &unstructured.Unstructured{}
	other.SetUnstructuredContent(map[string]any{"apiVersion": convergev1.GroupVersion.String(), "kind": convergev1.SyncTargetSetKind,
		"metadata": map[string]any{"name": "elsewhere", "namespace": ns},
		"spec": map[string]any{
			"generators": []any{map[string]any{"list": map[string]any{"elements": []any{map[string]any{"n": "x"}}}}},
			"template": map[string]any{"metadata": map[string]any{"name": "{{ .n }}", "namespace": "kube-system"},
				"spec": map[string]any{"source": map[string]any{"url": "https://git.example.com/x.git", "ref": map[string]any{"branch": "main"}}}},
		}})
	g.Expect(k8s.Create(ctx, other.DeepCopy(), client.FieldValidation("Strict"))).To(MatchError(ContainSubstring(`unknown field "spec.template.metadata.namespace"`)))
	g.Expect(k8s.Create(ctx, other)).To(Succeed())
	eventually(t, func(g Gomega) { g.Expect(generated(g, ns, "elsewhere")).To(HaveKey("x")) })
	list := &convergev1.SyncTargetList{}
	g.Expect(k8s.List(ctx, list, client.InNamespace("kube-system"))).To(Succeed())
	g.Expect(list.Items).To(BeEmpty())

	// Fixed: written.
	updateSet(t, ns, "cel", func(s *convergev1.SyncTargetSet) { s.Spec.Generators[0].List.Elements[1]["path"] = "fine" })
	eventually(t, func(g Gomega) { g.Expect(generated(g, ns, "cel")).To(HaveLen(2)) })

	// A change that leaves one existing SyncTarget invalid changes none of them.
	paths := func(g Gomega) map[string]string {
		out := map[string]string{}
		for name, st := range generated(g, ns, "cel") {
			out[name] = st.Spec.Path
		}
		return out
	}
	updateSet(t, ns, "cel", func(s *convergev1.SyncTargetSet) {
		s.Spec.Generators[0].List.Elements[0]["path"] = "moved"
		s.Spec.Generators[0].List.Elements[1]["path"] = "/absolute"
	})
	eventually(t, func(g Gomega) {
		c := setReady(getSet(g, ns, "cel"))
		g.Expect(c.Reason).To(Equal(convergev1.TemplateInvalidReason))
		g.Expect(c.Message).To(And(ContainSubstring(`path="/absolute"`), ContainSubstring("must be a relative path inside the repository")))
	})
	g.Consistently(paths).WithTimeout(time.Second).WithPolling(200 * time.Millisecond).
		Should(Equal(map[string]string{"good": "ok", "bad": "fine"}))
}
