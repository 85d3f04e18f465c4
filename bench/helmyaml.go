package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/testcharts"
)

// helmSourceYAML names the helm workload's baseline: every chart target's objects, as Helm
// renders them, committed to Git as plain YAML.
const helmSourceYAML = "YAML"

// yamlHelmTargets is the baseline of the helm workload: for target i, the manifest that
// `helm install --dry-run=client` renders of podinfo at helmVersion1 with the release
// name, namespace and values of chart target i, in its own directory of a Git repository.
// The baseline deploys the same objects as the chart targets (the same Deployments, Pods
// and Services), so that the ratio between the two is what following a chart costs.
func (b *Bench) yamlHelmTargets(n int) (*helmTargets, error) {
	archive, err := packageChart(helmVersion1)
	if err != nil {
		return nil, err
	}
	files := make(map[string]string, n)
	for i := range n {
		manifest, err := helmManifest(archive, i)
		if err != nil {
			return nil, err
		}
		files[helmYAMLDir(i)+"/podinfo.yaml"] = manifest
	}
	repo := gittest.NewRepo(b.tb, b.gitRoot, fmt.Sprintf("helm-yaml-%d", n))
	url := b.git.RepoURL(repo)
	ht := &helmTargets{source: helmSourceYAML, names: helmNames(n)}
	ht.spec = func(i int, _ string) convergev1.SyncTargetSpec {
		return convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: url, Ref: convergev1.GitRef{Branch: "main"}, Interval: &metav1.Duration{Duration: time.Hour}},
			Path:   helmYAMLDir(i), TargetNamespace: helmNamespace(i), Prune: true,
		}
	}
	revision := "main@sha1:" + repo.Commit(b.tb, "main", files)
	ht.cold = func() func(*convergev1.SyncTarget) bool {
		return func(st *convergev1.SyncTarget) bool { return readyAt(st, revision) }
	}
	return ht, nil
}

func helmYAMLDir(i int) string { return fmt.Sprintf("podinfo/%04d", i) }

// helmManifest renders the chart archive as Helm's client-only dry-run does for chart
// target i (hooks aside: podinfo's are test hooks, which a chart target leaves out too).
func helmManifest(archive []byte, i int) (string, error) {
	ch, err := chartloader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		return "", err
	}
	var values map[string]any
	if err := json.Unmarshal(helmSpec(i).Values.Raw, &values); err != nil {
		return "", err
	}
	rel, err := testcharts.InstallDryRun(context.Background(), ch, values, testcharts.HelmInstall{
		ReleaseName: helmSpec(i).ReleaseName, Namespace: helmNamespace(i)})
	if err != nil {
		return "", fmt.Errorf("helm install --dry-run=client of podinfo for target %d: %w", i, err)
	}
	return rel.Manifest, nil
}
