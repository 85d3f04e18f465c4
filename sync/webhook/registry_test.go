package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/target"
)

// recordedPolls records the sources triggered, and knows only those in subscribed.
type recordedPolls struct {
	mu         sync.Mutex
	subscribed map[string]bool
	keys       []string
}

func (p *recordedPolls) TriggerSource(key string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.subscribed[key] {
		return sources.ErrNotSubscribed
	}
	p.keys = append(p.keys, key)
	return nil
}

func (p *recordedPolls) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.keys...)
}

// ociTarget is a SyncTarget of the artifact at url, its webhooks signed with the Secret hook.
func ociTarget(name, url string, mutate func(*convergev1.OCISource)) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: convergev1.SyncTargetSpec{OCI: &convergev1.OCISource{URL: url, Ref: convergev1.OCIRef{Tag: "latest"},
			WebhookSecretRef: &convergev1.LocalObjectReference{Name: "hook"}}}}
	if mutate != nil {
		mutate(st.Spec.OCI)
	}
	return st
}

// TestRegistryWebhookTriggersItsArtifacts: a registry's notification signed with the token
// of the SyncTargets following the repository it names triggers the poller of their
// artifact and announces the push on them; the registry may be named another way (Docker
// Hub's aliases, a default port). A wrong token, a SyncTarget without webhookSecretRef or
// suspended, a Git SyncTarget of the same name: nothing polled, nothing announced.
func TestRegistryWebhookTriggersItsArtifacts(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	g.Expect(convergev1.AddToScheme(scheme)).To(Succeed())
	app := ociTarget("app", "oci://registry.example.com:5000/team/app-config", nil)
	pinned := ociTarget("pinned", "oci://REGISTRY.example.com:5000/team/app-config", func(o *convergev1.OCISource) {
		o.Ref = convergev1.OCIRef{SemVer: ">=1"}
	})
	hub := ociTarget("hub", "oci://registry-1.docker.io/library/nginx", nil)
	unsigned := ociTarget("unsigned", "oci://registry.example.com:5000/team/app-config", func(o *convergev1.OCISource) { o.WebhookSecretRef = nil })
	suspended := ociTarget("suspended", "oci://registry.example.com:5000/team/app-config", nil)
	suspended.Spec.Suspend = true
	git := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "git"},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: "https://registry.example.com:5000/team/app-config",
			WebhookSecretRef: &convergev1.LocalObjectReference{Name: "hook"}}}}
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithIndex(&convergev1.SyncTarget{}, RepoURLIndex, NormalizedURL).
		WithIndex(&convergev1.SyncTarget{}, OCIRepoIndex, NormalizedOCIRepository).
		WithObjects(app, pinned, hub, unsigned, suspended, git,
			&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "hook"}, Data: map[string][]byte{"token": []byte("t0k")}}).
		Build()
	keyOf := func(st *convergev1.SyncTarget) string {
		src, err := target.For(st, c, nil).Artifact(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		return src.Key()
	}
	polls := &recordedPolls{subscribed: map[string]bool{keyOf(app): true, keyOf(hub): true}}
	d := &Dispatcher{Reader: c, Writer: c, Charts: polls, AnnounceEvery: time.Millisecond}
	h := sources.NewWebhookHandler(d, d, sources.WebhookOptions{Registry: d.Registries()})

	send := func(path, body, auth string) int {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code
	}
	const distribution = `{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json",
		"repository":"team/app-config","tag":"latest"},"request":{"host":"registry.example.com:5000","method":"PUT"}}]}`
	const dockerHub = `{"push_data":{"tag":"latest"},"repository":{"repo_name":"nginx","namespace":"library"}}`
	pushedAt := func(st *convergev1.SyncTarget) string {
		got := &convergev1.SyncTarget{}
		g.Expect(c.Get(ctx, client.ObjectKeyFromObject(st), got)).To(Succeed())
		return got.Annotations[convergev1.PushedAtAnnotation]
	}

	g.Expect(send(sources.OCIWebhookPath, distribution, "Bearer wrong")).To(Equal(http.StatusUnauthorized))
	g.Expect(send(sources.WebhookPath, `{"repository":{"url":"https://registry.example.com:5000/team/app-config"}}`, "Bearer t0k")).
		To(Equal(http.StatusUnauthorized), "the Git route reads no bearer token")
	g.Consistently(func() []string { return polls.got() }).WithTimeout(100 * time.Millisecond).Should(BeEmpty())
	for _, st := range []*convergev1.SyncTarget{app, pinned, unsigned, suspended, git} {
		g.Expect(pushedAt(st)).To(BeEmpty(), st.Name)
	}

	g.Expect(send(sources.OCIWebhookPath, distribution, "Bearer t0k")).To(Equal(http.StatusAccepted))
	g.Expect(polls.got()).To(Equal([]string{keyOf(app)}), "pinned's source is not polled here: announced only")
	g.Eventually(func() string { return pushedAt(app) }).ShouldNot(BeEmpty())
	g.Eventually(func() string { return pushedAt(pinned) }).ShouldNot(BeEmpty())
	for _, st := range []*convergev1.SyncTarget{unsigned, suspended, git, hub} {
		g.Expect(pushedAt(st)).To(BeEmpty(), st.Name)
	}

	g.Expect(send(sources.OCIWebhookPath+"/t0k", dockerHub, "")).To(Equal(http.StatusAccepted))
	g.Expect(polls.got()).To(Equal([]string{keyOf(app), keyOf(hub)}))
	g.Eventually(func() string { return pushedAt(hub) }).ShouldNot(BeEmpty())
}

func TestNormalizedOCIRepository(t *testing.T) {
	g := NewWithT(t)
	g.Expect(NormalizedOCIRepository(ociTarget("a", "oci://Index.Docker.io/nginx", nil))).To(Equal([]string{"docker.io/library/nginx"}))
	g.Expect(NormalizedOCIRepository(ociTarget("a", "oci://ghcr.io:443/org/app", nil))).To(Equal([]string{"ghcr.io/org/app"}))
	g.Expect(NormalizedOCIRepository(ociTarget("a", "oci://", nil))).To(BeEmpty())
	git := &convergev1.SyncTarget{Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: "https://ghcr.io/org/app"}}}
	g.Expect(NormalizedOCIRepository(git)).To(BeEmpty())
	g.Expect(NormalizedURL(ociTarget("a", "oci://ghcr.io/org/app", nil))).To(BeEmpty(), "an OCI SyncTarget has no Git repository")
}
