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
