package reconciler_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/postbuild"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/reconciler"
	"github.com/converge-gitops/converge/sync/render"
)

// TestKustomizeRendererTimeout: the daemon's renderer passes its Timeout to the
// render, whose error then reads "render exceeded <timeout>" (BuildFailed).
func TestKustomizeRendererTimeout(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"), 0o644)).To(Succeed())
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"}}

	out, err := reconciler.KustomizeRenderer{}.Render(context.Background(), st, cluster.Destination{}, dir, postbuild.Variables{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Objects).To(HaveLen(1))
	g.Expect(out.Chart).To(BeFalse())

	out, err = reconciler.KustomizeRenderer{Timeout: time.Nanosecond}.Render(context.Background(), st, cluster.Destination{}, dir, postbuild.Variables{})
	g.Expect(out).To(BeNil())
	g.Expect(err).To(MatchError(render.ErrRenderTimeout))
	g.Expect(err.Error()).To(Equal("render exceeded 1ns"))
}

// TestKustomizeRendererSaysChart: a directory holding a Chart.yaml renders as a chart also
// without spec.helm, and the renderer says so — the answer a deploy's chart steps follow.
func TestKustomizeRendererSaysChart(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(dir, "templates"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: web\nversion: 0.1.0\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "templates", "cm.yaml"),
		[]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}}\n"), 0o644)).To(Succeed())
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"}}
	out, err := reconciler.KustomizeRenderer{}.Render(context.Background(), st, cluster.Destination{}, dir, postbuild.Variables{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.Chart).To(BeTrue())
	g.Expect(out.Objects).To(HaveLen(1))
	g.Expect(out.Objects[0].GetName()).To(Equal("app"))
}

// TestChartRendersAreKeptUntilCapabilitiesChange: the daemon's renderer keeps a chart's
// render, so a template drawing random values gives the same objects at every reconcile,
// and asks the capabilities only of a chart; new capabilities render it anew.
func TestChartRendersAreKeptUntilCapabilitiesChange(t *testing.T) {
	g := NewWithT(t)
	dir := t.TempDir()
	g.Expect(os.MkdirAll(filepath.Join(dir, "templates"), 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "Chart.yaml"), []byte("apiVersion: v2\nname: web\nversion: 0.1.0\n"), 0o644)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(dir, "templates", "cm.yaml"), []byte(`apiVersion: v1
kind: ConfigMap
metadata: {name: web}
data:
  password: {{ randAlphaNum 24 | quote }}
  gadgets: "{{ .Capabilities.APIVersions.Has "example.com/v1" }}"
`), 0o644)).To(Succeed())
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team", Generation: 1},
		Spec: convergev1.SyncTargetSpec{Helm: &convergev1.HelmSpec{}}}
	caps := cluster.Capabilities{KubeVersion: "v1.37.2", APIVersions: []string{"v1"}}
	asked := 0
	to := cluster.Destination{Capabilities: func() (cluster.Capabilities, error) { asked++; return caps, nil }}
	r := reconciler.KustomizeRenderer{Charts: reconciler.NewChartRenders(8)}
	data := func() map[string]any {
		out, err := r.Render(context.Background(), st, to, dir, postbuild.Variables{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(out.Objects).To(HaveLen(1))
		return out.Objects[0].Object["data"].(map[string]any)
	}
	first := data()
	g.Expect(first["gadgets"]).To(Equal("false"))
	g.Expect(data()).To(Equal(first), "the same render, random values included")
	g.Expect(asked).To(Equal(2), "the capabilities are asked at each render of a chart")

	caps.APIVersions = append(caps.APIVersions, "example.com/v1")
	changed := data()
	g.Expect(changed["gadgets"]).To(Equal("true"), "new capabilities render anew")
	g.Expect(changed["password"]).NotTo(Equal(first["password"]))
	g.Expect(data()).To(Equal(changed))

	plain := t.TempDir()
	g.Expect(os.WriteFile(filepath.Join(plain, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n"), 0o644)).To(Succeed())
	before := asked
	_, err := r.Render(context.Background(), st, to, plain, postbuild.Variables{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(asked).To(Equal(before), "plain YAML asks for no discovery")
}
