package fleet

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// tarpit is a Git server that answers no request until the test ends: entered receives a
// value as each request arrives.
func tarpit(t *testing.T) (url string, entered <-chan struct{}) {
	t.Helper()
	release := make(chan struct{})
	in := make(chan struct{}, 64)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case in <- struct{}{}:
		default:
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		http.Error(w, "gone", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before srv.Close, which waits for the handlers
	return srv.URL + "/fleet.git", in
}

// A set whose Git source never answers, and one whose template grows every SyncTarget
// towards a GiB, do not delay a set of another namespace; the hostile template is refused
// with the bound it passed, and writes nothing.
func TestSlowSetDoesNotDelayOthers(t *testing.T) {
	slowNS := cluster(t)
	url, entered := tarpit(t)
	createSet(t, &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: slowNS, Name: "slow"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{GitDirectories: &convergev1.GitDirectoriesGenerator{Include: []string{"*"},
				Source: convergev1.GitSource{URL: url, Ref: convergev1.GitRef{Branch: "main"}}}}},
			Template: convergev1.SyncTargetTemplate{Metadata: convergev1.SyncTargetTemplateMeta{Name: "{{ .path.basename }}"},
				Spec: spec(NewWithT(t), gitSpec(url, "{{ .path }}"))},
		}})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the slow set never asked its Git server")
	}

	hostile, _ := hostileSet(t, nestedReplace(4, strings.Repeat("x", 15)))
	hostile.ObjectMeta = metav1.ObjectMeta{Namespace: slowNS, Name: "hostile"}
	createSet(t, hostile)

	otherNS := cluster(t)
	createSet(t, listSet(otherNS, "benign", false, map[string]string{"name": "a", "ring": "x", "path": "a"}))
	NewWithT(t).Eventually(func(g Gomega) {
		g.Expect(generated(g, otherNS, "benign")).To(HaveKey("a"))
	}).WithTimeout(15*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(),
		"the benign set waits for the slow one")

	eventually(t, func(g Gomega) {
		c := setReady(getSet(g, slowNS, "hostile"))
		g.Expect(c.Reason).To(Equal(convergev1.TemplateInvalidReason))
		g.Expect(c.Message).To(ContainSubstring(fmt.Sprintf("replace: the result would exceed %d bytes", MaxRenderedBytes)))
	})
	g := NewWithT(t)
	g.Expect(generated(g, slowNS, "hostile")).To(BeEmpty())
	g.Expect(setReady(getSet(g, slowNS, "slow")).Reason).To(BeEmpty(), "the slow set is still listing")
}
