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

// TestHistoryShowsWhereAnArtifactComesFrom: an OCI artifact's history entry says what it
// was made from, as text; its revisions read as a tag and a short digest.
func TestHistoryShowsWhereAnArtifactComesFrom(t *testing.T) {
	g := NewWithT(t)
	st := fakeTarget("shop", "web", true)
	st.Spec.Source = convergev1.GitSource{}
	st.Spec.OCI = &convergev1.OCISource{URL: "oci://ghcr.io/org/shop-config", Ref: convergev1.OCIRef{Tag: "latest"}}
	digest := "sha256:" + chartDigest
	st.Status.LastAppliedRevision = "latest@" + digest
	st.Status.History[0].Revision = "latest@" + digest
	st.Status.History[0].Origin = &convergev1.ArtifactOrigin{Source: "https://github.com/org/shop.git", Revision: "main@sha1:" + sha(9) + "<b>"}
	s, _ := testServer(t, []convergev1.SyncTarget{st}, nil, nil)
	body := get(t, s, "/targets/shop/web").Body.String()
	g.Expect(body).To(ContainSubstring(`<span class="origin" title="what the artifact says it was made from">from <code>main@sha1:` + sha(9) +
		`&lt;b&gt;</code> of <code>https://github.com/org/shop.git</code></span>`))
	g.Expect(body).To(ContainSubstring(`<code>oci://ghcr.io/org/shop-config</code> · tag latest`))
	g.Expect(body).To(ContainSubstring(`latest · sha256:0123456`))
}
