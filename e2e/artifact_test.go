package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
)

// TestArtifactsFromARegistry: configuration pushed with `converge push artifact` to an
// OCI registry (in process, on loopback) is deployed by a SyncTarget that follows its
// tag; a second push is a new digest, deployed; `converge list artifacts` shows where it
// came from; `converge history` names both digests and `converge rollback --to` pins
// the first one again by its digest.
func TestArtifactsFromARegistry(t *testing.T) {
	run(t, 65, "configuration as OCI artifacts", parallel, func(s *scenario) {
		g := NewWithT(t)
		reg := charttest.NewOCIRegistry()
		t.Cleanup(reg.Close)
		repo := reg.Repository() + "/shop-config"
		dir := t.TempDir()
		digest := regexp.MustCompile(`sha256:[0-9a-f]{64}`)
		push := func(value, commit string) string {
			g.Expect(os.MkdirAll(filepath.Join(dir, "deploy"), 0o755)).To(Succeed())
			g.Expect(os.WriteFile(filepath.Join(dir, "deploy", "settings.yaml"), []byte(
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  colour: "+value+"\n"), 0o644)).To(Succeed())
			out := s.command(60*time.Second, "push", "artifact", repo+":latest", "--path", dir,
				"--source", "https://git.example.com/shop.git", "--revision", "main@sha1:"+strings.Repeat(commit, 40))
			g.Expect(out.code).To(Equal(0), out.String())
			d := digest.FindString(out.stdout)
			g.Expect(d).NotTo(BeEmpty(), out.String())
			return d
		}
		first := push("blue", "a")
		st := &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: "shop-artifact", Namespace: s.ns},
			Spec: convergev1.SyncTargetSpec{
				OCI: &convergev1.OCISource{URL: repo, Ref: convergev1.OCIRef{Tag: "latest"},
					Interval: &metav1.Duration{Duration: 2 * time.Second}},
				Path: "deploy", TargetNamespace: s.app, Prune: true, Timeout: &metav1.Duration{Duration: 30 * time.Second},
			},
		}
		s.create(st)
		t.Cleanup(func() { _ = suite.k8s.Delete(t.Context(), st) })
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(Equal("latest@"+first), ready(st).Message)
		})
		cm := &corev1.ConfigMap{}
		object(g, s.app, "settings", cm)
		g.Expect(cm.Data).To(HaveKeyWithValue("colour", "blue"))

		pushed := time.Now()
		second := push("green", "b")
		g.Expect(second).NotTo(Equal(first))
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(Equal("latest@"+second), ready(st).Message)
		})
		s.latency("artifact push → new digest healthy", time.Since(pushed))
		object(g, s.app, "settings", cm)
		g.Expect(cm.Data).To(HaveKeyWithValue("colour", "green"))

		list := s.command(30*time.Second, "list", "artifacts", repo, "-o", "json")
		g.Expect(list.code).To(Equal(0), list.String())
		g.Expect(list.stdout).To(And(ContainSubstring(`"latest"`), ContainSubstring(second),
			ContainSubstring("https://git.example.com/shop.git"), ContainSubstring("main@sha1:"+strings.Repeat("b", 40))))

		hist := s.cli(30*time.Second, "history", "shop-artifact", "-n", s.ns)
		g.Expect(hist.code).To(Equal(0), hist.String())
		g.Expect(hist.stdout).To(And(ContainSubstring(first[:len("sha256:")+7]), ContainSubstring(second[:len("sha256:")+7])))

		back := s.cli(120*time.Second, "rollback", "shop-artifact", "-n", s.ns, "--to", "latest@"+first[:len("sha256:")+7])
		g.Expect(back.code).To(Equal(0), back.String())
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Spec.OCI.Ref).To(Equal(convergev1.OCIRef{Digest: first}), "pinned by its digest")
			g.Expect(st.Status.LastHealthyRevision).To(HaveSuffix("@"+first), ready(st).Message)
		})
		object(g, s.app, "settings", cm)
		g.Expect(cm.Data).To(HaveKeyWithValue("colour", "blue"))
	})
}
