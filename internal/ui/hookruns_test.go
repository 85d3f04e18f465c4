package ui

import (
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestHistoryShowsTheHooksRun: each history entry lists the hooks its attempt ran, in
// order, with how each ended and why one failed.
func TestHistoryShowsTheHooksRun(t *testing.T) {
	g := NewWithT(t)
	st := fakeTarget("shop", "web", false)
	st.Status.History[0].Hooks = []convergev1.HookRun{
		{Event: "pre-upgrade", Kind: "Job", Name: "migrate", Result: convergev1.SyncFailed,
			Duration: &metav1.Duration{Duration: 3200 * time.Millisecond}, Message: "job failed: BackoffLimitExceeded <script>"},
		{Event: "sync-fail", Kind: "Job", Name: "page", Result: convergev1.SyncSucceeded, Duration: &metav1.Duration{Duration: 400 * time.Millisecond}},
	}
	s, _ := testServer(t, []convergev1.SyncTarget{st}, nil, nil)
	rec := get(t, s, "/targets/shop/web")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring(`<li class="hk-failed"><span class="badge failed">Failed</span> pre-upgrade <code>Job migrate</code> · 3.2s <span class="msg">job failed: BackoffLimitExceeded &lt;script&gt;</span></li>`))
	g.Expect(body).To(ContainSubstring(`<li class="hk-succeeded"><span class="badge succeeded">Succeeded</span> sync-fail <code>Job page</code> · 400ms</li>`))
}
