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
)

// TestFetchChartOfARepository: `converge diff/build --target` fetch a chart of a chart
// repository as the daemon does: the newest version in range, or the revision named, whose
// digest must still match.
func TestFetchChartOfARepository(t *testing.T) {
	repo := charttest.NewHTTPRepo()
	t.Cleanup(repo.Close)
	for _, v := range []string{"1.0.0", "1.1.0"} {
		b, err := charttest.Package("shop", charttest.Chart("shop", v))
		if err != nil {
			t.Fatal(err)
		}
		repo.Add("shop", v, b)
	}
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "team"},
		Spec: convergev1.SyncTargetSpec{Chart: &convergev1.ChartSource{Repository: repo.URL(), Name: "shop", Version: "1.x"}}}
	r := fake.NewClientBuilder().Build()
	ctx := context.Background()
	co, err := Fetch(ctx, r, st, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = co.Close() }()
	if !strings.HasPrefix(co.Revision, "1.1.0@sha256:") {
		t.Fatalf("revision %q, want 1.1.0", co.Revision)
	}
	b, err := os.ReadFile(filepath.Join(co.Dir, "Chart.yaml"))
	if err != nil || !strings.Contains(string(b), "version: 1.1.0") {
		t.Fatalf("Chart.yaml %q: %v", b, err)
	}
	rev := strings.Replace(co.Revision, "1.1.0", "1.0.0", 1) // the digest of another version
	if _, err := Fetch(ctx, r, st, rev); err == nil || !strings.Contains(err.Error(), "not sha256:") {
		t.Fatalf("a revision whose digest does not match: %v", err)
	}
}
