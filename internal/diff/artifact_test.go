package diff

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
	"github.com/converge-gitops/converge/sources/charts"
)

// TestFetchArtifactOfARegistry: `converge diff/build --target` fetch an OCI SyncTarget's
// artifact as the daemon does: what its tag names now, or the revision named — by its
// digest, wherever the tag moved since.
func TestFetchArtifactOfARegistry(t *testing.T) {
	reg := charttest.NewOCIRegistry()
	t.Cleanup(reg.Close)
	repo := reg.Repository() + "/app"
	push := func(value string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "cm.yaml"), []byte("value: "+value+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := charts.PackArtifact(dir, charts.ArtifactMeta{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := (&charts.Client{CacheDir: t.TempDir(), AllowLoopback: true}).PushArtifact(context.Background(),
			charts.Source{Kind: charts.KindArtifact, Repository: repo, Tag: "stable"}, a)
		if err != nil {
			t.Fatal(err)
		}
		return r.String()
	}
	old := push("old")
	current := push("new")
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"},
		Spec: convergev1.SyncTargetSpec{OCI: &convergev1.OCISource{URL: repo, Ref: convergev1.OCIRef{Tag: "stable"}}}}
	r := fake.NewClientBuilder().Build()
	for _, tc := range []struct{ revision, want, content string }{
		{"", current, "value: new\n"},
		{old, old, "value: old\n"},
	} {
		co, err := Fetch(context.Background(), r, st, tc.revision)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(co.Dir, "cm.yaml"))
		_ = co.Close()
		if co.Revision != tc.want || err != nil || string(b) != tc.content {
			t.Errorf("Fetch(%q) = %s holding %q (%v), want %s holding %q", tc.revision, co.Revision, b, err, tc.want, tc.content)
		}
	}
	bad := strings.Replace(old, "sha256:", "sha256:0", 1)[:len(old)]
	if _, err := Fetch(context.Background(), r, st, bad); err == nil {
		t.Errorf("a digest the registry does not hold was fetched")
	}
}
