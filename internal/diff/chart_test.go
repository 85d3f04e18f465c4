package diff

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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

// TestPendingChartLookup: the pending diff of a chart target renders its `lookup` calls
// against the cluster, as the daemon does: the object shown carries the value looked up.
func TestPendingChartLookup(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	seed := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "seed", Namespace: f.ns},
		Data: map[string]string{"token": "from-the-cluster"}}
	if err := f.c.Create(ctx, seed); err != nil {
		t.Fatal(err)
	}
	chart := charttest.Chart("shop", "1.0.0")
	chart["templates/configmap.yaml"] = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  seen: {{ (lookup "v1" "ConfigMap" .Release.Namespace "seed").data.token | default "nothing" | quote }}
`
	b, err := charttest.Package("shop", chart)
	if err != nil {
		t.Fatal(err)
	}
	repo := charttest.NewHTTPRepo()
	t.Cleanup(repo.Close)
	repo.Add("shop", "1.0.0", b)
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: f.ns},
		Spec: convergev1.SyncTargetSpec{TargetNamespace: f.ns,
			Chart: &convergev1.ChartSource{Repository: repo.URL(), Name: "shop", Version: "1.0.0"}}}
	res, _, err := Pending(ctx, f.c, shared.cluster.Config, st, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Objects) != 1 || res.Objects[0].Action != Create {
		t.Fatalf("objects %+v, want the ConfigMap to create", res.Objects)
	}
	if !strings.Contains(res.Objects[0].Diff, "seen: from-the-cluster") {
		t.Fatalf("the diff does not show the value looked up:\n%s", res.Objects[0].Diff)
	}
}
