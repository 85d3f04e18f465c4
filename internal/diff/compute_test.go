package diff

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
)

// owner is the SyncTarget the tests render for; it need not exist.
var owner = types.NamespacedName{Namespace: "team", Name: "app"}

// fixture is one test's namespace on the shared API server.
type fixture struct {
	t  *testing.T
	c  client.Client
	ns string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	c := cluster(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "diff-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, c: c, ns: ns.Name}
}

// render renders files (path → content, "NS" replaced by the fixture's namespace) as the
// daemon does for owner, with the fixture's namespace as target namespace.
func (f *fixture) render(files map[string]string) []*unstructured.Unstructured {
	f.t.Helper()
	dir := f.t.TempDir()
	for p, content := range files {
		files[p] = strings.ReplaceAll(content, "NS", f.ns)
	}
	writeTree(f.t, dir, files)
	objs, err := Render(context.Background(), f.c.RESTMapper(), RenderOptions{
		Root: dir, TargetNamespace: f.ns, OwnerName: owner.Name, OwnerNamespace: owner.Namespace,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return objs
}

// apply applies objects as the daemon does: server-side, field manager converge, forced.
func (f *fixture) apply(objs ...*unstructured.Unstructured) {
	f.t.Helper()
	for _, o := range objs {
		err := f.c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
			client.ForceOwnership, client.FieldOwner(apply.FieldManager))
		if err != nil {
			f.t.Fatalf("applying %s: %v", describe(o), err)
		}
	}
}

func (f *fixture) compute(objs []*unstructured.Unstructured, opts Options) (*Result, error) {
	return Compute(context.Background(), f.c, objs, opts)
}

// verdictOf finds the verdict on kind/name; it fails the test when there is none.
func verdictOf(t *testing.T, r *Result, kind, name string) Object {
	t.Helper()
	for _, o := range r.Objects {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	t.Fatalf("no verdict on %s %s in %+v", kind, name, r.Objects)
	return Object{}
}

// allOutputs are what a user can see of r: text, markdown and JSON.
func allOutputs(t *testing.T, r *Result) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteText(&b, r, Colors{}); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&b, r, ""); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(r.Objects)
	if err != nil {
		t.Fatal(err)
	}
	b.Write(js)
	return b.String()
}

const deployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:IMAGE"}]
`

const configMap = `apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: MODE}
`

const service = `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80}]
`

func TestComputeNoChanges(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	files := map[string]string{
		"deploy.yaml": strings.ReplaceAll(deployment, "IMAGE", "1.27"),
		"cm.yaml":     strings.ReplaceAll(configMap, "MODE", "blue"),
		"svc.yaml":    service,
	}
	objs := f.render(files)
	f.apply(objs...)

	r, err := f.compute(objs, Options{Owner: owner, Prune: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.HasChanges()).To(BeFalse())
	g.Expect(r.Summary()).To(Equal(Summary{Unchanged: 3}))
	for _, o := range r.Objects {
		g.Expect(o.Diff).To(BeEmpty())
	}
	var b bytes.Buffer
	g.Expect(WriteText(&b, r, Colors{})).To(Succeed())
	g.Expect(b.String()).To(Equal("0 to create, 0 to change, 0 to prune, 3 unchanged\n"))
}

func TestComputeChanges(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.apply(f.render(map[string]string{
		"deploy.yaml": strings.ReplaceAll(deployment, "IMAGE", "1.27"),
		"cm.yaml":     strings.ReplaceAll(configMap, "MODE", "blue"),
	})...)

	objs := f.render(map[string]string{
		"deploy.yaml": strings.ReplaceAll(deployment, "IMAGE", "1.28"),
		"cm.yaml":     strings.ReplaceAll(configMap, "MODE", "blue"),
		"svc.yaml":    service,
	})
	r, err := f.compute(objs, Options{Owner: owner})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Summary()).To(Equal(Summary{Create: 1, Change: 1, Unchanged: 1}))

	web := verdictOf(t, r, "Deployment", "web")
	g.Expect(web.Action).To(Equal(Change))
	g.Expect(web.Ref()).To(Equal("apps/v1 Deployment " + f.ns + "/web"))
	g.Expect(web.Diff).To(ContainSubstring("\n-      - image: nginx:1.27\n+      - image: nginx:1.28\n"))
	for _, stripped := range []string{"managedFields", "resourceVersion", "uid:", "generation", "creationTimestamp", "status:"} {
		g.Expect(web.Diff).NotTo(ContainSubstring(stripped))
	}

	svc := verdictOf(t, r, "Service", "web")
	g.Expect(svc.Action).To(Equal(Create))
	// The dry-run result: defaulted by the API server, owner labels set.
	g.Expect(svc.Diff).To(ContainSubstring("+    protocol: TCP\n"))
	g.Expect(svc.Diff).To(ContainSubstring("+    converge.dev/name: app\n"))
	g.Expect(verdictOf(t, r, "ConfigMap", "settings").Action).To(Equal(Unchanged))

	// Nothing was written.
	live := &unstructured.Unstructured{}
	live.SetAPIVersion("apps/v1")
	live.SetKind("Deployment")
	g.Expect(f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web"}, live)).To(Succeed())
	containers, _, _ := unstructured.NestedSlice(live.Object, "spec", "template", "spec", "containers")
	g.Expect(containers[0].(map[string]any)["image"]).To(Equal("nginx:1.27"))
	err = f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "web"}, &corev1.Service{})
	g.Expect(err).To(MatchError(ContainSubstring("not found")))
}

func TestComputeNeverShowsSecretValues(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	ctx := context.Background()
	plain := []string{"old-hunter2", "new-hunter2", "admin-user", "foreign-t0ken", "applied-s3cret"}

	// Changed by the commit: data before, stringData after (the API server merges it).
	f.apply(f.render(map[string]string{"db.yaml": `apiVersion: v1
kind: Secret
metadata: {name: db}
data: {password: ` + b64("old-hunter2") + `, user: ` + b64("admin-user") + `}
`})...)
	// Owned by another field manager (kubectl client-side apply), values and all.
	foreign := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: f.ns, Annotations: map[string]string{
			lastAppliedAnnotation: `{"apiVersion":"v1","kind":"Secret","stringData":{"token":"applied-s3cret"}}`,
		}},
		Data: map[string][]byte{"token": []byte("foreign-t0ken")},
	}
	g.Expect(f.c.Create(ctx, foreign, client.FieldOwner("kubectl-client-side-apply"))).To(Succeed())

	objs := f.render(map[string]string{
		"db.yaml": `apiVersion: v1
kind: Secret
metadata: {name: db}
stringData: {password: new-hunter2, user: admin-user}
`,
		// converge takes over the Secret's labels only: its data stays another manager's.
		"foreign.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: foreign}\n",
		"new.yaml":     "apiVersion: v1\nkind: Secret\nmetadata: {name: created}\nstringData: {token: new-hunter2}\n",
	})
	r, err := f.compute(objs, Options{Owner: owner})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Summary()).To(Equal(Summary{Create: 1, Change: 2}))

	db := verdictOf(t, r, "Secret", "db")
	g.Expect(db.Action).To(Equal(Change))
	g.Expect(db.Diff).To(ContainSubstring("\n-  password: '***'\n+  password: '*** (changed)'\n"))
	g.Expect(db.Diff).To(ContainSubstring("\n   user: '***'\n"))

	fo := verdictOf(t, r, "Secret", "foreign")
	g.Expect(fo.Action).To(Equal(Change)) // the owner labels
	g.Expect(fo.Diff).To(ContainSubstring("kubectl.kubernetes.io/last-applied-configuration: '***'"))

	created := verdictOf(t, r, "Secret", "created")
	g.Expect(created.Diff).To(ContainSubstring("+  token: '***'\n"))

	out := allOutputs(t, r)
	for _, v := range plain {
		g.Expect(out).NotTo(ContainSubstring(v))
		g.Expect(out).NotTo(ContainSubstring(b64(v)))
	}
}

func TestComputePrunesOnlyWhatTheTargetOwns(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	cm := func(name string, labels, annotations map[string]string) {
		t.Helper()
		o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels, Annotations: annotations}}
		if err := f.c.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	mine := map[string]string{convergev1.NameLabel: owner.Name, convergev1.NamespaceLabel: owner.Namespace}
	cm("owned", mine, nil)
	cm("other-target", map[string]string{convergev1.NameLabel: "other", convergev1.NamespaceLabel: owner.Namespace}, nil)
	cm("other-namespace", map[string]string{convergev1.NameLabel: owner.Name, convergev1.NamespaceLabel: "elsewhere"}, nil)
	cm("kept", mine, map[string]string{convergev1.PruneAnnotation: convergev1.DisabledValue})
	cm("unlabelled", nil, nil)
	entry := func(name string) convergev1.InventoryEntry {
		return convergev1.InventoryEntry{ID: f.ns + "_" + name + "__ConfigMap", Version: "v1"}
	}
	objs := f.render(map[string]string{"cm.yaml": strings.ReplaceAll(configMap, "MODE", "blue")})
	f.apply(objs...)
	inventory := &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{
		entry("owned"), entry("other-target"), entry("other-namespace"), entry("kept"), entry("unlabelled"),
		entry("gone"), entry("settings"),
	}}

	tests := []struct {
		name       string
		opts       Options
		wantPruned []string
	}{
		{name: "prune on", opts: Options{Owner: owner, Prune: true, Inventory: inventory}, wantPruned: []string{"owned"}},
		{name: "prune off", opts: Options{Owner: owner, Prune: false, Inventory: inventory}},
		{name: "no SyncTarget", opts: Options{Prune: true, Inventory: inventory}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			r, err := f.compute(objs, tt.opts)
			g.Expect(err).NotTo(HaveOccurred())
			var pruned []string
			for _, o := range r.Objects {
				if o.Action == Prune {
					pruned = append(pruned, o.Name)
					g.Expect(o.Diff).To(ContainSubstring("-  name: " + o.Name + "\n"))
					g.Expect(o.Diff).To(ContainSubstring("@@ -1,"))
				}
			}
			g.Expect(pruned).To(Equal(tt.wantPruned))
			g.Expect(r.Summary().Unchanged).To(Equal(1))

			var b bytes.Buffer
			g.Expect(WriteText(&b, r, Colors{})).To(Succeed())
			for _, name := range []string{"other-target", "other-namespace", "kept", "unlabelled", "gone"} {
				g.Expect(b.String()).NotTo(ContainSubstring("ConfigMap " + f.ns + "/" + name))
			}
			if tt.wantPruned != nil {
				g.Expect(b.String()).To(ContainSubstring("- v1 ConfigMap " + f.ns + "/owned\n"))
			}
		})
	}
}

func TestComputeRefusesToPruneEverything(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	objs := f.render(map[string]string{"cm.yaml": strings.ReplaceAll(configMap, "MODE", "blue")})
	f.apply(objs...)
	inv := apply.NewInventory(objs)

	_, err := f.compute(nil, Options{Owner: owner, Prune: true, Inventory: inv})
	g.Expect(err).To(MatchError(ContainSubstring("refusing to prune all 1 objects")))

	r, err := f.compute(nil, Options{Owner: owner, Prune: true, Inventory: inv, AllowEmpty: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Summary()).To(Equal(Summary{Prune: 1}))
}

// A change that prunes more than spec.maxDeletions is refused as the daemon refuses it.
func TestComputeRefusesTooManyDeletions(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	objs := f.render(map[string]string{"cm.yaml": strings.ReplaceAll(configMap, "MODE", "blue")})
	f.apply(objs...)
	inv := apply.NewInventory(objs)
	none := intstr.FromInt32(0)

	_, err := f.compute(nil, Options{Owner: owner, Prune: true, Inventory: inv, AllowEmpty: true, MaxDeletions: &none})
	g.Expect(err).To(MatchError(ContainSubstring("the change would delete too many objects: it prunes 1 of the 1 objects applied")))

	all := intstr.FromString("100%")
	r, err := f.compute(nil, Options{Owner: owner, Prune: true, Inventory: inv, AllowEmpty: true, MaxDeletions: &all})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Summary()).To(Equal(Summary{Prune: 1}))
}

func TestComputeCRDAndCRInOneChange(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	group := f.ns + ".example.com"
	objs := f.render(map[string]string{
		"crd.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.NS.example.com}
spec:
  group: NS.example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`,
		"widget.yaml": "apiVersion: NS.example.com/v1\nkind: Widget\nmetadata: {name: gadget}\nspec: {size: 3}\n",
		"cm.yaml":     strings.ReplaceAll(configMap, "MODE", "blue"),
	})
	r, err := f.compute(objs, Options{Owner: owner})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Summary()).To(Equal(Summary{Create: 3}))
	g.Expect(r.Objects[0].Kind).To(Equal("CustomResourceDefinition"), "CRDs come first")

	w := verdictOf(t, r, "Widget", "gadget")
	g.Expect(w.Action).To(Equal(Create))
	g.Expect(w.Ref()).To(Equal(group + "/v1 Widget " + f.ns + "/gadget"))
	g.Expect(w.Note).To(ContainSubstring("CustomResourceDefinition of this change"))
	g.Expect(w.Diff).To(ContainSubstring("+  size: 3\n"))

	// Without its CRD the kind is unknown: the daemon's apply would fail, so does Compute.
	_, err = f.compute(objs[1:], Options{Owner: owner})
	g.Expect(err).To(MatchError(ContainSubstring(`no matches for kind "Widget"`)))
}

func TestComputeNewNamespaceWithContents(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	fresh := f.ns + "-new"
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + fresh + "}\n",
		"cm.yaml": strings.ReplaceAll(configMap, "MODE", "blue"),
		"db.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: fresh-hunter2}\n",
	})
	objs, err := Render(context.Background(), f.c.RESTMapper(), RenderOptions{
		Root: dir, TargetNamespace: fresh, OwnerName: owner.Name, OwnerNamespace: owner.Namespace,
	})
	g.Expect(err).NotTo(HaveOccurred())

	r, err := f.compute(objs, Options{Owner: owner})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Summary()).To(Equal(Summary{Create: 3}))
	g.Expect(r.Objects[0].Kind).To(Equal("Namespace"))
	g.Expect(r.Objects[0].Note).To(BeEmpty(), "the Namespace itself is dry-run")
	cm := verdictOf(t, r, "ConfigMap", "settings")
	g.Expect(cm.Note).To(ContainSubstring("namespace is created by this change"))
	g.Expect(cm.Diff).To(ContainSubstring("+  mode: blue\n"))
	out := allOutputs(t, r)
	g.Expect(out).NotTo(Or(ContainSubstring("fresh-hunter2"), ContainSubstring(b64("fresh-hunter2"))))
	g.Expect(verdictOf(t, r, "Secret", "db").Diff).To(ContainSubstring("+  password: '***'\n"))

	// A namespace that neither exists nor comes with the change fails the apply.
	_, err = f.compute(objs[1:], Options{Owner: owner})
	g.Expect(err).To(MatchError(ContainSubstring(`namespaces "` + fresh + `" not found`)))
}

func TestComputeFailsLikeTheApply(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	// A Deployment without a selector: the API server rejects it.
	objs := f.render(map[string]string{"deploy.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: broken}
spec:
  template:
    metadata: {labels: {app: broken}}
    spec:
      containers: [{name: web, image: nginx}]
`})
	_, err := f.compute(objs, Options{Owner: owner})
	g.Expect(err).To(MatchError(ContainSubstring("Deployment/" + f.ns + "/broken dry-run failed")))
	g.Expect(err).To(MatchError(ContainSubstring("selector")))
}

func TestComputeImmutableField(t *testing.T) {
	f := newFixture(t)
	f.apply(f.render(map[string]string{"deploy.yaml": strings.ReplaceAll(deployment, "IMAGE", "1.27")})...)
	changed := strings.ReplaceAll(strings.ReplaceAll(deployment, "IMAGE", "1.27"), "{app: web}", "{app: web2}")

	t.Run("reported as an error", func(t *testing.T) {
		g := NewWithT(t)
		_, err := f.compute(f.render(map[string]string{"deploy.yaml": changed}), Options{Owner: owner})
		g.Expect(err).To(MatchError(ContainSubstring("field is immutable")))
	})
	t.Run("recreated when forced", func(t *testing.T) {
		g := NewWithT(t)
		forced := strings.Replace(changed, "metadata: {name: web}",
			"metadata: {name: web, annotations: {"+apply.ForceAnnotation+": enabled}}", 1)
		r, err := f.compute(f.render(map[string]string{"deploy.yaml": forced}), Options{Owner: owner})
		g.Expect(err).NotTo(HaveOccurred())
		web := verdictOf(t, r, "Deployment", "web")
		g.Expect(web.Action).To(Equal(Change))
		g.Expect(web.Note).To(ContainSubstring("deletes and recreates"))
	})
}

func TestComputeSkipsReconcileDisabled(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	live := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: f.ns,
		Annotations: map[string]string{convergev1.ReconcileAnnotation: convergev1.DisabledValue}}}
	g.Expect(f.c.Create(context.Background(), live)).To(Succeed())
	r, err := f.compute(f.render(map[string]string{"cm.yaml": strings.ReplaceAll(configMap, "MODE", "blue")}), Options{Owner: owner})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Summary()).To(Equal(Summary{Skip: 1}))
	g.Expect(r.HasChanges()).To(BeFalse())
}

func TestComputeNotesAnotherOwner(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	live := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: f.ns,
		Labels: map[string]string{convergev1.NameLabel: "other", convergev1.NamespaceLabel: "team"}}}
	g.Expect(f.c.Create(context.Background(), live)).To(Succeed())
	r, err := f.compute(f.render(map[string]string{"cm.yaml": strings.ReplaceAll(configMap, "MODE", "blue")}), Options{Owner: owner})
	g.Expect(err).NotTo(HaveOccurred())
	cm := verdictOf(t, r, "ConfigMap", "settings")
	g.Expect(cm.Action).To(Equal(Change))
	g.Expect(cm.Note).To(Equal("managed by SyncTarget team/other now"))
	g.Expect(cm.Diff).To(ContainSubstring("-    converge.dev/name: other\n+    converge.dev/name: app\n"))
}

// TestComputeErrorNeverShowsSecretValues: the API server quotes an invalid value in its
// dry-run error; for a Secret that value must not reach the error diff returns.
func TestComputeErrorNeverShowsSecretValues(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	objs := f.render(map[string]string{"bad.yaml": `apiVersion: v1
kind: Secret
metadata: {name: bad}
stringData: {password: [wrongly-typed-s3cret]}
`})
	_, err := f.compute(objs, Options{Owner: owner})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err.Error()).To(ContainSubstring("Secret"))
	g.Expect(err.Error()).NotTo(ContainSubstring("wrongly-typed-s3cret"))
}
