package render

import (
	"context"
	"testing"
)

// capsChart renders a Gadget only where its API is served, and tells in a ConfigMap the
// Kubernetes version and whether apps/v1 and the gadget API are there.
func capsChart(t *testing.T, withCRD bool) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: caps\nversion: 1.0.0\n",
		"templates/gadget.yaml": `{{- if .Capabilities.APIVersions.Has "example.com/v1/Gadget" }}
apiVersion: example.com/v1
kind: Gadget
metadata:
  name: monitor
{{- end }}
`,
		"templates/caps.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: caps
data:
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  minor: {{ .Capabilities.KubeVersion.Minor | quote }}
  apps: "{{ .Capabilities.APIVersions.Has "apps/v1" }}"
  gadgets: "{{ .Capabilities.APIVersions.Has "example.com/v1" }}"
`,
	}
	if withCRD {
		files["crds/gadgets.yaml"] = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - name: v1alpha1
    served: false
    storage: false
    schema: {openAPIV3Schema: {type: object}}
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object}}
`
	}
	writeFiles(t, root, "c", files)
	return root
}

func renderCaps(t *testing.T, root string, o HelmOptions) (map[string]any, bool) {
	t.Helper()
	o.ReleaseName, o.Namespace = "caps", "shop"
	res, err := Render(context.Background(), Options{Root: root, Path: "c", Helm: &o})
	if err != nil {
		t.Fatal(err)
	}
	gadget := false
	for _, obj := range res.Objects {
		if obj.GetKind() == "Gadget" {
			gadget = true
		}
	}
	return findObject(t, res, "ConfigMap", "caps")["data"].(map[string]any), gadget
}

func TestChartSeesTheCapabilitiesOfItsCluster(t *testing.T) {
	cluster := []string{"v1", "apps/v1", "apps/v1/Deployment", "example.com/v1", "example.com/v1/Gadget"}
	t.Run("a served API renders what asks for it", func(t *testing.T) {
		data, gadget := renderCaps(t, capsChart(t, false), HelmOptions{KubeVersion: "v1.37.2", APIVersions: cluster, FromCluster: true})
		if !gadget || data["gadgets"] != "true" {
			t.Errorf("gadget rendered %v, Has example.com/v1 %v: want both where the cluster serves it", gadget, data["gadgets"])
		}
		if data["kube"] != "v1.37.2" || data["minor"] != "37" {
			t.Errorf(".Capabilities.KubeVersion %v (minor %v), want the cluster's v1.37.2", data["kube"], data["minor"])
		}
	})
	t.Run("an API the cluster lacks is not there, nor Helm's defaults", func(t *testing.T) {
		data, gadget := renderCaps(t, capsChart(t, false), HelmOptions{KubeVersion: "v1.37.2", APIVersions: []string{"v1"}, FromCluster: true})
		if gadget || data["gadgets"] != "false" {
			t.Errorf("gadget rendered %v, Has %v, on a cluster without the API", gadget, data["gadgets"])
		}
		if data["apps"] != "false" {
			t.Errorf("Has apps/v1 = %v on a cluster that serves no apps/v1: Helm's default list was used", data["apps"])
		}
	})
	t.Run("the chart's own CRDs count, as helm install installs them first", func(t *testing.T) {
		data, gadget := renderCaps(t, capsChart(t, true), HelmOptions{KubeVersion: "v1.37.2", APIVersions: []string{"v1", "apps/v1"}, FromCluster: true})
		if !gadget || data["gadgets"] != "true" {
			t.Errorf("gadget rendered %v, Has %v: want the API of the chart's own CRD seen", gadget, data["gadgets"])
		}
	})
	t.Run("offline, as helm template: Helm's defaults and no CRD counted", func(t *testing.T) {
		data, gadget := renderCaps(t, capsChart(t, true), HelmOptions{})
		if gadget || data["gadgets"] != "false" || data["apps"] != "true" {
			t.Errorf("gadget %v, Has gadgets %v, Has apps/v1 %v: want helm template's defaults", gadget, data["gadgets"], data["apps"])
		}
		extra, _ := renderCaps(t, capsChart(t, true), HelmOptions{APIVersions: []string{"example.com/v1"}, KubeVersion: "v1.30.1"})
		if extra["gadgets"] != "true" || extra["apps"] != "true" || extra["kube"] != "v1.30.1" {
			t.Errorf("--api-versions and --kube-version: %v; want them added to the defaults", extra)
		}
	})
}

func TestIsChartIsWhatRenderRendersAsAChart(t *testing.T) {
	root := capsChart(t, false)
	writeFiles(t, root, "plain", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"})
	writeFiles(t, root, "kustomized", map[string]string{"Chart.yaml": "apiVersion: v2\nname: k\nversion: 1.0.0\n",
		"kustomization.yaml": "resources: []\n"})
	for path, want := range map[string]bool{"c": true, "./c/": true, "plain": false, "kustomized": false,
		"missing": false, "../c": false, "c/Chart.yaml": false} {
		if got := IsChart(root, path); got != want {
			t.Errorf("IsChart(%q) = %v, want %v", path, got, want)
		}
		if !want {
			continue
		}
		res, err := Render(context.Background(), Options{Root: root, Path: path, Helm: &HelmOptions{ReleaseName: "a", Namespace: "b"}})
		if err != nil || !res.Chart {
			t.Errorf("Render(%q): chart %v, err %v", path, res != nil && res.Chart, err)
		}
	}
}
