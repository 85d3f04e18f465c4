package convert

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// argoApps are Applications in the style of Argo CD's example apps: a plain path, a
// chart in Git with values files, a kustomize app and an app of apps.
const argoApps = `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: argocd}
spec:
  project: default
  source:
    repoURL: https://github.com/acme/example-apps.git
    targetRevision: HEAD
    path: guestbook
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
  syncPolicy:
    automated: {prune: true, selfHeal: true}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: helm-guestbook, namespace: argocd}
spec:
  project: default
  source:
    repoURL: https://github.com/acme/example-apps.git
    targetRevision: v1.4.0
    path: helm-guestbook
    helm:
      releaseName: guestbook
      valueFiles: [values-production.yaml]
      values: |
        service:
          type: ClusterIP
        replicaCount: 1
      valuesObject:
        replicaCount: 3
      parameters:
        - {name: image.tag, value: "0.2"}
        - {name: ingress.enabled, value: "true"}
        - {name: build, value: "7", forceString: true}
  destination: {name: in-cluster, namespace: helm-guestbook}
  syncPolicy:
    automated: {prune: false}
    syncOptions: [CreateNamespace=true]
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: kustomize-guestbook, namespace: argocd}
spec:
  project: team-a
  source:
    repoURL: https://github.com/acme/example-apps.git
    targetRevision: 0123456789abcdef0123456789abcdef01234567
    path: kustomize-guestbook
    kustomize:
      namePrefix: staging-
      images: [gcr.io/heptio-images/ks-guestbook-demo:0.2]
  destination: {server: https://prod.example.com:6443, namespace: guestbook}
  ignoreDifferences:
    - {group: apps, kind: Deployment, jsonPointers: [/spec/replicas]}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: apps, namespace: argocd}
spec:
  project: default
  source:
    repoURL: https://github.com/acme/example-apps.git
    targetRevision: main
    path: apps
  destination: {server: https://kubernetes.default.svc, namespace: argocd}
`

func TestConvertArgoApplications(t *testing.T) {
	res, out := convertString(t, argoApps)
	docs := documents(t, out)
	gb := syncTarget(t, docs, "guestbook")
	if gb.Namespace != "argocd" || gb.Spec.Source.URL != "https://github.com/acme/example-apps.git" ||
		gb.Spec.Path != "guestbook" || gb.Spec.TargetNamespace != "guestbook" || !gb.Spec.Prune || gb.Spec.KubeConfig != nil {
		t.Errorf("guestbook: %+v", gb.Spec)
	}
	if gb.Spec.Source.Ref.Branch != "main" || !commentBefore(out, "ref:", `targetRevision "HEAD"`) {
		t.Errorf("HEAD: ref %+v, and a comment asking to check the default branch:\n%s", gb.Spec.Source.Ref, out)
	}
	helm := syncTarget(t, docs, "helm-guestbook")
	if helm.Spec.Source.Ref.Tag != "v1.4.0" || helm.Spec.Helm.ReleaseName != "guestbook" || helm.Spec.KubeConfig != nil {
		t.Errorf("helm-guestbook: ref %+v helm %+v", helm.Spec.Source.Ref, helm.Spec.Helm)
	}
	if !reflect.DeepEqual(helm.Spec.Helm.ValuesFiles, []string{"values-production.yaml"}) {
		t.Errorf("valuesFiles: %v", helm.Spec.Helm.ValuesFiles)
	}
	// values, then valuesObject over them, then parameters (typed as --set types them).
	want := map[string]any{
		"service": map[string]any{"type": "ClusterIP"}, "replicaCount": float64(3),
		"image": map[string]any{"tag": "0.2"}, "ingress": map[string]any{"enabled": true}, "build": "7",
	}
	if v := values(t, helm); !reflect.DeepEqual(v, want) {
		t.Errorf("values: got %v, want %v", v, want)
	}
	problem(t, res, "Application argocd/helm-guestbook", "spec.syncPolicy.syncOptions")
	kg := syncTarget(t, docs, "kustomize-guestbook")
	if kg.Spec.Source.Ref.Commit != "0123456789abcdef0123456789abcdef01234567" {
		t.Errorf("a SHA is a commit: %+v", kg.Spec.Source.Ref)
	}
	if k := kg.Spec.KubeConfig; k == nil || k.SecretRef.Name != "prod.example.com" || !commentBefore(out, "kubeConfig:", "create the Secret prod.example.com") {
		t.Errorf("another cluster: kubeConfig %+v\n%s", k, out)
	}
	for _, f := range []string{"spec.source.kustomize.namePrefix", "spec.source.kustomize.images", "spec.ignoreDifferences"} {
		problem(t, res, "Application argocd/kustomize-guestbook", f)
		if !strings.Contains(out, "# "+notePrefix+f) {
			t.Errorf("no comment on %s:\n%s", f, out)
		}
	}
	if !commentBefore(out, "spec:", `spec.syncPolicy.automated (Application) is not set`) {
		t.Errorf("no comment on the missing automated sync:\n%s", out)
	}
	apps := syncTarget(t, docs, "apps")
	if apps.Spec.Path != "apps" || apps.Spec.Source.Ref.Branch != "main" {
		t.Errorf("app of apps: %+v", apps.Spec)
	}
}

const argoChart = `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: redis, namespace: argocd}
spec:
  project: default
  source:
    repoURL: registry-1.docker.io/bitnamicharts
    chart: redis
    targetRevision: 19.x
    helm:
      skipCrds: true
  destination: {server: https://kubernetes.default.svc, namespace: redis}
  syncPolicy: {automated: {selfHeal: true}}
  revisionHistoryLimit: 3
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: multi, namespace: argocd}
spec:
  project: default
  sources:
    - {repoURL: https://charts.example.com, chart: app, targetRevision: 1.0.0, helm: {valueFiles: [$values/app.yaml]}}
    - {repoURL: https://github.com/acme/values.git, targetRevision: main, ref: values}
  destination: {server: https://kubernetes.default.svc, namespace: app}
`

func TestConvertArgoChartAndMultiSource(t *testing.T) {
	res, out := convertString(t, argoChart)
	docs := documents(t, out)
	redis := syncTarget(t, docs, "redis")
	want := convergev1.ChartSource{Repository: "oci://registry-1.docker.io/bitnamicharts", Name: "redis", Version: "19.x"}
	if redis.Spec.Chart == nil || *redis.Spec.Chart != want || redis.Spec.Helm.CRDs != convergev1.CRDsSkip {
		t.Errorf("redis: chart %+v helm %+v", redis.Spec.Chart, redis.Spec.Helm)
	}
	if redis.Spec.HistoryLimit == nil || *redis.Spec.HistoryLimit != 3 {
		t.Errorf("historyLimit: %v", redis.Spec.HistoryLimit)
	}
	if _, ok := docs["SyncTarget/multi"]; ok {
		t.Error("a multi-source Application was converted")
	}
	if p := problem(t, res, "Application argocd/multi", "spec.sources"); !strings.Contains(p.Reason, "one source per SyncTarget") {
		t.Errorf("multi-source: %+v", p)
	}
}

const argoSets = `
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: guestbook-list, namespace: argocd}
spec:
  generators:
    - list:
        elements:
          - {cluster: engineering-dev, url: https://kubernetes.default.svc, replicas: 1}
          - {cluster: engineering-prod, url: https://kubernetes.default.svc, replicas: 3}
  template:
    metadata:
      name: '{{cluster}}-guestbook'
      labels: {env: '{{cluster}}'}
    spec:
      project: default
      source:
        repoURL: https://github.com/acme/example-apps.git
        targetRevision: HEAD
        path: 'guestbook/{{cluster}}'
      destination: {server: '{{url}}', namespace: guestbook}
      syncPolicy: {automated: {prune: true, selfHeal: true}}
  strategy:
    type: RollingSync
    rollingSync:
      steps:
        - matchExpressions: [{key: env, operator: In, values: [engineering-dev]}]
        - matchExpressions: [{key: env, operator: In, values: [engineering-prod]}]
          maxUpdate: 1
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: guestbook-clusters, namespace: argocd}
spec:
  goTemplate: true
  generators:
    - clusters:
        selector: {matchLabels: {env: prod}}
  template:
    metadata:
      name: '{{.name}}-guestbook'
      labels: {region: '{{.metadata.labels.region}}'}
    spec:
      project: default
      source: {repoURL: https://github.com/acme/example-apps.git, targetRevision: main, path: guestbook}
      destination: {server: '{{.server}}', namespace: guestbook}
      syncPolicy: {automated: {selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: cluster-addons, namespace: argocd}
spec:
  generators:
    - git:
        repoURL: https://github.com/acme/addons.git
        revision: main
        directories:
          - path: addons/*
          - {path: addons/experimental, exclude: true}
  template:
    metadata: {name: '{{path.basename}}'}
    spec:
      project: default
      source: {repoURL: https://github.com/acme/addons.git, targetRevision: main, path: '{{path}}'}
      destination: {server: https://kubernetes.default.svc, namespace: '{{path[1]}}'}
      syncPolicy: {automated: {prune: true, selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: addons-everywhere, namespace: argocd}
spec:
  goTemplate: true
  generators:
    - matrix:
        generators:
          - git:
              repoURL: https://github.com/acme/addons.git
              revision: main
              directories: [{path: addons/*}]
          - clusters: {}
  template:
    metadata: {name: '{{.path.basename}}-{{.name}}'}
    spec:
      project: default
      source: {repoURL: https://github.com/acme/addons.git, targetRevision: main, path: '{{.path.path}}'}
      destination: {name: '{{.name}}', namespace: '{{index .path.segments 1}}'}
      syncPolicy: {automated: {selfHeal: true}}
`

// setSpec parses the printed SyncTargetSet name back, with its template spec.
func setSpec(t *testing.T, docs map[string][]byte, name string) (*convergev1.SyncTargetSet, *convergev1.SyncTargetSpec) {
	t.Helper()
	b, ok := docs["SyncTargetSet/"+name]
	if !ok {
		t.Fatalf("no SyncTargetSet %s; have %v", name, keysOf(docs))
	}
	var set convergev1.SyncTargetSet
	if err := unmarshalStrict(b, &set); err != nil {
		t.Fatal(err)
	}
	var spec convergev1.SyncTargetSpec
	dec := json.NewDecoder(strings.NewReader(string(set.Spec.Template.Spec.Raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		t.Fatalf("template spec of %s: %v", name, err)
	}
	return &set, &spec
}

func TestConvertArgoApplicationSets(t *testing.T) {
	res, out := convertString(t, argoSets)
	docs := documents(t, out)

	list, spec := setSpec(t, docs, "guestbook-list")
	wantEl := []map[string]string{
		{"cluster": "engineering-dev", "url": "https://kubernetes.default.svc", "replicas": "1"},
		{"cluster": "engineering-prod", "url": "https://kubernetes.default.svc", "replicas": "3"},
	}
	if g := list.Spec.Generators; len(g) != 1 || g[0].List == nil || !reflect.DeepEqual(g[0].List.Elements, wantEl) {
		t.Errorf("list generator: %+v", g)
	}
	if m := list.Spec.Template.Metadata; m.Name != "{{ .cluster }}-guestbook" || m.Labels["env"] != "{{ .cluster }}" {
		t.Errorf("template metadata: %+v", m)
	}
	// A server URL per element has no equivalent: converge needs a kubeconfig Secret.
	problem(t, res, "ApplicationSet argocd/guestbook-list", "spec.template.spec.destination.server")
	if spec.Path != "guestbook/{{ .cluster }}" || !spec.Prune || spec.KubeConfig != nil {
		t.Errorf("template spec: %+v", spec)
	}
	wantSteps := []convergev1.RolloutStep{{MatchLabels: map[string]string{"env": "engineering-dev"}}, {MatchLabels: map[string]string{"env": "engineering-prod"}}}
	if list.Spec.Strategy == nil || !reflect.DeepEqual(list.Spec.Strategy.Steps, wantSteps) {
		t.Errorf("strategy: %+v", list.Spec.Strategy)
	}
	if !commentBefore(out, "strategy:", "maxUpdate") {
		t.Errorf("no comment on maxUpdate:\n%s", out)
	}

	cl, spec := setSpec(t, docs, "guestbook-clusters")
	if g := cl.Spec.Generators; len(g) != 1 || g[0].Clusters == nil || g[0].Clusters.Selector.MatchLabels["env"] != "prod" {
		t.Errorf("clusters generator: %+v", g)
	}
	if m := cl.Spec.Template.Metadata; m.Name != "{{ .name }}-guestbook" || m.Labels["region"] != "{{ .labels.region }}" {
		t.Errorf("template metadata: %+v", m)
	}
	if spec.KubeConfig == nil || spec.KubeConfig.SecretRef.Name != "{{ .secretName }}" {
		t.Errorf("a cluster's kubeconfig is its Secret: %+v", spec.KubeConfig)
	}
	if !commentBefore(out, "clusters:", "converge.dev/cluster") {
		t.Errorf("no comment on the cluster Secrets:\n%s", out)
	}

	git, spec := setSpec(t, docs, "cluster-addons")
	g := git.Spec.Generators[0].GitDirectories
	if g == nil || g.Source.URL != "https://github.com/acme/addons.git" || g.Source.Ref.Branch != "main" ||
		!reflect.DeepEqual(g.Include, []string{"addons/*"}) || !reflect.DeepEqual(g.Exclude, []string{"addons/experimental"}) {
		t.Errorf("git generator: %+v", g)
	}
	if git.Spec.Template.Metadata.Name != "{{ .path.basename }}" || spec.Path != "{{ .path }}" || spec.TargetNamespace != "{{ .path.segment1 }}" {
		t.Errorf("git template: %q %+v", git.Spec.Template.Metadata.Name, spec)
	}

	mx, spec := setSpec(t, docs, "addons-everywhere")
	m := mx.Spec.Generators[0].Matrix
	if m == nil || len(m.Generators) != 2 || m.Generators[0].GitDirectories == nil || m.Generators[1].Clusters == nil {
		t.Fatalf("matrix: %+v", mx.Spec.Generators)
	}
	if mx.Spec.Template.Metadata.Name != "{{ .path.basename }}-{{ .name }}" || spec.TargetNamespace != "{{ .path.segment1 }}" ||
		spec.KubeConfig == nil || spec.KubeConfig.SecretRef.Name != "{{ .secretName }}" {
		t.Errorf("matrix template: %q %+v", mx.Spec.Template.Metadata.Name, spec)
	}
	for _, p := range res.Problems {
		if p.From != "ApplicationSet argocd/guestbook-list" {
			t.Errorf("the other sets convert fully; problem: %s", p)
		}
	}
}

const argoSetsUnsupported = `
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: prs, namespace: argocd}
spec:
  generators:
    - scmProvider: {github: {organization: acme}}
  template:
    metadata: {name: 'pr-{{number}}'}
    spec:
      project: default
      source: {repoURL: https://github.com/acme/app.git, targetRevision: '{{head_sha}}', path: deploy}
      destination: {server: https://kubernetes.default.svc, namespace: 'pr-{{number}}'}
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: staged, namespace: argocd}
spec:
  generators:
    - list: {elements: [{env: dev}]}
  strategy:
    type: RollingSync
    rollingSync:
      steps:
        - matchExpressions: [{key: env, operator: NotIn, values: [prod]}]
  template:
    metadata: {name: 'app-{{env}}'}
    spec:
      project: default
      source: {repoURL: https://github.com/acme/app.git, targetRevision: main, path: 'envs/{{env}}'}
      destination: {server: https://kubernetes.default.svc, namespace: '{{env}}'}
      syncPolicy: {automated: {selfHeal: true}}
`

func TestConvertArgoApplicationSetsUnsupported(t *testing.T) {
	res, out := convertString(t, argoSetsUnsupported)
	docs := documents(t, out)
	if _, ok := docs["SyncTargetSet/prs"]; ok {
		t.Error("a set without a convertible generator was printed")
	}
	problem(t, res, "ApplicationSet argocd/prs", "spec.generators[0].scmProvider")
	staged, _ := setSpec(t, docs, "staged")
	if staged.Spec.Strategy != nil {
		t.Errorf("a step converge cannot express leaves the rollout all at once, with a comment: %+v", staged.Spec.Strategy)
	}
	problem(t, res, "ApplicationSet argocd/staged", "spec.strategy.rollingSync.steps[0]")
	if !strings.Contains(out, "# "+notePrefix+"spec.strategy.rollingSync.steps[0]") {
		t.Errorf("no comment on the step:\n%s", out)
	}
}

// TestConvertArgoHelmParametersAsHelmSetsThem: parameters are set as Argo CD hands them to
// Helm (--set, --set-string with forceString), with Helm's own parser: indexes and escaped
// dots in names, commas in a value, a {list}.
func TestConvertArgoHelmParametersAsHelmSetsThem(t *testing.T) {
	_, out := convertString(t, `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: params, namespace: argocd}
spec:
  source:
    repoURL: https://charts.example.com
    chart: app
    targetRevision: 1.0.0
    helm:
      parameters:
        - {name: "ingress.hosts[0].host", value: "a.example.com"}
        - {name: "annotations.prometheus\\.io/scrape", value: "true", forceString: true}
        - {name: "args", value: "--a=1,--b=2"}
        - {name: "zones", value: "{eu,us}"}
        - {name: "replicas", value: "3"}
  destination: {name: in-cluster, namespace: app}
`)
	got := values(t, syncTarget(t, documents(t, out), "params"))
	want := map[string]any{
		"ingress":     map[string]any{"hosts": []any{map[string]any{"host": "a.example.com"}}},
		"annotations": map[string]any{"prometheus.io/scrape": "true"},
		"args":        "--a=1,--b=2",
		"zones":       []any{"eu", "us"},
		"replicas":    float64(3),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("values: got %#v\nwant %#v", got, want)
	}
}

// TestConvertReportsWhatTheAPIServerWouldRefuse: a converted object the CRD refuses (here
// a target namespace that is no namespace name) is a problem that says why, checked with
// the API server's own validators.
func TestConvertReportsWhatTheAPIServerWouldRefuse(t *testing.T) {
	res, _ := convertString(t, `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: bad-ns, namespace: argocd}
spec:
  source: {repoURL: https://github.com/acme/apps.git, targetRevision: main, path: app}
  destination: {name: in-cluster, namespace: Not_A_Namespace}
`)
	p := problem(t, res, "Application argocd/bad-ns", "")
	if p.Warning || !strings.Contains(p.Reason, "the API server would refuse the converted SyncTarget") ||
		!strings.Contains(p.Reason, `spec.targetNamespace: Invalid value: "Not_A_Namespace"`) {
		t.Errorf("problem: %+v", p)
	}
	if !res.Failed() {
		t.Error("the result does not say it failed")
	}
}

const argoPullRequests = `
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: previews, namespace: argocd}
spec:
  goTemplate: false
  generators:
    - pullRequest:
        github:
          owner: acme
          repo: app
          api: https://ghe.acme.example/api/v3
          tokenRef: {secretName: github-token, key: token}
          labels: [preview]
        filters:
          - targetBranchMatch: "^main$"
          - branchMatch: "feature-.*"
        requeueAfterSeconds: 120
  template:
    metadata: {name: 'app-{{branch_slug}}-{{number}}'}
    spec:
      project: default
      source: {repoURL: https://ghe.acme.example/acme/app.git, targetRevision: '{{head_sha}}', path: deploy}
      destination: {server: https://kubernetes.default.svc, namespace: 'preview-{{number}}'}
---
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: mrs, namespace: argocd}
spec:
  generators:
    - pullRequest:
        gitlab: {project: "1234", api: https://gitlab.acme.example/, pullRequestState: merged}
  template:
    metadata: {name: 'mr-{{number}}'}
    spec:
      project: default
      source: {repoURL: https://gitlab.acme.example/acme/app.git, targetRevision: '{{head_sha}}', path: deploy}
      destination: {server: https://kubernetes.default.svc, namespace: 'mr-{{number}}'}
`

func TestConvertArgoPullRequestGenerator(t *testing.T) {
	res, out := convertString(t, argoPullRequests)
	docs := documents(t, out)
	set, spec := setSpec(t, docs, "previews")
	pr := set.Spec.Generators[0].PullRequests
	if pr == nil {
		t.Fatalf("no pullRequests generator:\n%s", out)
	}
	want := convergev1.PullRequestsGenerator{Provider: convergev1.GitHubForge, Address: "https://ghe.acme.example/api/v3",
		Repository: "acme/app", TokenSecretRef: &convergev1.LocalObjectReference{Name: "github-token"},
		TargetBranches: []string{"main"}, Labels: []string{"preview"}, ServiceAccountName: "preview",
		Interval: &metav1.Duration{Duration: 120 * time.Second}}
	if !reflect.DeepEqual(*pr, want) {
		t.Errorf("generator\n got %+v\nwant %+v", *pr, want)
	}
	if spec.ServiceAccountName != pr.ServiceAccountName {
		t.Errorf("the template runs previews as %q, the generator says %q", spec.ServiceAccountName, pr.ServiceAccountName)
	}
	if spec.Source.Ref.Commit != "{{ .headSHA }}" {
		t.Errorf("the head commit is followed as %+v", spec.Source.Ref)
	}
	if set.Spec.Template.Metadata.Name != "app-{{ .slug }}-{{ .number }}" {
		t.Errorf("name %q", set.Spec.Template.Metadata.Name)
	}
	problem(t, res, "ApplicationSet argocd/previews", "spec.generators[0].pullRequest.filters[1].branchMatch")
	problem(t, res, "ApplicationSet argocd/mrs", "spec.generators[0].pullRequest.gitlab.project")
	problem(t, res, "ApplicationSet argocd/mrs", "spec.generators[0].pullRequest.gitlab.pullRequestState")
	if !strings.Contains(out, "create it with the rights a pull request may have") {
		t.Errorf("the output does not say which service account to create:\n%s", out)
	}
}
