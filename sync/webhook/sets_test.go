package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// recordedSets follows github.com/o/app with one set, and records the sets woken.
type recordedSets struct {
	mu    sync.Mutex
	woken []client.ObjectKey
}

func (s *recordedSets) HooksForRepo(repo string) []SetHook {
	if repo != "github.com/o/app" {
		return nil
	}
	return []SetHook{{Set: client.ObjectKey{Namespace: "shop", Name: "previews"}, Secret: client.ObjectKey{Namespace: "shop", Name: "hook"}}}
}

func (s *recordedSets) WakeSet(set client.ObjectKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.woken = append(s.woken, set)
}

func (s *recordedSets) got() []client.ObjectKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]client.ObjectKey(nil), s.woken...)
}

// A pull-request webhook signed with a set's Secret wakes the set; one signed with
// another key, or naming another repository, wakes nothing and is refused as any.
func TestPullRequestWebhookWakesItsSets(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(convergev1.AddToScheme(scheme)).To(Succeed())
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&convergev1.SyncTarget{}, RepoURLIndex, NormalizedURL).
		WithObjects(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hook"}, Data: map[string][]byte{"token": []byte("t0k")}}).
		Build()
	sets := &recordedSets{}
	d := &Dispatcher{Reader: c, Sets: sets}
	h := sources.NewWebhookHandler(d, d, sources.WebhookOptions{})

	send := func(repoURL, key string) int {
		body := []byte(`{"action":"opened","number":7,"pull_request":{"number":7},"repository":{"clone_url":"` + repoURL + `"}}`)
		mac := hmac.New(sha256.New, []byte(key))
		mac.Write(body)
		req := httptest.NewRequest(http.MethodPost, sources.WebhookPath, bytes.NewReader(body))
		req.Header.Set("X-GitHub-Event", "pull_request")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	g.Expect(send("https://github.com/o/app.git", "wrong")).To(Equal(http.StatusUnauthorized))
	g.Expect(send("https://github.com/o/other.git", "t0k")).To(Equal(http.StatusUnauthorized))
	g.Expect(sets.got()).To(BeEmpty())
	g.Expect(send("https://github.com/o/app.git", "t0k")).To(Equal(http.StatusAccepted))
	g.Expect(sets.got()).To(Equal([]client.ObjectKey{{Namespace: "shop", Name: "previews"}}))
}
