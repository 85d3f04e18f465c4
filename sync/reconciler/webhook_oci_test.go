package reconciler_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
	"github.com/converge-gitops/converge/sources"
)

// TestRegistryWebhookDeploys: with an hour between polls of its registry, a SyncTarget of
// an OCI artifact deploys the digest pushed next within seconds of the registry's
// notification — Distribution's with Authorization: Bearer <token>, Harbor's with the bare
// token — when the notification carries its webhookSecretRef's token; one without a token
// or with another polls nothing.
func TestRegistryWebhookDeploys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := newFixture(t)
	g := NewWithT(t)
	g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "registry-hook", Namespace: f.ns},
		Data:       map[string][]byte{"token": []byte("s3cret")},
	})).To(Succeed())
	reg := charttest.NewOCIRegistry()
	t.Cleanup(reg.Close)
	repo := reg.Repository() + "/app-config"
	host, path, _ := strings.Cut(strings.TrimPrefix(repo, "oci://"), "/")
	first := pushArtifact(t, repo, "latest", map[string]string{"deploy/settings.yaml": configMap("settings", "blue")})
	st := f.ociTarget("oci-hooked", repo, convergev1.OCIRef{Tag: "latest"}, "deploy", func(st *convergev1.SyncTarget) {
		st.Spec.OCI.Interval = &metav1.Duration{Duration: time.Hour}
		st.Spec.OCI.WebhookSecretRef = &convergev1.LocalObjectReference{Name: "registry-hook"}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(first))
	})

	srv := httptest.NewServer(sources.NewWebhookHandler(hooks, hooks, sources.WebhookOptions{Registry: hooks.Registries()}))
	t.Cleanup(srv.Close)
	notify := func(body, auth string) int {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+sources.OCIWebhookPath, strings.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	distribution := func(digest string) string {
		return fmt.Sprintf(`{"events":[{"id":"e1","timestamp":"2026-12-07T17:00:00Z","action":"push",
			"target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"repository":%q,"tag":"latest",
			  "url":"http://%s/v2/%s/manifests/%s"},
			"request":{"id":"r1","addr":"127.0.0.1:40000","host":%q,"method":"PUT","useragent":"converge"},
			"actor":{},"source":{"addr":"registry:5000","instanceID":"i1"}}]}`, digest, path, host, path, digest, host)
	}
	harbor := func(digest string) string {
		return fmt.Sprintf(`{"type":"PUSH_ARTIFACT","occur_at":1765126800,"operator":"ci","event_data":{
			"resources":[{"digest":%q,"tag":"latest","resource_url":"%s/%s:latest"}],
			"repository":{"date_created":1765126800,"name":"app-config","namespace":"charts","repo_full_name":%q,"repo_type":"private"}}}`,
			digest, host, path, path)
	}
	digestOf := func(rev string) string { return rev[strings.Index(rev, "@")+1:] }
	// deployed waits for rev to be healthy, the push notified at pushed.
	deployed := func(rev, how string, pushed time.Time) {
		g.Eventually(func(g Gomega) {
			g.Expect(get(g, st).Status.LastHealthyRevision).To(Equal(rev))
		}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		t.Logf("push -> healthy through a %s notification: %s", how, time.Since(pushed).Round(time.Millisecond))
	}

	second := pushArtifact(t, repo, "latest", map[string]string{"deploy/settings.yaml": configMap("settings", "green")})
	g.Expect(notify(distribution(digestOf(second)), "")).To(Equal(http.StatusUnauthorized))
	g.Expect(notify(harbor(digestOf(second)), "guess")).To(Equal(http.StatusUnauthorized))
	g.Expect(notify(distribution(digestOf(second)), "Bearer guess")).To(Equal(http.StatusUnauthorized))
	g.Consistently(func(g Gomega) {
		g.Expect(get(g, st).Status.LastFetchedRevision).To(Equal(first))
	}).WithTimeout(2 * time.Second).Should(Succeed())

	pushed := time.Now()
	g.Expect(notify(distribution(digestOf(second)), "Bearer s3cret")).To(Equal(http.StatusAccepted))
	deployed(second, "Distribution", pushed)
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "settings")).To(HaveKeyWithValue("value", "green"))

	third := pushArtifact(t, repo, "latest", map[string]string{"deploy/settings.yaml": configMap("settings", "red")})
	pushed = time.Now()
	g.Expect(notify(harbor(digestOf(third)), "s3cret")).To(Equal(http.StatusAccepted))
	deployed(third, "Harbor", pushed)
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "settings")).To(HaveKeyWithValue("value", "red"))
}
