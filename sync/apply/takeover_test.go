package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// clusterClient returns a client of the shared cluster and a fresh namespace in it.
func clusterClient(t *testing.T, prefix string) (client.Client, string) {
	t.Helper()
	c, err := client.New(testCluster(t).Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()%1_000_000_000)
	nsObj := parse(t, `{apiVersion: v1, kind: Namespace, metadata: {name: `+ns+`}}`)
	if err := c.Create(t.Context(), nsObj); err != nil {
		t.Fatal(err)
	}
	return c, ns
}

// gitDeployment is the Deployment web as Git has it, in ns, with converge's owner labels.
func gitDeployment(t *testing.T, ns string) *unstructured.Unstructured {
	return withOwner(parse(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: `+ns+`, labels: {app: web}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: registry.example/web:1.0
        env: [{name: MODE, value: blue}]
`))
}

// gitConfigMap is the ConfigMap conf as Git has it, in ns, with converge's owner labels.
func gitConfigMap(t *testing.T, ns string) *unstructured.Unstructured {
	return withOwner(parse(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: conf, namespace: `+ns+`, labels: {app: web}}, data: {mode: blue}}`))
}

func withOwner(u *unstructured.Unstructured) *unstructured.Unstructured {
	l := u.GetLabels()
	l[convergev1.NameLabel], l[convergev1.NamespaceLabel] = "app", "team"
	u.SetLabels(l)
	return u
}

// theirs is o as another tool wrote it: without converge's owner labels, with what Git
// does not have: a label, and for a ConfigMap an annotation and a data key.
func theirs(o *unstructured.Unstructured) *unstructured.Unstructured {
	u := o.DeepCopy()
	l := u.GetLabels()
	delete(l, convergev1.NameLabel)
	delete(l, convergev1.NamespaceLabel)
	l["extra"] = "x"
	u.SetLabels(l)
	u.SetAnnotations(map[string]string{})
	if u.GetKind() == "ConfigMap" {
		u.SetAnnotations(map[string]string{"extra": "x"})
		_ = unstructured.SetNestedField(u.Object, "x", "data", "extra")
	}
	return u
}

// A writer writes an object the way one tool does.
type writer func(ctx context.Context, c client.Client, o *unstructured.Unstructured) error

// serverSide applies o as manager, as Flux, Argo CD (server-side) and kubectl --server-side do.
func serverSide(manager string) writer {
	return func(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
		//nolint:staticcheck // client.Apply as a patch type, as the apply does
		return c.Patch(ctx, o, client.Apply, client.ForceOwnership, client.FieldOwner(manager))
	}
}

// created creates o as manager (an Update operation), with kubectl's
// last-applied-configuration when lastApplied, as client-side apply does.
func created(manager string, lastApplied bool) writer {
	return func(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
		if lastApplied {
			b, err := json.Marshal(o.Object)
			if err != nil {
				return err
			}
			a := o.GetAnnotations()
			a[corev1.LastAppliedConfigAnnotation] = string(b)
			o.SetAnnotations(a)
		}
		return c.Create(ctx, o, client.FieldOwner(manager))
	}
}

// changed creates o without its extras as kubectl create does, then adds them as manager
// does: with an update (kubectl edit) or a merge patch (kubectl patch, helm).
func changed(manager string, patch bool) writer {
	return func(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
		first := o.DeepCopy()
		first.SetAnnotations(nil)
		l := first.GetLabels()
		delete(l, "extra")
		first.SetLabels(l)
		unstructured.RemoveNestedField(first.Object, "data", "extra")
		if err := c.Create(ctx, first, client.FieldOwner("kubectl-create")); err != nil {
			return err
		}
		if patch {
			return c.Patch(ctx, o, client.MergeFrom(first), client.FieldOwner(manager))
		}
		o.SetResourceVersion(first.GetResourceVersion())
		return c.Update(ctx, o, client.FieldOwner(manager))
	}
}

var tools = []struct {
	name  string
	write writer
}{
	{"kustomize-controller", serverSide("kustomize-controller")},
	{"helm-controller", created("helm-controller", false)},
	{"helm SDK (three-way merge)", changed("helm", true)},
	{"Argo CD server-side", serverSide("argocd-controller")},
	{"Argo CD client-side", created("argocd-controller", true)},
	{"kubectl apply", created("kubectl-client-side-apply", true)},
	{"kubectl edit", changed("kubectl-edit", false)},
	{"kubectl patch", changed("kubectl-patch", true)},
	{"kubectl apply --server-side", serverSide("kubectl")},
	{"kubectl create", created("kubectl-create", false)},
}

// TestApplyTakesOverOtherToolsObjects: for each tool, a Deployment and a ConfigMap it
// made, with a label, an annotation and a data key Git does not have, are taken over in
// place by converge's apply: same UID, the extras gone, converge the only manager, and the
// Deployment not rolled out (same generation and template). The next apply changes nothing.
func TestApplyTakesOverOtherToolsObjects(t *testing.T) {
	for i, tool := range tools {
		t.Run(tool.name, func(t *testing.T) {
			g := NewWithT(t)
			ctx := t.Context()
			c, ns := clusterClient(t, fmt.Sprintf("takeover%d", i))
			git := []*unstructured.Unstructured{gitDeployment(t, ns), gitConfigMap(t, ns)}
			before := make([]*unstructured.Unstructured, len(git))
			for k, o := range git {
				g.Expect(tool.write(ctx, c, theirs(o))).To(Succeed())
				before[k] = get(t, c, o)
			}

			res, err := Applier{}.Apply(ctx, c, copies(git), nil, time.Minute, Options{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Configured).To(Equal(2))
			for k, o := range git {
				after := get(t, c, o)
				g.Expect(after.GetUID()).To(Equal(before[k].GetUID()), "taken over in place")
				g.Expect(after.GetLabels()).NotTo(HaveKey("extra"))
				g.Expect(after.GetLabels()).To(HaveKeyWithValue(convergev1.NameLabel, "app"))
				g.Expect(after.GetAnnotations()).To(BeEmpty(), "the extra annotation and last-applied-configuration are gone")
				g.Expect(managers(after)).To(ConsistOf("converge/Apply"))
				if o.GetKind() == "ConfigMap" {
					g.Expect(after.Object["data"]).To(Equal(map[string]any{"mode": "blue"}))
					continue
				}
				// No rollout: the template (hence its hash) is the same. The API server counts
				// a change of a Deployment's annotations as a new generation: only removing
				// kubectl's last-applied-configuration makes one.
				g.Expect(after.Object["spec"].(map[string]any)["template"]).To(Equal(before[k].Object["spec"].(map[string]any)["template"]))
				if _, csa := before[k].GetAnnotations()[corev1.LastAppliedConfigAnnotation]; !csa {
					g.Expect(after.GetGeneration()).To(Equal(before[k].GetGeneration()), "no new generation")
				}
			}

			res, err = Applier{}.Apply(ctx, c, copies(git), nil, time.Minute, Options{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Unchanged).To(Equal(2), "taken over once")
		})
	}
}

// TestApplyTakeoverKeepsOtherSyncTargetsAndMerge: an object whose labels name another
// SyncTarget, or whose policy says Merge, keeps the other managers' fields.
func TestApplyTakeoverKeepsOtherSyncTargetsAndMerge(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c, ns := clusterClient(t, "takeover-kept")

	merge := gitConfigMap(t, ns)
	merge.SetAnnotations(map[string]string{FluxSSAAnnotation: "merge"})
	g.Expect(created("kubectl-create", false)(ctx, c, theirs(merge))).To(Succeed())
	_, err := Applier{}.Apply(ctx, c, []*unstructured.Unstructured{merge.DeepCopy()}, nil, time.Minute, Options{})
	g.Expect(err).NotTo(HaveOccurred())
	live := get(t, c, merge)
	g.Expect(live.Object["data"]).To(HaveKeyWithValue("extra", "x"), "Merge leaves other managers' fields")
	g.Expect(managers(live)).To(ContainElement("kubectl-create/Update"))

	// Pure: the decision never takes over an object another SyncTarget's labels claim.
	other := theirs(gitConfigMap(t, ns))
	other.SetLabels(map[string]string{convergev1.NameLabel: "other", convergev1.NamespaceLabel: "team"})
	other.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl-create", Operation: metav1.ManagedFieldsOperationUpdate}})
	g.Expect(TakesOver(gitConfigMap(t, ns), other, true)).To(BeFalse())
	other.SetLabels(nil)
	g.Expect(TakesOver(gitConfigMap(t, ns), other, true)).To(BeTrue())
}

// TestApplyCleansUpOtherToolsMetadata: with CleanUpOtherTools, the labels and
// annotations Flux, Helm and Argo CD leave are removed even when a manager converge does
// not know set them; without it they stay. Git's own labels stay either way.
func TestApplyCleansUpOtherToolsMetadata(t *testing.T) {
	for _, cleanUp := range []bool{false, true} {
		t.Run(fmt.Sprint("cleanUp=", cleanUp), func(t *testing.T) {
			g := NewWithT(t)
			ctx := t.Context()
			c, ns := clusterClient(t, "cleanup")
			git := gitConfigMap(t, ns)
			l := git.GetLabels()
			l["helm.sh/chart"] = "web-1.0" // Git sets it: it stays
			git.SetLabels(l)
			live := git.DeepCopy()
			live.SetLabels(map[string]string{"app": "web", "helm.sh/chart": "web-0.9", "app.kubernetes.io/managed-by": "Helm",
				"app.kubernetes.io/instance": "web", "kustomize.toolkit.fluxcd.io/name": "apps"})
			live.SetAnnotations(map[string]string{"meta.helm.sh/release-name": "web", "argocd.argoproj.io/sync-wave": "1", "keep": "me"})
			g.Expect(c.Create(ctx, live, client.FieldOwner("some-other-tool"))).To(Succeed())

			_, err := Applier{}.Apply(ctx, c, []*unstructured.Unstructured{git.DeepCopy()}, nil, time.Minute, Options{CleanUpOtherTools: cleanUp})
			g.Expect(err).NotTo(HaveOccurred())
			got := get(t, c, git)
			g.Expect(got.GetLabels()).To(HaveKeyWithValue("helm.sh/chart", "web-1.0"))
			g.Expect(got.GetLabels()).To(HaveKeyWithValue("app.kubernetes.io/instance", "web"), "not Argo CD's: no Argo CD manager")
			g.Expect(got.GetAnnotations()).To(HaveKeyWithValue("keep", "me"))
			for _, k := range []string{"app.kubernetes.io/managed-by", "kustomize.toolkit.fluxcd.io/name"} {
				if cleanUp {
					g.Expect(got.GetLabels()).NotTo(HaveKey(k))
				} else {
					g.Expect(got.GetLabels()).To(HaveKey(k))
				}
			}
			for _, k := range []string{"meta.helm.sh/release-name", "argocd.argoproj.io/sync-wave"} {
				if cleanUp {
					g.Expect(got.GetAnnotations()).NotTo(HaveKey(k))
				} else {
					g.Expect(got.GetAnnotations()).To(HaveKey(k))
				}
			}
		})
	}
}

func get(t *testing.T, c client.Client, o *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(o.GroupVersionKind())
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(o), u); err != nil {
		t.Fatal(err)
	}
	return u
}

func copies(objects []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objects))
	for i, o := range objects {
		out[i] = o.DeepCopy()
	}
	return out
}

// managers names the managers of o's fields (subresources aside) as "manager/Operation".
func managers(o *unstructured.Unstructured) []string {
	var out []string
	for _, e := range o.GetManagedFields() {
		if e.Subresource == "" {
			out = append(out, e.Manager+"/"+string(e.Operation))
		}
	}
	return out
}

// TestOtherToolLabelsArgoTracking: the app.kubernetes.io/instance label is Argo CD's only
// when Argo CD manages the object and tracks it by label (no tracking-id annotation).
func TestOtherToolLabelsArgoTracking(t *testing.T) {
	g := NewWithT(t)
	git := parse(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, labels: {app: web}}}`)
	live := parse(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c, labels: {app: web, app.kubernetes.io/instance: shop}}}`)
	g.Expect(otherToolLabels(git, live)).NotTo(ContainElement(instanceLabel), "no Argo CD manager")

	live.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "argocd-controller", Operation: metav1.ManagedFieldsOperationApply}})
	g.Expect(otherToolLabels(git, live)).To(ContainElement(instanceLabel), "tracked by label")

	live.SetAnnotations(map[string]string{argoTrackingIDKey: "shop:/ConfigMap:default/c"})
	g.Expect(otherToolLabels(git, live)).NotTo(ContainElement(instanceLabel), "tracked by annotation")

	live.SetAnnotations(nil)
	git.SetLabels(map[string]string{"app": "web", instanceLabel: "shop"})
	g.Expect(otherToolLabels(git, live)).NotTo(ContainElement(instanceLabel), "Git sets it")
}

// toolMetadata is, per tool, how it writes an object and the labels and annotations it
// leaves on it.
var toolMetadata = []struct {
	name              string
	manager           string
	write             writer
	labels, annotated map[string]string
}{
	{"Helm", "helm/Update", created("helm", false),
		map[string]string{"helm.sh/chart": "web-1.0", "app.kubernetes.io/managed-by": "Helm"},
		map[string]string{"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "shop"}},
	{"Flux", "kustomize-controller/Apply", serverSide("kustomize-controller"),
		map[string]string{"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "flux-system"},
		nil},
	{"Argo CD, tracking by annotation", "argocd-controller/Apply", serverSide("argocd-controller"),
		nil,
		map[string]string{"argocd.argoproj.io/tracking-id": "shop:apps/Deployment:shop/web", "argocd.argoproj.io/sync-wave": "1"}},
	{"Argo CD, tracking by label", "argocd-controller/Update", created("argocd-controller", true),
		map[string]string{"app.kubernetes.io/instance": "shop"},
		nil},
}

// TestTakeoverKeepsOtherToolsMetadataUnlessCleanUp: a Deployment Helm, Flux or Argo CD
// made, with their labels and annotations and a label Git does not have, is taken over in
// place (same UID, same Pod template). Without CleanUpOtherTools the tool's labels and
// annotations stay, with their values, owned by the tool's entry that holds nothing else,
// while the other label is removed; with it, they are removed and converge is the only
// manager. Either way the next apply changes nothing.
func TestTakeoverKeepsOtherToolsMetadataUnlessCleanUp(t *testing.T) {
	for i, tool := range toolMetadata {
		for _, cleanUp := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/cleanUp=%v", tool.name, cleanUp), func(t *testing.T) {
				g := NewWithT(t)
				ctx := t.Context()
				c, ns := clusterClient(t, fmt.Sprintf("keepmeta%d", i))
				git := gitDeployment(t, ns)
				o := theirs(git)
				o.SetLabels(merge(o.GetLabels(), tool.labels))
				o.SetAnnotations(merge(o.GetAnnotations(), tool.annotated))
				g.Expect(tool.write(ctx, c, o)).To(Succeed())
				before := get(t, c, git)

				opts := Options{CleanUpOtherTools: cleanUp}
				res, err := Applier{}.Apply(ctx, c, copies([]*unstructured.Unstructured{git}), nil, time.Minute, opts)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(res.Configured).To(Equal(1))
				after := get(t, c, git)
				g.Expect(after.GetUID()).To(Equal(before.GetUID()), "taken over in place")
				g.Expect(after.Object["spec"].(map[string]any)["template"]).To(Equal(before.Object["spec"].(map[string]any)["template"]))
				g.Expect(after.GetLabels()).NotTo(HaveKey("extra"), "fields Git does not set are removed")
				g.Expect(after.GetLabels()).To(HaveKeyWithValue(convergev1.NameLabel, "app"))
				g.Expect(after.GetAnnotations()).NotTo(HaveKey(corev1.LastAppliedConfigAnnotation))
				for k, v := range tool.labels {
					if cleanUp {
						g.Expect(after.GetLabels()).NotTo(HaveKey(k))
					} else {
						g.Expect(after.GetLabels()).To(HaveKeyWithValue(k, v))
					}
				}
				for k, v := range tool.annotated {
					if cleanUp {
						g.Expect(after.GetAnnotations()).NotTo(HaveKey(k))
					} else {
						g.Expect(after.GetAnnotations()).To(HaveKeyWithValue(k, v))
					}
				}
				if cleanUp {
					g.Expect(managers(after)).To(ConsistOf("converge/Apply"))
				} else {
					g.Expect(managers(after)).To(ConsistOf("converge/Apply", tool.manager))
					g.Expect(ownedMetadata(t, after, tool.manager)).To(ConsistOf(metadataPaths(tool.labels, tool.annotated)),
						"the tool's entry holds its metadata and nothing else")
				}

				res, err = Applier{}.Apply(ctx, c, copies([]*unstructured.Unstructured{git}), nil, time.Minute, opts)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(res.Unchanged).To(Equal(1), "taken over once")
			})
		}
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// ownedMetadata are the fields of o that the entry of manager ("name/Operation") holds,
// as paths like labels/k and annotations/k; any other field fails the test.
func ownedMetadata(t *testing.T, o *unstructured.Unstructured, manager string) []string {
	t.Helper()
	for _, e := range o.GetManagedFields() {
		if e.Manager+"/"+string(e.Operation) != manager || e.Subresource != "" {
			continue
		}
		var fields map[string]map[string]map[string]any
		if err := json.Unmarshal(e.FieldsV1.GetRawBytes(), &fields); err != nil {
			t.Fatalf("the entry of %s holds more than metadata: %s", manager, e.FieldsV1.GetRawBytes())
		}
		var out []string
		for top, metadata := range fields {
			for field, keys := range metadata {
				for k := range keys {
					out = append(out, top+"/"+field+"/"+k)
				}
			}
		}
		return out
	}
	return nil
}

func metadataPaths(labels, annotations map[string]string) []string {
	var out []string
	for k := range labels {
		out = append(out, "f:metadata/f:labels/f:"+k)
	}
	for k := range annotations {
		out = append(out, "f:metadata/f:annotations/f:"+k)
	}
	return out
}

// TestHandOver: the entries of the tools converge takes over are merged into converge's
// apply entry but for the kept fields, which stay in an entry of their manager; an entry
// holding only kept fields, and the entries of other managers, are left as they are.
func TestHandOver(t *testing.T) {
	g := NewWithT(t)
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: "v1", FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(fields)}
	}
	live := parse(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: c}}`)
	live.SetManagedFields([]metav1.ManagedFieldsEntry{
		entry("helm", metav1.ManagedFieldsOperationUpdate,
			`{"f:data":{"f:a":{}},"f:metadata":{"f:labels":{".":{},"f:helm.sh/chart":{},"f:app":{}}}}`),
		entry("kustomize-controller", metav1.ManagedFieldsOperationApply,
			`{"f:metadata":{"f:labels":{"f:kustomize.toolkit.fluxcd.io/name":{}}}}`),
		entry("someone", metav1.ManagedFieldsOperationUpdate, `{"f:data":{"f:b":{}}}`),
		entry(FieldManager, metav1.ManagedFieldsOperationApply, `{"f:data":{"f:c":{}}}`),
	})
	keep := metadataFields([]string{"helm.sh/chart", "kustomize.toolkit.fluxcd.io/name"}, nil)

	got, err := handOver(live, keep)
	g.Expect(err).NotTo(HaveOccurred())
	fields := map[string]string{}
	for _, e := range got {
		fields[e.Manager+"/"+string(e.Operation)] = e.FieldsV1.GetRawString()
	}
	g.Expect(fields).To(Equal(map[string]string{
		"helm/Update":                `{"f:metadata":{"f:labels":{"f:helm.sh/chart":{}}}}`,
		"kustomize-controller/Apply": `{"f:metadata":{"f:labels":{"f:kustomize.toolkit.fluxcd.io/name":{}}}}`,
		"someone/Update":             `{"f:data":{"f:b":{}}}`,
		"converge/Apply":             `{"f:data":{"f:a":{},"f:c":{}},"f:metadata":{"f:labels":{".":{},"f:app":{}}}}`,
	}))
	g.Expect(got[len(got)-1].Manager).To(Equal(FieldManager))

	got, err = handOver(live, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(HaveLen(2), "without kept fields, every taken over entry is merged")

	live.SetManagedFields(live.GetManagedFields()[1:]) // only kept fields to take over
	got, err = handOver(live, keep)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(BeNil(), "nothing handed over")
}
