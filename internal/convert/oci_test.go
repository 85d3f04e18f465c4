package convert

import (
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// fluxOCI is a Kustomization of an OCIRepository as Flux's guide to OCI artifacts writes
// them: manifests pushed with `flux push artifact`, followed by a semver range, signed
// with cosign.
const fluxOCI = `
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: podinfo, namespace: flux-system}
spec:
  interval: 5m
  url: oci://ghcr.io/stefanprodan/manifests/podinfo
  ref:
    semver: ">=6.5.0 <7.0.0"
  layerSelector:
    mediaType: application/vnd.cncf.flux.content.v1.tar+gzip
    operation: extract
  secretRef: {name: ghcr-auth}
  insecure: false
  timeout: 60s
  verify:
    provider: cosign
    secretRef: {name: cosign-pub}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: podinfo, namespace: flux-system}
spec:
  interval: 10m
  sourceRef: {kind: OCIRepository, name: podinfo}
  path: ./kustomize
  prune: true
  wait: true
  timeout: 3m
  targetNamespace: podinfo
  dependsOn: [{name: infra-controllers}]
`

func TestConvertFluxOCIRepositoryKustomization(t *testing.T) {
	res, out := convertString(t, fluxOCI)
	if len(res.Problems) != 0 {
		t.Errorf("everything carries over; problems:\n%s", problemList(res))
	}
	st := syncTarget(t, documents(t, out), "podinfo")
	want := convergev1.OCISource{
		URL:            "oci://ghcr.io/stefanprodan/manifests/podinfo",
		Ref:            convergev1.OCIRef{SemVer: ">=6.5.0 <7.0.0"},
		LayerMediaType: "application/vnd.cncf.flux.content.v1.tar+gzip",
		SecretRef:      &convergev1.LocalObjectReference{Name: "ghcr-auth"},
		Interval:       &metav1.Duration{Duration: 5 * time.Minute},
		Verify:         &convergev1.OCIVerify{Provider: convergev1.CosignProvider, SecretRef: convergev1.LocalObjectReference{Name: "cosign-pub"}},
	}
	if st.Spec.OCI == nil || !reflect.DeepEqual(*st.Spec.OCI, want) {
		t.Fatalf("spec.oci\n got %+v\nwant %+v", st.Spec.OCI, want)
	}
	if st.Spec.Source.URL != "" || st.Spec.Chart != nil {
		t.Errorf("an OCI artifact is spec.oci only: %+v", st.Spec)
	}
	if st.Spec.Path != "kustomize" || !st.Spec.Prune || st.Spec.TargetNamespace != "podinfo" ||
		st.Spec.Timeout == nil || st.Spec.Timeout.Duration != 3*time.Minute || st.Spec.Wait == nil || !*st.Spec.Wait ||
		!reflect.DeepEqual(st.Spec.DependsOn, []convergev1.DependencyReference{{Name: "infra-controllers"}}) {
		t.Errorf("the Kustomization's own fields: %+v", st.Spec)
	}
	for _, c := range []struct{ line, text string }{
		{"oci:", "spec.interval (Kustomization): converge has no periodic re-apply"},
		{"oci:", "spec.oci.interval is the poll of the registry"},
		{"oci:", "spec.timeout (OCIRepository): converge bounds a fetch"},
		{"secretRef:", "converge trusts the PEM public key of every value of this Secret"},
	} {
		if !commentBefore(out, c.line, c.text) {
			t.Errorf("no comment %q above %q:\n%s", c.text, c.line, out)
		}
	}
	if !strings.Contains(out, "# Converted from Kustomization flux-system/podinfo, OCIRepository flux-system/podinfo.") {
		t.Errorf("the header does not name both objects:\n%s", out)
	}
}

// TestConvertFluxOCIRef: Flux follows the digest, then the semver range, then the tag,
// and the tag latest without a ref; so does the converted SyncTarget, and says so.
func TestConvertFluxOCIRef(t *testing.T) {
	digest := "sha256:" + strings.Repeat("3f", 32)
	for _, tc := range []struct {
		name, ref string
		want      convergev1.OCIRef
		note      string
	}{
		{"tag", "ref: {tag: 6.5.4}", convergev1.OCIRef{Tag: "6.5.4"}, ""},
		{"digest", "ref: {digest: '" + digest + "'}", convergev1.OCIRef{Digest: digest}, ""},
		{"all three", "ref: {tag: latest, semver: '6.x', digest: '" + digest + "'}", convergev1.OCIRef{Digest: digest},
			"Flux follows digest, and so does converge"},
		{"semver and tag", "ref: {tag: latest, semver: '6.x'}", convergev1.OCIRef{SemVer: "6.x"}, "Flux follows semver"},
		{"none", "", convergev1.OCIRef{Tag: "latest"}, "OCIRepository without spec.ref: Flux follows the tag latest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, out := convertString(t, `
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata: {name: app, namespace: team}
spec:
  url: oci://registry.example.com:5000/team/app-config
  `+tc.ref+`
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: app, namespace: team}
spec: {sourceRef: {kind: OCIRepository, name: app}, path: ./, prune: true}
`)
			if res.Failed() {
				t.Errorf("problems:\n%s", problemList(res))
			}
			st := syncTarget(t, documents(t, out), "app")
			if st.Spec.OCI == nil || st.Spec.OCI.Ref != tc.want || st.Spec.Path != "" {
				t.Fatalf("ref: got %+v, want %+v (path %q)", st.Spec.OCI, tc.want, st.Spec.Path)
			}
			if tc.note != "" && !commentBefore(out, "ref:", tc.note) {
				t.Errorf("no comment %q above the ref:\n%s", tc.note, out)
			}
		})
	}
}

// fluxOCILosses is an OCIRepository with every field converge cannot carry over.
const fluxOCILosses = `
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: chart-as-manifests, namespace: apps}
spec:
  interval: 10m
  url: oci://123456789012.dkr.ecr.eu-west-1.amazonaws.com/apps/shop
  provider: aws
  serviceAccountName: ecr-reader
  ref: {semver: ">=1.0.0", semverFilter: ".*-rc.*"}
  layerSelector:
    mediaType: application/vnd.cncf.helm.chart.content.v1.tar+gzip
    operation: copy
  insecure: true
  certSecretRef: {name: registry-tls}
  proxySecretRef: {name: proxy}
  ignore: "*.md"
  suspend: true
  verify:
    provider: cosign
    matchOIDCIdentity:
      - issuer: ^https://token.actions.githubusercontent.com$
        subject: ^https://github.com/acme/shop.*$
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: shop, namespace: apps}
spec:
  interval: 10m
  sourceRef: {kind: OCIRepository, name: chart-as-manifests}
  path: ./
  prune: true
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: notation-signed, namespace: apps}
spec:
  interval: 10m
  url: oci://ghcr.io/acme/manifests/billing
  ref: {tag: stable}
  verify:
    provider: notation
    secretRef: {name: notation-certs}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: billing, namespace: apps}
spec:
  interval: 10m
  sourceRef: {kind: OCIRepository, name: notation-signed}
  path: ./deploy
`

// TestConvertFluxOCIRepositoryLosses: each field converge has not is commented where it
// was and reported; what has an equivalent is still converted, and a lost verification
// leaves the SyncTarget without one, which the problem says.
func TestConvertFluxOCIRepositoryLosses(t *testing.T) {
	res, out := convertString(t, fluxOCILosses)
	docs := documents(t, out)
	shop := syncTarget(t, docs, "shop")
	if o := shop.Spec.OCI; o == nil || o.URL != "oci://123456789012.dkr.ecr.eu-west-1.amazonaws.com/apps/shop" ||
		o.Ref.SemVer != ">=1.0.0" || o.LayerMediaType != "application/vnd.cncf.helm.chart.content.v1.tar+gzip" ||
		o.Verify != nil || o.SecretRef != nil {
		t.Errorf("shop: %+v", shop.Spec.OCI)
	}
	from := "OCIRepository apps/chart-as-manifests"
	for _, f := range []struct{ field, text string }{
		{"spec.provider", "not with a cloud provider's workload identity"},
		{"spec.serviceAccountName", "does not read a ServiceAccount's imagePullSecrets"},
		{"spec.ref.semverFilter", "range of ref.semver only"},
		{"spec.layerSelector.operation", "converge extracts the layer"},
		{"spec.insecure", "over TLS only"},
		{"spec.certSecretRef", "client certificates are not supported"},
		{"spec.proxySecretRef", "HTTPS_PROXY"},
		{"spec.ignore", "converge renders every file of spec.path"},
		{"spec.verify", "keyless verification"},
	} {
		p := problem(t, res, from, f.field)
		if !strings.Contains(p.Reason, f.text) || p.Warning {
			t.Errorf("%s: %+v", f.field, p)
		}
		if !strings.Contains(out, "# "+notePrefix+f.field+" (OCIRepository)") {
			t.Errorf("no comment on %s in the output:\n%s", f.field, out)
		}
	}
	if p := problem(t, res, from, "spec.verify"); !strings.Contains(p.Reason, "without checking their signatures") {
		t.Errorf("a lost verification must say nothing is verified now: %+v", p)
	}
	if !commentBefore(out, "oci:", "spec.suspend (OCIRepository): suspend the SyncTarget instead") {
		t.Errorf("no comment on suspend:\n%s", out)
	}
	billing := syncTarget(t, docs, "billing")
	if billing.Spec.OCI == nil || billing.Spec.OCI.Verify != nil || billing.Spec.OCI.Ref.Tag != "stable" {
		t.Errorf("billing: %+v", billing.Spec.OCI)
	}
	if p := problem(t, res, "OCIRepository apps/notation-signed", "spec.verify.provider"); !strings.Contains(p.Reason, "cosign signatures only") {
		t.Errorf("notation: %+v", p)
	}
	if !res.Failed() {
		t.Error("the losses must fail the conversion")
	}
}

// TestConvertFluxOCIRepositoryElsewhere: an OCIRepository missing from the input leaves a
// SyncTarget to fill in; one of another namespace is converted, with a comment.
func TestConvertFluxOCIRepositoryElsewhere(t *testing.T) {
	res, out := convertString(t, `
apiVersion: source.toolkit.fluxcd.io/v1
kind: OCIRepository
metadata: {name: shared, namespace: flux-system}
spec: {url: oci://ghcr.io/acme/manifests/shared, ref: {tag: v2}}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: missing, namespace: team}
spec: {sourceRef: {kind: OCIRepository, name: nowhere}, path: ./deploy}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: shared, namespace: team}
spec: {sourceRef: {kind: OCIRepository, name: shared, namespace: flux-system}, path: ./deploy}
`)
	docs := documents(t, out)
	missing := syncTarget(t, docs, "missing")
	if missing.Spec.OCI == nil || !strings.Contains(missing.Spec.OCI.URL, "fill-me-in") || missing.Spec.Source.URL != "" {
		t.Errorf("missing: %+v", missing.Spec)
	}
	if p := problem(t, res, "Kustomization team/missing", "spec.sourceRef"); !strings.Contains(p.Reason, "fill in spec.oci.url and spec.oci.ref") {
		t.Errorf("missing: %+v", p)
	}
	if !commentBefore(out, "oci:", "fill in spec.oci.url") {
		t.Errorf("no comment on the source to fill in:\n%s", out)
	}
	shared := syncTarget(t, docs, "shared")
	if shared.Spec.OCI == nil || shared.Spec.OCI.URL != "oci://ghcr.io/acme/manifests/shared" || shared.Spec.OCI.Ref.Tag != "v2" {
		t.Errorf("shared: %+v", shared.Spec.OCI)
	}
	if p := problem(t, res, "Kustomization team/shared", "spec.sourceRef"); !strings.Contains(p.Reason, "another namespace") {
		t.Errorf("shared: %+v", p)
	}
}

// argoOCI are Applications of Argo CD's OCI sources: an artifact of plain manifests or a
// kustomization, a path inside it, a tag, a range or a digest.
const argoOCI = `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: guestbook, namespace: argocd}
spec:
  project: default
  source:
    repoURL: oci://ghcr.io/acme/manifests/guestbook
    targetRevision: 1.2.0
    path: overlays/prod
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
  syncPolicy: {automated: {prune: true, selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: ranged, namespace: argocd}
spec:
  project: default
  source: {repoURL: oci://registry.example.com/team/app, targetRevision: ">=1.0.0 <2.0.0", path: .}
  destination: {server: https://kubernetes.default.svc, namespace: app}
  syncPolicy: {automated: {selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: pinned, namespace: argocd}
spec:
  project: default
  sources:
    - repoURL: oci://registry.example.com/team/app
      targetRevision: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
      path: base
  destination: {server: https://kubernetes.default.svc, namespace: app}
  syncPolicy: {automated: {selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: unversioned, namespace: argocd}
spec:
  project: default
  source: {repoURL: oci://registry.example.com/team/app, path: base}
  destination: {server: https://kubernetes.default.svc, namespace: app}
  syncPolicy: {automated: {selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: nginx, namespace: argocd}
spec:
  project: default
  source:
    repoURL: oci://registry-1.docker.io/bitnamicharts
    chart: nginx
    targetRevision: 18.x
  destination: {server: https://kubernetes.default.svc, namespace: nginx}
  syncPolicy: {automated: {selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: chart-artifact, namespace: argocd}
spec:
  project: default
  source:
    repoURL: oci://ghcr.io/acme/charts/shop
    targetRevision: 2.1.0
    path: .
    helm: {releaseName: shop, valuesObject: {replicaCount: 2}}
  destination: {server: https://kubernetes.default.svc, namespace: shop}
  syncPolicy: {automated: {selfHeal: true}}
---
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata: {name: two-sources, namespace: argocd}
spec:
  project: default
  sources:
    - {repoURL: oci://ghcr.io/acme/manifests/guestbook, targetRevision: 1.2.0, path: .}
    - {repoURL: https://github.com/acme/values.git, targetRevision: main, ref: values}
  destination: {server: https://kubernetes.default.svc, namespace: guestbook}
`

func TestConvertArgoOCISources(t *testing.T) {
	res, out := convertString(t, argoOCI)
	docs := documents(t, out)
	for _, tc := range []struct {
		name, url, path string
		ref             convergev1.OCIRef
		note            string
	}{
		{"guestbook", "oci://ghcr.io/acme/manifests/guestbook", "overlays/prod", convergev1.OCIRef{Tag: "1.2.0"}, `targetRevision "1.2.0" (Application) read as a tag`},
		{"ranged", "oci://registry.example.com/team/app", "", convergev1.OCIRef{SemVer: ">=1.0.0 <2.0.0"}, `targetRevision ">=1.0.0 <2.0.0" (Application) read as a semver range`},
		{"pinned", "oci://registry.example.com/team/app", "base",
			convergev1.OCIRef{Digest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}, "targetRevision \"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\" (Application) read as a digest"},
		{"unversioned", "oci://registry.example.com/team/app", "base", convergev1.OCIRef{Tag: "latest"}, "targetRevision (Application) is not set: the tag latest is followed"},
	} {
		st := syncTarget(t, docs, tc.name)
		if st.Spec.OCI == nil || st.Spec.OCI.URL != tc.url || st.Spec.OCI.Ref != tc.ref || st.Spec.Path != tc.path ||
			st.Spec.Source.URL != "" || st.Spec.Chart != nil {
			t.Errorf("%s: oci %+v path %q", tc.name, st.Spec.OCI, st.Spec.Path)
		}
		if !commentBefore(out, "ref:", "spec.source."+tc.note) {
			t.Errorf("%s: no comment %q:\n%s", tc.name, tc.note, out)
		}
	}
	if !commentBefore(out, "oci:", "spec.sources (Application) has a single source, converted as spec.oci") {
		t.Errorf("no comment on the single source:\n%s", out)
	}
	// With a chart named, an oci:// repoURL is a chart repository, as before.
	nginx := syncTarget(t, docs, "nginx")
	want := convergev1.ChartSource{Repository: "oci://registry-1.docker.io/bitnamicharts", Name: "nginx", Version: "18.x"}
	if nginx.Spec.OCI != nil || nginx.Spec.Chart == nil || *nginx.Spec.Chart != want {
		t.Errorf("nginx: chart %+v oci %+v", nginx.Spec.Chart, nginx.Spec.OCI)
	}
	// A helm block on an artifact: the chart directory inside it is rendered, and the
	// comment says what to do if it is a chart pushed with helm push.
	ca := syncTarget(t, docs, "chart-artifact")
	if ca.Spec.OCI == nil || ca.Spec.Helm == nil || ca.Spec.Helm.ReleaseName != "shop" || values(t, ca)["replicaCount"] != float64(2) {
		t.Errorf("chart-artifact: %+v", ca.Spec)
	}
	if !commentBefore(out, "oci:", "a chart pushed with helm push is a chart of a registry: follow it as spec.chart") {
		t.Errorf("no comment on a chart artifact:\n%s", out)
	}
	if _, ok := docs["SyncTarget/two-sources"]; ok {
		t.Error("a multi-source Application was converted")
	}
	if p := problem(t, res, "Application argocd/two-sources", "spec.sources"); !strings.Contains(p.Reason, "one source per SyncTarget") {
		t.Errorf("multi-source: %+v", p)
	}
	for _, p := range res.Problems {
		if p.From != "Application argocd/two-sources" {
			t.Errorf("the other Applications convert fully; problem: %s", p)
		}
	}
}

// TestConvertArgoOCISourceInAnApplicationSet: the template of a set follows an artifact
// as an Application does.
func TestConvertArgoOCISourceInAnApplicationSet(t *testing.T) {
	res, out := convertString(t, `
apiVersion: argoproj.io/v1alpha1
kind: ApplicationSet
metadata: {name: envs, namespace: argocd}
spec:
  goTemplate: true
  generators:
    - list: {elements: [{env: dev}, {env: prod}]}
  template:
    metadata: {name: 'app-{{.env}}'}
    spec:
      project: default
      source: {repoURL: oci://ghcr.io/acme/manifests/app, targetRevision: 3.x, path: 'envs/{{.env}}'}
      destination: {server: https://kubernetes.default.svc, namespace: '{{.env}}'}
      syncPolicy: {automated: {prune: true, selfHeal: true}}
`)
	if res.Failed() {
		t.Errorf("problems:\n%s", problemList(res))
	}
	_, spec := setSpec(t, documents(t, out), "envs")
	if spec.OCI == nil || spec.OCI.URL != "oci://ghcr.io/acme/manifests/app" || spec.OCI.Ref.SemVer != "3.x" || spec.Path != "envs/{{ .env }}" {
		t.Errorf("template spec: oci %+v path %q", spec.OCI, spec.Path)
	}
}
