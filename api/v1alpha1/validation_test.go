package v1alpha1_test

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

var k8s client.Client

// TestMain installs the generated CRD into a real kube-apiserver once for the package.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // make test-unit: the pure tests alone
		os.Exit(m.Run())
	}
	os.Exit(func() int {
		c, err := localcluster.Start(context.Background(), localcluster.Options{CRDDirectoryPaths: []string{clustertest.CRDDir()}})
		if err != nil {
			panic(err)
		}
		defer func() { _ = c.Stop() }()
		scheme := runtime.NewScheme()
		if err := convergev1.AddToScheme(scheme); err != nil {
			panic(err)
		}
		if k8s, err = client.New(c.Config, client.Options{Scheme: scheme}); err != nil {
			panic(err)
		}
		return m.Run()
	}())
}

func valid(name string) *convergev1.SyncTarget {
	return &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{
				URL: "https://git.example.com/org/shop.git",
				Ref: convergev1.GitRef{Branch: "main"},
			},
			Path: "deploy/prod",
		},
	}
}

func TestInvalidSyncTargetsAreRejected(t *testing.T) {
	if k8s == nil {
		t.Skip("needs a local cluster: make test")
	}
	tests := []struct {
		name   string
		mutate func(*convergev1.SyncTarget)
		field  string // the field the API server names
		msg    string // what it says about it
	}{
		{"maxDeletions over 100%", func(st *convergev1.SyncTarget) { st.Spec.MaxDeletions = ptrTo(intstr.FromString("150%")) },
			"spec.maxDeletions", "must be a count (0 or more) or a percentage from 0% to 100%"},
		{"maxDeletions negative", func(st *convergev1.SyncTarget) { st.Spec.MaxDeletions = ptrTo(intstr.FromInt32(-1)) },
			"spec.maxDeletions", "must be a count (0 or more) or a percentage"},
		{"maxDeletions a word", func(st *convergev1.SyncTarget) { st.Spec.MaxDeletions = ptrTo(intstr.FromString("some")) },
			"spec.maxDeletions", "must be a count (0 or more) or a percentage"},
		{"two ref kinds", func(st *convergev1.SyncTarget) { st.Spec.Source.Ref.Tag = "v1.0.0" },
			"spec.source.ref", "exactly one of branch, tag, semver, commit or name must be set"},
		{"no ref", func(st *convergev1.SyncTarget) { st.Spec.Source.Ref = convergev1.GitRef{} },
			"spec.source.ref", "exactly one of branch, tag, semver, commit or name must be set"},
		{"ftp url", func(st *convergev1.SyncTarget) { st.Spec.Source.URL = "ftp://git.example.com/shop.git" },
			"spec.source.url", "must be an https://, http:// or ssh:// URL"},
		{"url with spaces", func(st *convergev1.SyncTarget) { st.Spec.Source.URL = "https://git.example.com/a b" },
			"spec.source.url", "must be an https://, http:// or ssh:// URL"},
		{"negative interval", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Interval = &metav1.Duration{Duration: -60e9}
		}, "spec.source.interval", "must be a positive duration"},
		{"zero interval", func(st *convergev1.SyncTarget) { st.Spec.Source.Interval = &metav1.Duration{} },
			"spec.source.interval", "must be a positive duration"},
		{"zero timeout", func(st *convergev1.SyncTarget) { st.Spec.Timeout = &metav1.Duration{} },
			"spec.timeout", "must be a positive duration"},
		{"interval and schedule", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Interval = &metav1.Duration{Duration: 60e9}
			st.Spec.Source.Schedule = "*/5 * * * *"
		}, "spec.source", "interval and schedule are mutually exclusive"},
		{"parent path", func(st *convergev1.SyncTarget) { st.Spec.Path = "../other-team" },
			"spec.path", "must be a relative path inside the repository"},
		{"parent inside path", func(st *convergev1.SyncTarget) { st.Spec.Path = "deploy/../../etc" },
			"spec.path", "must be a relative path inside the repository"},
		{"absolute path", func(st *convergev1.SyncTarget) { st.Spec.Path = "/etc" },
			"spec.path", "must be a relative path inside the repository"},
		{"bad cron", func(st *convergev1.SyncTarget) { st.Spec.Source.Schedule = "every five minutes" },
			"spec.source.schedule", "must be a cron expression"},
		{"cron minute out of range", func(st *convergev1.SyncTarget) { st.Spec.Source.Schedule = "61 * * * *" },
			"spec.source.schedule", "must be a cron expression"},
		{"bad sync window schedule", func(st *convergev1.SyncTarget) {
			st.Spec.SyncWindows = []convergev1.SyncWindow{{Kind: convergev1.DenyWindow, Schedule: "0 25 * * *", Duration: metav1.Duration{Duration: 3600e9}}}
		}, "spec.syncWindows[0].schedule", "must be a cron expression"},
		{"bad sync window kind", func(st *convergev1.SyncTarget) {
			st.Spec.SyncWindows = []convergev1.SyncWindow{{Kind: "maybe", Schedule: "0 22 * * *", Duration: metav1.Duration{Duration: 3600e9}}}
		}, "spec.syncWindows[0].kind", "Unsupported value"},
		{"zero sync window", func(st *convergev1.SyncTarget) {
			st.Spec.SyncWindows = []convergev1.SyncWindow{{Kind: convergev1.AllowWindow, Schedule: "0 22 * * *"}}
		}, "spec.syncWindows[0].duration", "must be a positive duration"},
		{"short commit", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Ref = convergev1.GitRef{Commit: "abc1234"}
		}, "spec.source.ref.commit", "should match"},
		{"history limit zero", func(st *convergev1.SyncTarget) { st.Spec.HistoryLimit = ptr.To(int32(0)) },
			"spec.historyLimit", "should be greater than or equal to 1"},
		{"neither source nor chart nor oci", func(st *convergev1.SyncTarget) { st.Spec.Source = convergev1.GitSource{} },
			"spec", "exactly one of source, chart and oci must be set"},
		{"source and chart", func(st *convergev1.SyncTarget) {
			st.Spec.Chart = &convergev1.ChartSource{Repository: "oci://registry.example/charts", Name: "podinfo"}
		}, "spec", "exactly one of source, chart and oci must be set"},
		{"source and oci", func(st *convergev1.SyncTarget) { st.Spec.OCI = ociSource() },
			"spec", "exactly one of source, chart and oci must be set"},
		{"chart and oci", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.Path = convergev1.GitSource{}, ""
			st.Spec.Chart = &convergev1.ChartSource{Repository: "oci://registry.example/charts", Name: "podinfo"}
			st.Spec.OCI = ociSource()
		}, "spec", "exactly one of source, chart and oci must be set"},
		{"source, chart and oci", func(st *convergev1.SyncTarget) {
			st.Spec.Chart = &convergev1.ChartSource{Repository: "oci://registry.example/charts", Name: "podinfo"}
			st.Spec.OCI = ociSource()
		}, "spec", "exactly one of source, chart and oci must be set"},
		{"oci ref with a tag and a digest", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Ref.Digest = "sha256:" + strings.Repeat("a", 64)
		}, "spec.oci.ref", "exactly one of tag, semver or digest must be set"},
		{"oci ref with a tag and a range", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Ref.SemVer = ">=1.0.0"
		}, "spec.oci.ref", "exactly one of tag, semver or digest must be set"},
		{"oci without a ref", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Ref = convergev1.OCIRef{}
		}, "spec.oci.ref", "exactly one of tag, semver or digest must be set"},
		{"oci over https", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.URL = "https://ghcr.io/acme/manifests/shop"
		}, "spec.oci.url", "must be oci://host[:port]/repository"},
		{"oci url with a tag", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.URL = "oci://ghcr.io/acme/manifests/shop:v1.2.3"
		}, "spec.oci.url", "no tag, digest or credentials"},
		{"oci url with a digest", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.URL = "oci://ghcr.io/acme/manifests/shop@sha256:" + strings.Repeat("a", 64)
		}, "spec.oci.url", "no tag, digest or credentials"},
		{"oci url with credentials", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.URL = "oci://robot:hunter2@ghcr.io/acme/manifests/shop"
		}, "spec.oci.url", "no tag, digest or credentials"},
		{"oci url without a repository", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.URL = "oci://ghcr.io"
		}, "spec.oci.url", "must be oci://host[:port]/repository"},
		{"oci short digest", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Ref = convergev1.OCIRef{Digest: "sha256:abc123"}
		}, "spec.oci.ref.digest", "should match"},
		{"oci digest of another algorithm", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Ref = convergev1.OCIRef{Digest: "sha512:" + strings.Repeat("a", 128)}
		}, "spec.oci.ref.digest", "should match"},
		{"oci tag with a slash", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Ref = convergev1.OCIRef{Tag: "release/v1"}
		}, "spec.oci.ref.tag", "should match"},
		{"oci interval and schedule", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Interval = &metav1.Duration{Duration: 60e9}
			st.Spec.OCI.Schedule = "*/5 * * * *"
		}, "spec.oci", "interval and schedule are mutually exclusive"},
		{"oci zero interval", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Interval = &metav1.Duration{}
		}, "spec.oci.interval", "must be a positive duration"},
		{"oci verify without keys", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Verify = &convergev1.OCIVerify{}
		}, "spec.oci.verify.secretRef.name", "should be at least 1 chars long"},
		{"oci verify with notation", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.Verify = &convergev1.OCIVerify{Provider: "notation", SecretRef: convergev1.LocalObjectReference{Name: "keys"}}
		}, "spec.oci.verify.provider", "Unsupported value"},
		{"oci layer media type not a media type", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
			st.Spec.OCI.LayerMediaType = "tar+gzip"
		}, "spec.oci.layerMediaType", "should match"},
		{"chart with a path", func(st *convergev1.SyncTarget) {
			st.Spec.Source = convergev1.GitSource{}
			st.Spec.Chart = &convergev1.ChartSource{Repository: "oci://registry.example/charts", Name: "podinfo"}
		}, "spec", "path applies to a Git source, not to a chart"},
		{"chart from ftp", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.Path = convergev1.GitSource{}, ""
			st.Spec.Chart = &convergev1.ChartSource{Repository: "ftp://charts.example", Name: "podinfo"}
		}, "spec.chart.repository", "must be an https://, http:// or oci:// URL"},
		{"digest of an HTTP chart", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.Path = convergev1.GitSource{}, ""
			st.Spec.Chart = &convergev1.ChartSource{Repository: "https://charts.example", Name: "podinfo",
				Digest: "sha256:" + strings.Repeat("a", 64)}
		}, "spec.chart", "digest needs an oci:// repository"},
		{"values from a Pod", func(st *convergev1.SyncTarget) {
			st.Spec.Helm = &convergev1.HelmSpec{ValuesFrom: []convergev1.ValuesReference{{Kind: "Pod", Name: "x"}}}
		}, "spec.helm.valuesFrom[0].kind", "Unsupported value"},
		{"bad target namespace", func(st *convergev1.SyncTarget) { st.Spec.TargetNamespace = "Shop_Prod" },
			"spec.targetNamespace", "should match"},
		{"tag verification of a branch", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Verify = &convergev1.VerifySpec{Mode: convergev1.VerifyTag, SecretRef: convergev1.LocalObjectReference{Name: "keys"}}
		}, "spec.source", "verify.mode Tag and TagAndHEAD need ref.tag or ref.semver"},
		{"unknown verify mode", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Verify = &convergev1.VerifySpec{Mode: "Branch", SecretRef: convergev1.LocalObjectReference{Name: "keys"}}
		}, "spec.source.verify.mode", "Unsupported value"},
		{"verify without keys", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Verify = &convergev1.VerifySpec{}
		}, "spec.source.verify.secretRef.name", "should be at least 1 chars long"},
		{"unknown decryption provider", func(st *convergev1.SyncTarget) {
			st.Spec.Decryption = &convergev1.DecryptionSpec{Provider: "vault"}
		}, "spec.decryption.provider", "Unsupported value"},
		{"bad variable name", func(st *convergev1.SyncTarget) {
			st.Spec.PostBuild = &convergev1.PostBuildSpec{Substitute: map[string]string{"cluster-name": "prod"}}
		}, "spec.postBuild.substitute", "variable names must match"},
		{"substitute from a Deployment", func(st *convergev1.SyncTarget) {
			st.Spec.PostBuild = &convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{{Kind: "Deployment", Name: "vars"}}}
		}, "spec.postBuild.substituteFrom[0].kind", "Unsupported value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			st := valid("invalid")
			tt.mutate(st)
			err := k8s.Create(t.Context(), st)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tt.field + ":"))
			g.Expect(err.Error()).To(ContainSubstring(tt.msg))
		})
	}
}

func TestValidSyncTargetsRoundTripWithDefaults(t *testing.T) {
	if k8s == nil {
		t.Skip("needs a local cluster: make test")
	}
	sha := "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		name   string
		mutate func(*convergev1.SyncTarget)
	}{
		{"branch over https", func(*convergev1.SyncTarget) {}},
		{"tag over ssh", func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = "ssh://git@git.example.com:2222/org/shop.git"
			st.Spec.Source.Ref = convergev1.GitRef{Tag: "v1.2.3"}
		}},
		{"semver over scp-like url", func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = "git@github.com:org/shop.git"
			st.Spec.Source.Ref = convergev1.GitRef{SemVer: ">=1.0.0 <2.0.0"}
		}},
		{"commit over http", func(st *convergev1.SyncTarget) {
			st.Spec.Source.URL = "http://127.0.0.1:8080/shop.git"
			st.Spec.Source.Ref = convergev1.GitRef{Commit: sha}
		}},
		{"named ref", func(st *convergev1.SyncTarget) { st.Spec.Source.Ref = convergev1.GitRef{Name: "refs/pull/7/head"} }},
		{"maxDeletions as a count", func(st *convergev1.SyncTarget) { st.Spec.MaxDeletions = ptrTo(intstr.FromInt32(5)) }},
		{"maxDeletions as a percentage", func(st *convergev1.SyncTarget) { st.Spec.MaxDeletions = ptrTo(intstr.FromString("25%")) }},
		{"cron schedule with zone", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Schedule = "CRON_TZ=Europe/Berlin */5 9-17 * * MON-FRI"
		}},
		{"every descriptor", func(st *convergev1.SyncTarget) { st.Spec.Source.Schedule = "@every 1h30m" }},
		{"everything", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Interval = &metav1.Duration{Duration: 30e9}
			st.Spec.Source.SecretRef = &convergev1.LocalObjectReference{Name: "shop-git"}
			st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: "shop-hook"}
			st.Spec.TargetNamespace = "shop"
			st.Spec.Prune = true
			st.Spec.HealthChecks = []convergev1.NamespacedObjectKindReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}}
			st.Spec.HealthCheckExprs = []convergev1.CustomHealthCheck{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.ready == true"}}
			st.Spec.Timeout = &metav1.Duration{Duration: 120e9}
			st.Spec.Rollback = &convergev1.RollbackSpec{Enabled: ptr.To(false)}
			st.Spec.DependsOn = []convergev1.DependencyReference{{Name: "platform"}}
			st.Spec.ServiceAccountName = "shop-deployer"
			st.Spec.Suspend = true
			st.Spec.Wait = ptr.To(false)
			st.Spec.SyncWindows = []convergev1.SyncWindow{{Kind: convergev1.DenyWindow, Schedule: "0 22 * * *", Duration: metav1.Duration{Duration: 8 * 3600e9}, TimeZone: "Europe/Berlin"}}
			st.Spec.HistoryLimit = ptr.To(int32(20))
		}},
		{"chart from an OCI registry", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.Path = convergev1.GitSource{}, ""
			st.Spec.Chart = &convergev1.ChartSource{Repository: "oci://registry.example/charts", Name: "podinfo",
				Version: ">=6.5 <7", SecretRef: &convergev1.LocalObjectReference{Name: "registry"},
				Interval: &metav1.Duration{Duration: 600e9}}
			st.Spec.Helm = &convergev1.HelmSpec{ReleaseName: "podinfo",
				Values:      &apiextensionsv1.JSON{Raw: []byte(`{"replicaCount":2,"ui":{"color":"#34577c"}}`)},
				ValuesFiles: []string{"values-prod.yaml"},
				ValuesFrom:  []convergev1.ValuesReference{{Kind: "Secret", Name: "db", ValuesKey: "values.yaml", TargetPath: "db.password"}},
				CRDs:        convergev1.CRDsCreate}
		}},
		{"oci artifact by tag, with a path", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.OCI = convergev1.GitSource{}, ociSource()
		}},
		{"oci artifact pinned by digest, verified, on a registry with a port", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.Path = convergev1.GitSource{}, ""
			st.Spec.OCI = &convergev1.OCISource{
				URL:              "oci://registry.example:5000/team-a/manifests/shop",
				Ref:              convergev1.OCIRef{Digest: "sha256:" + strings.Repeat("0f", 32)},
				LayerMediaType:   "application/vnd.cncf.flux.content.v1.tar+gzip",
				SecretRef:        &convergev1.LocalObjectReference{Name: "registry"},
				Interval:         &metav1.Duration{Duration: 600e9},
				WebhookSecretRef: &convergev1.LocalObjectReference{Name: "registry-hook"},
				Verify:           &convergev1.OCIVerify{SecretRef: convergev1.LocalObjectReference{Name: "cosign-keys"}},
			}
		}},
		{"oci semver range on a schedule, a chart directory inside", func(st *convergev1.SyncTarget) {
			st.Spec.Source, st.Spec.Path = convergev1.GitSource{}, "charts/shop"
			st.Spec.OCI = &convergev1.OCISource{URL: "oci://ghcr.io/acme/shop-config", Ref: convergev1.OCIRef{SemVer: ">=1.0.0 <2.0.0"},
				Schedule: "*/10 * * * *"}
			st.Spec.Helm = &convergev1.HelmSpec{ReleaseName: "shop", ValuesFiles: []string{"values-prod.yaml"}}
		}},
		{"chart in Git on a remote cluster", func(st *convergev1.SyncTarget) {
			st.Spec.Path = "charts/shop"
			st.Spec.Helm = &convergev1.HelmSpec{DisableHooks: true}
			st.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "prod-kubeconfig"}}
		}},
		{"signed tags, sops and substitution", func(st *convergev1.SyncTarget) {
			st.Spec.Source.Ref = convergev1.GitRef{SemVer: ">=1.0.0"}
			st.Spec.Source.Verify = &convergev1.VerifySpec{Mode: convergev1.VerifyTagAndHEAD, SecretRef: convergev1.LocalObjectReference{Name: "keys"}}
			st.Spec.Decryption = &convergev1.DecryptionSpec{Provider: "sops", SecretRef: &convergev1.LocalObjectReference{Name: "sops-age"}}
			st.Spec.PostBuild = &convergev1.PostBuildSpec{
				Substitute:     map[string]string{"cluster_name": "prod", "_region": "eu"},
				SubstituteFrom: []convergev1.SubstituteReference{{Kind: "ConfigMap", Name: "vars"}, {Kind: "Secret", Name: "secret-vars", Optional: true}},
				Strict:         ptr.To(false),
			}
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			st := valid("valid-" + string(rune('a'+i)))
			tt.mutate(st)
			want := st.Spec.DeepCopy()
			g.Expect(k8s.Create(t.Context(), st)).To(Succeed())
			t.Cleanup(func() { _ = k8s.Delete(t.Context(), st) })

			got := &convergev1.SyncTarget{}
			g.Expect(k8s.Get(t.Context(), client.ObjectKeyFromObject(st), got)).To(Succeed())

			// Defaults fill only what was left out.
			if want.Timeout == nil {
				want.Timeout = &metav1.Duration{Duration: convergev1.DefaultTimeout}
			}
			if want.HistoryLimit == nil {
				want.HistoryLimit = ptr.To(int32(convergev1.DefaultHistoryLimit))
			}
			if want.Rollback == nil {
				want.Rollback = &convergev1.RollbackSpec{Enabled: ptr.To(true)}
			}
			if want.Wait == nil {
				want.Wait = ptr.To(true)
			}
			if want.Helm != nil && want.Helm.CRDs == "" {
				want.Helm.CRDs = convergev1.CRDsCreateReplace
			}
			if want.Source.Verify != nil && want.Source.Verify.Mode == "" {
				want.Source.Verify.Mode = convergev1.VerifyHEAD
			}
			if want.OCI != nil && want.OCI.Verify != nil && want.OCI.Verify.Provider == "" {
				want.OCI.Verify.Provider = convergev1.CosignProvider
			}
			if want.PostBuild != nil && want.PostBuild.Strict == nil {
				want.PostBuild.Strict = ptr.To(true)
			}
			g.Expect(got.Spec).To(Equal(*want))
			g.Expect(got.GetTimeout()).To(Equal(want.Timeout.Duration))
		})
	}
}

// ociSource is a valid spec.oci: an artifact of GitHub's registry by tag.
func ociSource() *convergev1.OCISource {
	return &convergev1.OCISource{URL: "oci://ghcr.io/acme/manifests/shop", Ref: convergev1.OCIRef{Tag: "latest"}}
}

// TestOCIVerifyNeedsItsSecret: a verify without secretRef at all (what the typed client
// cannot send) is refused, not read as "verify nothing".
func TestOCIVerifyNeedsItsSecret(t *testing.T) {
	if k8s == nil {
		t.Skip("needs a local cluster: make test")
	}
	g := NewWithT(t)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": convergev1.GroupVersion.String(), "kind": convergev1.SyncTargetKind,
		"metadata": map[string]any{"name": "oci-verify", "namespace": "default"},
		"spec": map[string]any{"oci": map[string]any{
			"url": "oci://ghcr.io/acme/manifests/shop", "ref": map[string]any{"tag": "latest"},
			"verify": map[string]any{"provider": "cosign"},
		}},
	}}
	err := k8s.Create(t.Context(), u)
	g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
	g.Expect(err.Error()).To(ContainSubstring("spec.oci.verify.secretRef: Required value"))
}

func ptrTo[T any](v T) *T { return &v }
