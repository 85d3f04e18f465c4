package sync_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// TestPushWebhookDeploys: with an hour between polls, a signed push webhook makes the
// new commit deploy within seconds; a webhook signed with another secret does nothing.
func TestPushWebhookDeploys(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: f.ns},
		Data:       map[string][]byte{"token": []byte("s3cret")},
	})).To(Succeed())
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("hooked", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: "hook"}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})

	srv := httptest.NewServer(sources.NewWebhookHandler(hooks, hooks, sources.WebhookOptions{}))
	t.Cleanup(srv.Close)
	push := func(secret string) int {
		body := []byte(fmt.Sprintf(`{"repository": {"url": %q}}`, f.url))
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		req, err := http.NewRequest(http.MethodPost, srv.URL+sources.WebhookPath, bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	next := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	g.Expect(push("wrong")).To(Equal(http.StatusUnauthorized))
	g.Consistently(func(g Gomega) {
		g.Expect(get(g, st).Status.LastFetchedRevision).To(Equal(rev))
	}).WithTimeout(2 * time.Second).Should(Succeed())

	pushed := time.Now()
	g.Expect(push("s3cret")).To(Equal(http.StatusAccepted))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next))
	})
	t.Logf("push -> healthy through the webhook: %s", time.Since(pushed).Round(time.Millisecond))
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("2"))
}
