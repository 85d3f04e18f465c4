package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"go.yaml.in/yaml/v3"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	ctrl "sigs.k8s.io/controller-runtime"
	sigsyaml "sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// convertRun runs `converge convert` in-process with stdin.
func convertRun(stdin string, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	cmd := newRootCommand()
	cmd.SetArgs(append([]string{"convert"}, args...))
	cmd.SetIn(strings.NewReader(stdin))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		return out.String(), errOut.String() + "converge: " + err.Error() + "\n", exitCode(err)
	}
	return out.String(), errOut.String(), 0
}

// convertedSyncTargets parses the SyncTargets of out strictly and checks each against the
// rules of the CRD, as the API server would on create.
func convertedSyncTargets(t *testing.T, out string) map[string]*convergev1.SyncTarget {
	t.Helper()
	sts := map[string]*convergev1.SyncTarget{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return sts
		}
		if err != nil {
			t.Fatalf("the output is not YAML: %v\n%s", err, out)
		}
		if m["kind"] != convergev1.SyncTargetKind {
			continue
		}
		b, _ := sigsyaml.Marshal(m)
		var st convergev1.SyncTarget
		if err := sigsyaml.UnmarshalStrict(b, &st); err != nil {
			t.Fatal(err)
		}
		if err := validateSyncTarget(&st); err != nil {
			t.Errorf("the SyncTarget %s is invalid: %v", st.Name, err)
		}
		sts[st.Name] = &st
	}
}

// TestConvertCommandFluxRepository: a Flux repository converts into valid SyncTargets;
// its kustomize patch cannot be, which the exit code and standard error say.
func TestConvertCommandFluxRepository(t *testing.T) {
	out, errOut, code := convertRun("", filepath.Join("..", "..", "internal", "convert", "testdata", "flux"))
	if code != 2 {
		t.Errorf("exit code %d, want 2; stderr:\n%s", code, errOut)
	}
	if !strings.Contains(errOut, "podinfo-values.yaml: a kustomize patch") {
		t.Errorf("stderr does not name the patch left out:\n%s", errOut)
	}
	sts := convertedSyncTargets(t, out)
	for _, name := range []string{"flux-system", "infra-controllers", "infra-configs", "apps", "cert-manager", "ingress-nginx", "podinfo"} {
		if sts[name] == nil {
			t.Errorf("no SyncTarget %s", name)
		}
	}
}

const convertClean = `
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: shop, namespace: team}
spec: {interval: 5m, url: "https://github.com/acme/shop", ref: {branch: main}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: shop, namespace: team}
spec:
  interval: 10m
  sourceRef: {kind: GitRepository, name: shop}
  path: ./deploy/prod
  prune: true
  wait: true
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
`

func TestConvertCommandExitCodes(t *testing.T) {
	out, errOut, code := convertRun(convertClean)
	if code != 0 || errOut != "" {
		t.Errorf("everything carried over: exit %d, stderr %q", code, errOut)
	}
	if st := convertedSyncTargets(t, out)["shop"]; st == nil || st.Spec.Path != "deploy/prod" {
		t.Errorf("shop: %+v\n%s", st, out)
	}
	forced := strings.Replace(convertClean, "prune: true", "prune: true\n  force: true", 1)
	out, errOut, code = convertRun(forced, "-")
	if code != 2 {
		t.Errorf("spec.force: exit %d, want 2", code)
	}
	if !strings.Contains(errOut, "Kustomization team/shop: spec.force: no equivalent") {
		t.Errorf("stderr does not list spec.force:\n%s", errOut)
	}
	if !strings.Contains(out, "# converge convert: spec.force (Kustomization)") || convertedSyncTargets(t, out)["shop"] == nil {
		t.Errorf("the SyncTarget is printed all the same, with a comment on force:\n%s", out)
	}
	for _, args := range [][]string{{"-o", "json"}, {"-n", "team"}, {"--from-cluster", "x.yaml"}} {
		if _, errOut, code := convertRun(convertClean, args...); code != 2 || !strings.Contains(errOut, "converge: ") {
			t.Errorf("convert %v: exit %d, want a usage error:\n%s", args, code, errOut)
		}
	}
}

// fluxCRD is a CRD of a Flux kind that keeps any spec: enough to store objects to list.
func fluxCRD(group, kind, plural string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: ptrTo(true),
				}},
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestConvertCommandFromCluster: --from-cluster lists the Flux objects of the namespace
// from a real API server (Argo CD is not installed there: skipped) and converts them.
func TestConvertCommandFromCluster(t *testing.T) {
	t.Parallel()
	ctrl.SetLogger(logr.Discard()) // envtest logs through controller-runtime
	cluster := clustertest.Start(t, localcluster.Options{CRDs: []*apiextensionsv1.CustomResourceDefinition{
		fluxCRD("source.toolkit.fluxcd.io", "GitRepository", "gitrepositories"),
		fluxCRD("kustomize.toolkit.fluxcd.io", "Kustomization", "kustomizations"),
	}})
	dyn, err := dynamic.NewForConfig(cluster.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ns := range []string{"team", "other"} {
		nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		docs := strings.ReplaceAll(convertClean, "namespace: team", "namespace: "+ns)
		for _, doc := range strings.Split(docs, "---")[:2] {
			var u unstructured.Unstructured
			if err := sigsyaml.Unmarshal([]byte(doc), &u.Object); err != nil {
				t.Fatal(err)
			}
			gvk := u.GroupVersionKind()
			res := schema.GroupVersionResource{Group: gvk.Group, Version: "v1", Resource: strings.ToLower(gvk.Kind) + "s"}
			if gvk.Kind == "GitRepository" {
				res.Resource = "gitrepositories"
			}
			if _, err := dyn.Resource(res).Namespace(ns).Create(ctx, &u, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	out, errOut, code := convertRun("", "--from-cluster", "--kubeconfig", cluster.Kubeconfig, "-n", "team")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	sts := convertedSyncTargets(t, out)
	if len(sts) != 1 || sts["shop"] == nil || sts["shop"].Namespace != "team" || sts["shop"].Spec.Source.URL != "https://github.com/acme/shop" {
		t.Errorf("-n team: %v\n%s", sts, out)
	}
	out, errOut, code = convertRun("", "--from-cluster", "--kubeconfig", cluster.Kubeconfig, "-A")
	if code != 0 || strings.Count(out, "kind: SyncTarget") != 2 {
		t.Errorf("-A: exit %d, want the SyncTargets of both namespaces:\n%s\n%s", code, out, errOut)
	}
}

// TestConvertCommandUnsupportedFields: every field converge cannot carry over is listed
// on stderr, commented in the output where it was, and makes the exit code 2.
func TestConvertCommandUnsupportedFields(t *testing.T) {
	for _, tc := range []struct {
		name, input, stderr, comment string
	}{
		{
			name: "HelmRelease postRenderers",
			input: `
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: charts, namespace: apps}
spec: {url: "https://charts.example.com", interval: 1h}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: web, namespace: apps}
spec:
  interval: 10m
  chart: {spec: {chart: web, version: 1.2.3, sourceRef: {kind: HelmRepository, name: charts}}}
  postRenderers: [{kustomize: {images: [{name: web, newTag: v2}]}}]
`,
			stderr:  "HelmRelease apps/web: spec.postRenderers: ",
			comment: "# converge convert: spec.postRenderers (HelmRelease)",
		},
		{
			name: "Application ignoreDifferences",
			input: `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: web, namespace: argocd}
spec:
  project: default
  source: {repoURL: "https://github.com/acme/web.git", targetRevision: main, path: deploy}
  destination: {server: "https://kubernetes.default.svc", namespace: web}
  syncPolicy: {automated: {prune: true, selfHeal: true}}
  ignoreDifferences: [{group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}]
`,
			stderr:  "Application argocd/web: spec.ignoreDifferences: ",
			comment: "# converge convert: spec.ignoreDifferences (Application)",
		},
		{
			name: "Application kustomize options",
			input: `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: web, namespace: argocd}
spec:
  project: default
  source: {repoURL: "https://github.com/acme/web.git", targetRevision: main, path: deploy, kustomize: {namePrefix: prod-}}
  destination: {server: "https://kubernetes.default.svc", namespace: web}
  syncPolicy: {automated: {prune: true, selfHeal: true}}
`,
			stderr:  "Application argocd/web: spec.source.kustomize.namePrefix: ",
			comment: "# converge convert: spec.source.kustomize.namePrefix (Application)",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := convertRun(tc.input)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(errOut, tc.stderr) {
				t.Errorf("stderr does not list %q:\n%s", tc.stderr, errOut)
			}
			if !strings.Contains(out, tc.comment) {
				t.Errorf("no comment %q:\n%s", tc.comment, out)
			}
			if sts := convertedSyncTargets(t, out); len(sts) != 1 {
				t.Errorf("the SyncTarget is printed all the same: %v\n%s", sts, out)
			}
		})
	}
}

// TestConvertCommandCleanUp: --clean-up annotates every SyncTarget printed so that its
// takeovers remove Flux's labels and annotations; without it none is annotated.
func TestConvertCommandCleanUp(t *testing.T) {
	for _, cleanUp := range []bool{true, false} {
		args := []string{"-"}
		if cleanUp {
			args = append(args, "--clean-up")
		}
		out, errOut, code := convertRun(convertClean, args...)
		if code != 0 {
			t.Fatalf("exit code %d; stderr:\n%s", code, errOut)
		}
		sts := convertedSyncTargets(t, out)
		if len(sts) == 0 {
			t.Fatalf("no SyncTarget printed:\n%s", out)
		}
		for name, st := range sts {
			if st.CleanUpOtherTools() != cleanUp {
				t.Errorf("--clean-up=%t: SyncTarget %s has annotations %v", cleanUp, name, st.Annotations)
			}
		}
	}
	help, _, _ := convertRun("", "--help")
	if !strings.Contains(help, "--clean-up") || !strings.Contains(help, convergev1.CleanUpOtherToolsAnnotation) {
		t.Errorf("--help does not describe --clean-up:\n%s", help)
	}
}
