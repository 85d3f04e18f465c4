package reconciler_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/kube"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// adoptChart is a chart with a Deployment, as a team would have installed it with helm.
func adoptChart() map[string]string {
	return map[string]string{
		"deploy/Chart.yaml":                "apiVersion: v2\nname: shop\nversion: 1.0.0\n",
		"deploy/values.yaml":               "replicas: 2\n",
		"deploy/templates/deployment.yaml": strings.Replace(deployment("web", 2, ""), "replicas: 2", "replicas: {{ .Values.replicas }}", 1),
		"deploy/templates/config.yaml":     configMap("settings", "v1"),
	}
}

// helmInstall installs the chart in files with the Helm SDK, as `helm install` does.
func helmInstall(t *testing.T, files map[string]string, release, namespace string) {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, strings.TrimPrefix(name, "deploy/"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := loader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig, flags.Namespace = &kubeconfig, &namespace
	cfg := action.NewConfiguration()
	if err := cfg.Init(flags, namespace, "secret"); err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = release, namespace
	install.WaitStrategy = kube.HookOnlyStrategy
	install.Timeout = time.Minute
	if _, err := install.RunWithContext(context.Background(), ch, nil); err != nil {
		t.Fatal(err)
	}
}

// TestChartAdoptsAHelmRelease: a SyncTarget pointed at the chart of a release `helm
// install` made takes its objects over in place — same UIDs, the Deployment not rolled out
// again, its Pods untouched — and leaves the release's Secrets alone until asked to
// remove them.
func TestChartAdoptsAHelmRelease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	g := NewWithT(t)
	files := adoptChart()
	helmInstall(t, files, "shop", f.app)
	dep := &appsv1.Deployment{}
	key := types.NamespacedName{Namespace: f.app, Name: "web"}
	g.Expect(k8s.Get(context.Background(), key, dep)).To(Succeed())
	pods := func(g Gomega) map[types.UID]bool {
		list := &corev1.PodList{}
		g.Expect(k8s.List(context.Background(), list, client.InNamespace(f.app), client.MatchingLabels{"app": "web"})).To(Succeed())
		out := map[types.UID]bool{}
		for _, p := range list.Items {
			out[p.UID] = true
		}
		return out
	}
	var before map[types.UID]bool
	g.Eventually(func(g Gomega) { before = pods(g); g.Expect(before).To(HaveLen(2)) }).WithTimeout(60 * time.Second).Should(Succeed())

	rev := f.commit(files)
	st := f.syncTarget("adopt", func(st *convergev1.SyncTarget) {
		st.Spec.Helm = &convergev1.HelmSpec{ReleaseName: "shop"}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})
	after := &appsv1.Deployment{}
	g.Expect(k8s.Get(context.Background(), key, after)).To(Succeed())
	g.Expect(after.UID).To(Equal(dep.UID), "taken over in place, not recreated")
	g.Expect(after.Generation).To(Equal(dep.Generation), "no rollout: the template is unchanged")
	g.Expect(after.Labels).To(HaveKeyWithValue(convergev1.NameLabel, "adopt"))
	g.Consistently(func(g Gomega) { g.Expect(pods(g)).To(Equal(before)) }).WithTimeout(2 * time.Second).Should(Succeed())
	releaseSecrets := func(g Gomega) []corev1.Secret {
		list := &corev1.SecretList{}
		g.Expect(k8s.List(context.Background(), list, client.InNamespace(f.app), client.MatchingLabels{"owner": "helm", "name": "shop"})).To(Succeed())
		return list.Items
	}
	g.Expect(releaseSecrets(g)).To(HaveLen(1), "the release's Secret is left alone by default")

	latest := get(g, st)
	latest.Spec.Helm.RemoveReleaseSecrets = true
	g.Expect(k8s.Update(context.Background(), latest)).To(Succeed())
	g.Eventually(func(g Gomega) { g.Expect(releaseSecrets(g)).To(BeEmpty()) }).WithTimeout(60 * time.Second).Should(Succeed())
	g.Expect(k8s.Get(context.Background(), key, after)).To(Succeed())
	g.Expect(after.UID).To(Equal(dep.UID))
}
