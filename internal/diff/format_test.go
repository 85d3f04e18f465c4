package diff

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (run with -update to accept):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

func obj(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// sampleResult is a result as Compute builds it, from live and dry-run objects written
// out here and sorted as Compute sorts them.
func sampleResult(t *testing.T) *Result {
	t.Helper()
	g := NewWithT(t)
	liveDeploy := obj(t, `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: shop
  uid: 0d9a4c1e-0000-0000-0000-000000000001
  resourceVersion: "812"
  generation: 3
  creationTimestamp: "2026-01-02T03:04:05Z"
  managedFields: [{manager: converge, operation: Apply}]
  labels: {app: web, converge.dev/name: shop, converge.dev/namespace: team-a}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports: [{containerPort: 80, protocol: TCP}]
status: {replicas: 2, readyReplicas: 2}
`)
	afterDeploy := liveDeploy.DeepCopy()
	g.Expect(unstructured.SetNestedField(afterDeploy.Object, int64(3), "spec", "replicas")).To(Succeed())
	containers, _, _ := unstructured.NestedSlice(afterDeploy.Object, "spec", "template", "spec", "containers")
	containers[0].(map[string]any)["image"] = "nginx:1.28"
	g.Expect(unstructured.SetNestedSlice(afterDeploy.Object, containers, "spec", "template", "spec", "containers")).To(Succeed())
	afterDeploy.SetResourceVersion("813")

	liveSecret := obj(t, `
apiVersion: v1
kind: Secret
metadata: {name: db, namespace: shop, labels: {converge.dev/name: shop, converge.dev/namespace: team-a}}
type: Opaque
data: {user: YWRtaW4=, password: b2xkLXBhc3N3b3Jk}
`)
	afterSecret := liveSecret.DeepCopy()
	afterSecret.Object["data"] = map[string]any{"user": "YWRtaW4=", "password": "bmV3LXBhc3N3b3Jk", "host": "ZGIubG9jYWw="}

	newService := obj(t, `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop, labels: {converge.dev/name: shop, converge.dev/namespace: team-a}}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 80, protocol: TCP}]
`)
	prunedCM := obj(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: legacy, namespace: shop, labels: {converge.dev/name: shop, converge.dev/namespace: team-a}}
data: {mode: "old"}
`)
	newCR := obj(t, `
apiVersion: example.com/v1
kind: Widget
metadata: {name: gadget, namespace: shop}
spec: {size: 3}
`)
	must := func(o Object, err error) Object {
		t.Helper()
		g.Expect(err).NotTo(HaveOccurred())
		return o
	}
	r := &Result{Objects: []Object{
		must(verdict(Create, newCR, nil, newCR, "not dry-run: its kind is defined by a CustomResourceDefinition of this change")),
		must(verdict(Change, liveDeploy, liveDeploy, afterDeploy, "")),
		must(verdict(Change, liveSecret, liveSecret, afterSecret, "")),
		must(verdict(Create, newService, nil, newService, "")),
		must(verdict(Prune, prunedCM, prunedCM, nil, "")),
		{Action: Unchanged, APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "settings"},
		{Action: Skip, APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "hand-tuned"},
	}}
	sortObjects(r.Objects)
	return r
}

func TestWriteTextGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, sampleResult(t), Colors{}); err != nil {
		t.Fatal(err)
	}
	golden(t, "text.golden", b.Bytes())
}

func TestWriteTextColors(t *testing.T) {
	g := NewWithT(t)
	tag := func(name string) func(string) string {
		return func(s string) string { return "<" + name + ">" + s + "</>" }
	}
	var b bytes.Buffer
	g.Expect(WriteText(&b, sampleResult(t), Colors{
		Create: tag("create"), Change: tag("change"), Prune: tag("prune"),
		Added: tag("add"), Removed: tag("del"), Hunk: tag("hunk"), Files: tag("file"),
	})).To(Succeed())
	out := b.String()
	g.Expect(out).To(ContainSubstring("<change>~ apps/v1 Deployment shop/web</>\n"))
	g.Expect(out).To(ContainSubstring("<create>+ v1 Service shop/web</>\n"))
	g.Expect(out).To(ContainSubstring("<prune>- v1 ConfigMap shop/legacy</>\n"))
	g.Expect(out).To(ContainSubstring("<del>-      - image: nginx:1.27</>\n"))
	g.Expect(out).To(ContainSubstring("<add>+      - image: nginx:1.28</>\n"))
	g.Expect(out).To(ContainSubstring("<file>--- live</>\n"))
	g.Expect(out).To(MatchRegexp(`<hunk>@@ -\d+,\d+ \+\d+,\d+ @@</>`))
}

func TestWriteMarkdownGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, sampleResult(t), "converge diff: SyncTarget `team-a/shop` at `main@sha1:0123456789abcdef0123456789abcdef01234567`"); err != nil {
		t.Fatal(err)
	}
	golden(t, "markdown.golden", b.Bytes())
}

func TestWriteMarkdownNoChanges(t *testing.T) {
	g := NewWithT(t)
	var b bytes.Buffer
	r := &Result{Objects: []Object{{Action: Unchanged, APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "settings"}}}
	g.Expect(WriteMarkdown(&b, r, "")).To(Succeed())
	g.Expect(b.String()).To(Equal("### converge diff\n\nNo changes (0 to create, 0 to change, 0 to prune, 1 unchanged).\n"))
}

func TestStructuredGolden(t *testing.T) {
	b, err := json.MarshalIndent(sampleResult(t).Objects, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "objects.json.golden", append(b, '\n'))
}

func TestSampleNeverShowsSecretValues(t *testing.T) {
	g := NewWithT(t)
	r := sampleResult(t)
	var text, md bytes.Buffer
	g.Expect(WriteText(&text, r, Colors{})).To(Succeed())
	g.Expect(WriteMarkdown(&md, r, "")).To(Succeed())
	js, err := json.Marshal(r.Objects)
	g.Expect(err).NotTo(HaveOccurred())
	for _, out := range []string{text.String(), md.String(), string(js)} {
		for _, v := range []string{"YWRtaW4=", "b2xkLXBhc3N3b3Jk", "bmV3LXBhc3N3b3Jk", "ZGIubG9jYWw=", "admin", "password\": \"", "new-password"} {
			g.Expect(out).NotTo(ContainSubstring(v))
		}
		g.Expect(out).To(ContainSubstring(MaskedChanged))
	}
}

func TestCodeFenceOutgrowsBackticks(t *testing.T) {
	g := NewWithT(t)
	g.Expect(codeFence("plain")).To(Equal("```"))
	g.Expect(codeFence("a ```` b")).To(Equal("`````"))
}
