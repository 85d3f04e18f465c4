package convert

import (
	"bytes"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// convertFluxRepository converts testdata/flux, a Flux repository laid out as Flux's
// kustomize-helm example: clusters/staging holds the sync and the Kustomizations,
// infrastructure/ and apps/ the HelmRepositories and HelmReleases.
func convertFluxRepository(t *testing.T) (Result, string) {
	t.Helper()
	input := &Input{}
	if err := input.Read(filepath.Join("testdata", "flux")); err != nil {
		t.Fatal(err)
	}
	res := Convert(input.Objects)
	res.Problems = append(input.Problems, res.Problems...)
	var out bytes.Buffer
	if err := Print(&out, res); err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

func TestConvertFluxKustomizations(t *testing.T) {
	_, out := convertFluxRepository(t)
	docs := documents(t, out)
	if len(docs) != 7 {
		t.Errorf("want 7 SyncTargets (4 Kustomizations, 3 HelmReleases), got %v", keysOf(docs))
	}
	root := syncTarget(t, docs, "flux-system")
	want := convergev1.GitSource{
		URL: "ssh://git@github.com/acme/fleet", Ref: convergev1.GitRef{Branch: "main"},
		SecretRef: &convergev1.LocalObjectReference{Name: "flux-system"},
	}
	got := root.Spec.Source
	if got.Interval == nil || got.Interval.Duration != time.Minute {
		t.Errorf("source interval: want the GitRepository's 1m, got %v", got.Interval)
	}
	got.Interval = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("source: got %+v, want %+v", got, want)
	}
	if root.Namespace != "flux-system" || root.Spec.Path != "clusters/staging" || !root.Spec.Prune {
		t.Errorf("flux-system: namespace %q path %q prune %v", root.Namespace, root.Spec.Path, root.Spec.Prune)
	}
	configs := syncTarget(t, docs, "infra-configs")
	if !reflect.DeepEqual(configs.Spec.DependsOn, []convergev1.DependencyReference{{Name: "infra-controllers"}}) {
		t.Errorf("infra-configs dependsOn: %+v", configs.Spec.DependsOn)
	}
	if len(configs.Spec.HealthChecks) != 1 || configs.Spec.HealthChecks[0].Kind != "ClusterIssuer" {
		t.Errorf("infra-configs healthChecks: %+v", configs.Spec.HealthChecks)
	}
	if configs.Spec.Timeout == nil || configs.Spec.Timeout.Duration != 5*time.Minute {
		t.Errorf("infra-configs timeout: %v", configs.Spec.Timeout)
	}
	apps := syncTarget(t, docs, "apps")
	pb := apps.Spec.PostBuild
	if pb == nil || pb.Substitute["cluster_env"] != "staging" || pb.Substitute["podinfo_replicas"] != "2" {
		t.Fatalf("apps postBuild substitute: %+v", pb)
	}
	wantFrom := []convergev1.SubstituteReference{{Kind: "ConfigMap", Name: "cluster-settings"}, {Kind: "Secret", Name: "cluster-secrets", Optional: true}}
	if !reflect.DeepEqual(pb.SubstituteFrom, wantFrom) || pb.Strict == nil || *pb.Strict {
		t.Errorf("apps postBuild: substituteFrom %+v strict %v", pb.SubstituteFrom, pb.Strict)
	}
	if apps.Spec.Wait == nil || !*apps.Spec.Wait || apps.Spec.Path != "apps/staging" {
		t.Errorf("apps: wait %v path %q", apps.Spec.Wait, apps.Spec.Path)
	}
	if !reflect.DeepEqual(apps.Spec.DependsOn, []convergev1.DependencyReference{{Name: "infra-configs"}}) {
		t.Errorf("apps dependsOn: %+v", apps.Spec.DependsOn)
	}
}

func TestConvertFluxHelmReleases(t *testing.T) {
	res, out := convertFluxRepository(t)
	docs := documents(t, out)
	podinfo := syncTarget(t, docs, "podinfo")
	wantChart := convergev1.ChartSource{Repository: "oci://ghcr.io/stefanprodan/charts", Name: "podinfo", Version: ">=6.5.0 <7.0.0"}
	got := *podinfo.Spec.Chart
	if got.Interval == nil || got.Interval.Duration != 5*time.Minute {
		t.Errorf("podinfo chart interval: want the HelmRepository's 5m, got %v", got.Interval)
	}
	got.Interval = nil
	if !reflect.DeepEqual(got, wantChart) {
		t.Errorf("podinfo chart: got %+v, want %+v", got, wantChart)
	}
	v := values(t, podinfo)
	if v["replicaCount"] != float64(2) || v["ingress"].(map[string]any)["className"] != "nginx" {
		t.Errorf("podinfo values: %v", v)
	}
	if podinfo.Spec.Helm.ReleaseName != "podinfo" || podinfo.Spec.Helm.CRDs != convergev1.CRDsCreate {
		t.Errorf("podinfo helm: %+v", podinfo.Spec.Helm)
	}
	for _, c := range []struct{ line, text string }{
		{"helm:", "run `converge test`"},
		{"spec:", "spec.driftDetection"},
		{"spec:", "spec.install.remediation (HelmRelease): converge rolls a failed revision back"},
	} {
		if !commentBefore(out, c.line, c.text) {
			t.Errorf("no comment %q above %q:\n%s", c.text, c.line, out)
		}
	}
	cm := syncTarget(t, docs, "cert-manager")
	if cm.Spec.Chart.Repository != "https://charts.jetstack.io" || cm.Spec.Chart.Name != "cert-manager" || cm.Spec.Chart.Version != "1.x" {
		t.Errorf("cert-manager chart: %+v", cm.Spec.Chart)
	}
	if cm.Spec.Chart.Interval == nil || cm.Spec.Chart.Interval.Duration != 12*time.Hour {
		t.Errorf("cert-manager chart interval: want chart.spec.interval 12h, got %v", cm.Spec.Chart.Interval)
	}
	if cm.Spec.Helm.CRDs != convergev1.CRDsCreateReplace || values(t, cm)["installCRDs"] != true {
		t.Errorf("cert-manager helm: crds %q values %s", cm.Spec.Helm.CRDs, cm.Spec.Helm.Values.Raw)
	}
	// The staging patch of podinfo is a kustomize patch: left out, and said so.
	p := problem(t, res, filepath.Join("testdata", "flux", "apps", "staging", "podinfo-values.yaml"), "")
	if p.Warning || !strings.Contains(p.Reason, "kustomize build") {
		t.Errorf("the patch: %+v", p)
	}
	if !res.Failed() {
		t.Error("a patch left out must fail the conversion")
	}
}

// TestConvertIsDeterministic: the output does not depend on the order of the input.
func TestConvertIsDeterministic(t *testing.T) {
	input := &Input{}
	if err := input.Read(filepath.Join("testdata", "flux")); err != nil {
		t.Fatal(err)
	}
	print := func(objs []*unstructuredT) string {
		var b bytes.Buffer
		res := Convert(objs)
		if err := Print(&b, res); err != nil {
			t.Fatal(err)
		}
		return b.String() + problemList(res)
	}
	first := print(input.Objects)
	rev := append([]*unstructuredT(nil), input.Objects...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if second := print(rev); first != second {
		t.Errorf("the output changed with the order of the input:\n%s\n---\n%s", first, second)
	}
}

const fluxUnsupported = `
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: repo, namespace: team}
spec:
  interval: 5m
  url: https://github.com/acme/app
  ref: {tag: v1.2.3}
  ignore: "*.md"
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: team}
spec:
  interval: 10m
  sourceRef: {kind: GitRepository, name: repo}
  path: "./deploy"
  force: true
  patches:
    - patch: "[]"
      target: {kind: Deployment}
  images:
    - {name: app, newTag: v2}
  decryption: {provider: sops, secretRef: {name: sops-keys}}
  kubeConfig: {secretRef: {name: prod-kubeconfig, key: config}}
  suspend: true
  targetNamespace: app
  serviceAccountName: deployer
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: from-bucket, namespace: team}
spec:
  interval: 10m
  sourceRef: {kind: Bucket, name: b}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: elsewhere, namespace: team}
spec:
  interval: 10m
  sourceRef: {kind: GitRepository, name: other}
`

// TestConvertFluxUnsupported: each field converge has not is commented where it was and
// reported; what has an equivalent is still converted.
func TestConvertFluxUnsupported(t *testing.T) {
	res, out := convertString(t, fluxUnsupported)
	docs := documents(t, out)
	app := syncTarget(t, docs, "app")
	if app.Spec.Source.Ref.Tag != "v1.2.3" || app.Spec.Path != "deploy" || !app.Spec.Suspend ||
		app.Spec.TargetNamespace != "app" || app.Spec.ServiceAccountName != "deployer" {
		t.Errorf("app: %+v", app.Spec)
	}
	if d := app.Spec.Decryption; d == nil || d.Provider != "sops" || d.SecretRef.Name != "sops-keys" {
		t.Errorf("decryption: %+v", d)
	}
	if k := app.Spec.KubeConfig; k == nil || k.SecretRef.Name != "prod-kubeconfig" || k.SecretRef.Key != "config" {
		t.Errorf("kubeConfig: %+v", k)
	}
	for _, f := range []struct{ from, field, text string }{
		{"Kustomization team/app", "spec.force", "never deletes and recreates"},
		{"Kustomization team/app", "spec.patches", "kustomization.yaml in Git"},
		{"Kustomization team/app", "spec.images", "kustomization.yaml in Git"},
		{"GitRepository team/repo", "spec.ignore", "converge renders every file"},
		{"Kustomization team/from-bucket", "spec.sourceRef", "Bucket source is not supported"},
		{"Kustomization team/elsewhere", "spec.sourceRef", "not in the input"},
	} {
		p := problem(t, res, f.from, f.field)
		if !strings.Contains(p.Reason, f.text) || p.Warning {
			t.Errorf("%s %s: %+v", f.from, f.field, p)
		}
		if !strings.Contains(out, "# "+notePrefix+f.field) {
			t.Errorf("no comment on %s in the output:\n%s", f.field, out)
		}
	}
	if _, ok := docs["SyncTarget/from-bucket"]; ok {
		t.Error("a Kustomization of a Bucket has no SyncTarget")
	}
	// A missing GitRepository: the SyncTarget is printed, its source to be filled in.
	if st := syncTarget(t, docs, "elsewhere"); !commentBefore(out, "source:", "fill in spec.source.url") || st.Spec.Source.URL == "" {
		t.Errorf("elsewhere: no source to fill in:\n%s", out)
	}
}

const fluxHelmVariants = `
apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: charts, namespace: apps}
spec:
  interval: 2m
  url: https://github.com/acme/charts
  ref: {branch: main}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: from-git, namespace: apps}
spec:
  interval: 10m
  targetNamespace: shop
  storageNamespace: flux-system
  chart:
    spec:
      chart: ./charts/shop
      sourceRef: {kind: GitRepository, name: charts}
      valuesFiles: [charts/shop/values-prod.yaml, env/prod/values.yaml]
  valuesFrom:
    - {kind: ConfigMap, name: shop-values, valuesKey: prod.yaml}
    - {kind: Secret, name: shop-secret, targetPath: db.password, optional: true}
  postRenderers:
    - kustomize: {patches: []}
---
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata: {name: podinfo, namespace: apps}
spec:
  interval: 10m
  url: oci://ghcr.io/stefanprodan/charts/podinfo
  ref: {semver: ">=6.0.0"}
---
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: from-oci, namespace: apps}
spec:
  interval: 10m
  chartRef: {kind: OCIRepository, name: podinfo}
  dependsOn: [{name: from-git}]
  install: {crds: Skip, createNamespace: true}
`

func TestConvertFluxHelmVariants(t *testing.T) {
	res, out := convertString(t, fluxHelmVariants)
	docs := documents(t, out)
	git := syncTarget(t, docs, "from-git")
	if git.Spec.Chart != nil || git.Spec.Source.URL != "https://github.com/acme/charts" || git.Spec.Path != "charts/shop" {
		t.Errorf("a chart in Git is spec.source and a path: %+v", git.Spec)
	}
	// Flux reads the values files from the repository's root, converge from the path.
	if want := []string{"values-prod.yaml", "../../env/prod/values.yaml"}; !reflect.DeepEqual(git.Spec.Helm.ValuesFiles, want) {
		t.Errorf("valuesFiles: got %v, want %v", git.Spec.Helm.ValuesFiles, want)
	}
	wantFrom := []convergev1.ValuesReference{
		{Kind: "ConfigMap", Name: "shop-values", ValuesKey: "prod.yaml"},
		{Kind: "Secret", Name: "shop-secret", TargetPath: "db.password", Optional: true},
	}
	if !reflect.DeepEqual(git.Spec.Helm.ValuesFrom, wantFrom) {
		t.Errorf("valuesFrom: %+v", git.Spec.Helm.ValuesFrom)
	}
	// Flux names the release <targetNamespace>-<name>: kept, so the objects keep their names.
	if git.Spec.Helm.ReleaseName != "shop-from-git" || git.Spec.TargetNamespace != "shop" {
		t.Errorf("release name %q, target namespace %q", git.Spec.Helm.ReleaseName, git.Spec.TargetNamespace)
	}
	if !commentBefore(out, "helm:", "spec.storageNamespace") {
		t.Errorf("no comment on storageNamespace:\n%s", out)
	}
	problem(t, res, "HelmRelease apps/from-git", "spec.postRenderers")
	oci := syncTarget(t, docs, "from-oci")
	want := convergev1.ChartSource{Repository: "oci://ghcr.io/stefanprodan/charts", Name: "podinfo", Version: ">=6.0.0"}
	got := *oci.Spec.Chart
	got.Interval = nil
	if !reflect.DeepEqual(got, want) || oci.Spec.Helm.CRDs != convergev1.CRDsSkip {
		t.Errorf("from-oci: chart %+v crds %q", got, oci.Spec.Helm.CRDs)
	}
	if !reflect.DeepEqual(oci.Spec.DependsOn, []convergev1.DependencyReference{{Name: "from-git"}}) {
		t.Errorf("from-oci dependsOn: %+v", oci.Spec.DependsOn)
	}
	problem(t, res, "HelmRelease apps/from-oci", "spec.install.createNamespace")
}

const fluxAlerts = `
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: slack, namespace: flux-system}
spec:
  type: slack
  channel: deploys
  secretRef: {name: slack-url}
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: on-call, namespace: flux-system}
spec:
  providerRef: {name: slack}
  eventSeverity: error
  eventSources:
    - {kind: Kustomization, name: "*"}
  exclusionList: ["waiting.*"]
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Provider
metadata: {name: pager, namespace: flux-system}
spec:
  type: pagerduty
  address: https://events.pagerduty.com
---
apiVersion: notification.toolkit.fluxcd.io/v1beta3
kind: Alert
metadata: {name: paging, namespace: flux-system}
spec:
  providerRef: {name: pager}
  eventSources: [{kind: HelmRelease, name: "*"}]
`

func TestConvertFluxAlerts(t *testing.T) {
	res, out := convertString(t, fluxAlerts)
	docs := documents(t, out)
	b, ok := docs["Notifier/on-call"]
	if !ok {
		t.Fatalf("no Notifier on-call:\n%s", out)
	}
	var n convergev1.Notifier
	if err := unmarshalStrict(b, &n); err != nil {
		t.Fatal(err)
	}
	if n.Spec.Provider.Type != convergev1.SlackProvider || n.Spec.Provider.SecretRef.Name != "slack-url" {
		t.Errorf("provider: %+v", n.Spec.Provider)
	}
	wantEvents := []convergev1.NotificationEvent{convergev1.EventFailed, convergev1.EventRolledBack, convergev1.EventStalled}
	if !reflect.DeepEqual(n.Spec.Events, wantEvents) || n.Spec.TargetSelector != nil {
		t.Errorf("events %v selector %v", n.Spec.Events, n.Spec.TargetSelector)
	}
	problem(t, res, "Alert flux-system/on-call", "spec.exclusionList")
	if p := problem(t, res, "Provider flux-system/pager", "spec.type"); !strings.Contains(p.Reason, "slack") {
		t.Errorf("unsupported provider: %+v", p)
	}
	if _, ok := docs["Notifier/paging"]; ok {
		t.Error("a Notifier of an unsupported provider was printed")
	}
}
