package reconciler_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

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

	objs, err := reconciler.KustomizeRenderer{}.Render(context.Background(), st, nil, dir, postbuild.Variables{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(objs).To(HaveLen(1))

	objs, err = reconciler.KustomizeRenderer{Timeout: time.Nanosecond}.Render(context.Background(), st, nil, dir, postbuild.Variables{})
	g.Expect(objs).To(BeNil())
	g.Expect(err).To(MatchError(render.ErrRenderTimeout))
	g.Expect(err.Error()).To(Equal("render exceeded 1ns"))
}
