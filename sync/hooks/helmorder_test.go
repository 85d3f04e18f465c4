package hooks

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"helm.sh/helm/v4/pkg/action"
	chartcommon "helm.sh/helm/v4/pkg/chart/common"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"
	kubefake "helm.sh/helm/v4/pkg/kube/fake"
	"helm.sh/helm/v4/pkg/storage"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/resource"
	"sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/internal/testcharts"
	"github.com/converge-gitops/converge/sync/render"
)

// recordingKube is the Helm SDK's printing fake cluster, which records the hooks Helm
// creates, in the order it creates them. It builds the objects of hook manifests only:
// the release's own manifest builds to nothing, so Helm checks no existing object.
type recordingKube struct {
	kubefake.PrintingKubeClient
	created []string
}

func (k *recordingKube) Build(r io.Reader, _ bool) (kube.ResourceList, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	var out kube.ResourceList
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, err
		}
		if u.Object == nil {
			continue
		}
		if _, hook := u.GetAnnotations()[render.HookAnnotation]; !hook {
			return kube.ResourceList{}, nil
		}
		out = append(out, &resource.Info{Name: u.GetName(), Namespace: u.GetNamespace(), Object: u})
	}
	return out, nil
}

func (k *recordingKube) Create(resources kube.ResourceList, _ ...kube.ClientCreateOption) (*kube.Result, error) {
	for _, info := range resources {
		k.created = append(k.created, info.Object.GetObjectKind().GroupVersionKind().Kind+"/"+info.Name)
	}
	return &kube.Result{Created: resources}, nil
}

// helmInstallHooks installs the chart in dir with the Helm SDK on a recording fake cluster
// and returns the hooks in the order Helm ran them.
func helmInstallHooks(t *testing.T, dir string, values map[string]any) []string {
	t.Helper()
	ch, err := chartloader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingKube{PrintingKubeClient: kubefake.PrintingKubeClient{Out: io.Discard, LogOutput: io.Discard}}
	cfg := action.NewConfiguration()
	cfg.Releases = storage.Init(driver.NewMemory())
	cfg.KubeClient = rec
	kv, err := chartcommon.ParseKubeVersion("v1.35.0")
	if err != nil {
		t.Fatal(err)
	}
	caps := *chartcommon.DefaultCapabilities
	caps.KubeVersion = *kv
	cfg.Capabilities = &caps
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = "rel", "apps"
	if _, err := install.Run(ch, values); err != nil {
		t.Fatal(err)
	}
	return rec.created
}

// ourHooks renders the chart in dir as the daemon does and returns its install hooks in
// the order Runner runs them.
func ourHooks(t *testing.T, dir, values string) []string {
	t.Helper()
	ho := &render.HelmOptions{ReleaseName: "rel", Namespace: "apps", KubeVersion: "v1.35.0"}
	if values != "" {
		ho.Inline = []byte(values)
	}
	res, err := render.Render(t.Context(), render.Options{Root: dir, Path: ".", Helm: ho})
	if err != nil {
		t.Fatal(err)
	}
	_, hs := Split(res.Objects)
	var out []string
	for _, event := range []string{PreInstall, PostInstall} {
		for _, h := range For(hs, event) {
			out = append(out, h.Object.GetKind()+"/"+h.Object.GetName())
		}
	}
	return out
}

// equalWeights is a chart whose hooks share weights across kinds and names, so that
// Helm's three keys (weight, name, kind) each decide somewhere.
var equalWeights = map[string]string{
	"Chart.yaml": "apiVersion: v2\nname: equal\nversion: 1.0.0\n",
	"templates/hooks.yaml": `{{- range $kind := list "Job" "ConfigMap" "ServiceAccount" "Secret" "Role" "Widget" "Gadget" }}
{{- range $name := list "b" "a" "c" }}
---
apiVersion: {{ if eq $kind "Job" }}batch/v1{{ else if eq $kind "Role" }}rbac.authorization.k8s.io/v1{{ else if or (eq $kind "Widget") (eq $kind "Gadget") }}example.com/v1{{ else }}v1{{ end }}
kind: {{ $kind }}
metadata:
  name: {{ $name }}
  annotations:
    helm.sh/hook: {{ if eq $name "c" }}post-install{{ else }}pre-install{{ end }}
    helm.sh/hook-weight: "{{ if eq $name "b" }}-1{{ else }}0{{ end }}"
{{- if eq $kind "Job" }}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: x, image: busybox}]
{{- end }}
{{- end }}
{{- end }}
`,
}

// TestForRunsHooksInHelmsOrder: for real charts and a chart of equal weights across
// kinds, the hooks run in the order the Helm SDK's own install creates them.
func TestForRunsHooksInHelmsOrder(t *testing.T) {
	podinfoHooks := "hooks:\n  preInstall:\n    job:\n      enabled: true\n  postInstall:\n    job:\n      enabled: true\n"
	for _, tc := range []struct {
		name, chart, values string
		files               map[string]string
		atLeast             int
	}{
		{name: "podinfo with hooks", chart: testcharts.Podinfo, values: podinfoHooks, atLeast: 2},
		{name: "ingress-nginx", chart: testcharts.IngressNginx, atLeast: 7},
		{name: "equal weights of several kinds", files: equalWeights, atLeast: 21},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			dir := t.TempDir()
			if tc.chart != "" {
				var err error
				dir, err = testcharts.CopyTo(dir, tc.chart)
				g.Expect(err).NotTo(HaveOccurred())
			}
			for name, content := range tc.files {
				g.Expect(os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)).To(Succeed())
				g.Expect(os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644)).To(Succeed())
			}
			var values map[string]any
			g.Expect(yaml.Unmarshal([]byte(tc.values), &values)).To(Succeed())
			js := ""
			if values != nil {
				b, err := yaml.Marshal(values)
				g.Expect(err).NotTo(HaveOccurred())
				j, err := yaml.YAMLToJSON(b)
				g.Expect(err).NotTo(HaveOccurred())
				js = string(j)
			}
			theirs := helmInstallHooks(t, dir, values)
			g.Expect(len(theirs)).To(BeNumerically(">=", tc.atLeast), "Helm ran too few hooks for the case to mean anything")
			g.Expect(ourHooks(t, dir, js)).To(Equal(theirs))
		})
	}
}
