package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// forgeAndChat stands in for a Gitea API (commit statuses) and a Slack incoming webhook.
type forgeAndChat struct {
	mu       sync.Mutex
	statuses []forgeStatus
	messages []string
	chatTry  int
	chatCode int
}

type forgeStatus struct {
	path, state, context, description, auth string
}

func (f *forgeAndChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	str := func(k string) string { s, _ := m[k].(string); return s }
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && strings.HasPrefix(r.URL.Path, "/api/v1/repos/"):
		f.statuses = append(f.statuses, forgeStatus{path: r.URL.Path, state: str("state"), context: str("context"),
			description: str("description"), auth: r.Header.Get("Authorization")})
		w.WriteHeader(http.StatusCreated)
	case r.Method == http.MethodPost && r.URL.Path == "/services/T0/B0/chat":
		f.chatTry++
		w.WriteHeader(f.chatCode)
		if f.chatCode == http.StatusOK {
			f.messages = append(f.messages, str("text"))
		}
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *forgeAndChat) states(sha string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []string{}
	for _, s := range f.statuses {
		if strings.HasSuffix(s.path, "/statuses/"+sha) {
			out = append(out, s.state)
		}
	}
	return out
}

func (f *forgeAndChat) chat() (tries int, messages []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.chatTry, append([]string(nil), f.messages...)
}

func (f *forgeAndChat) answerChat(code int) {
	f.mu.Lock()
	f.chatCode = code
	f.mu.Unlock()
}

// Scenario 20: a push that rolls back answers the pusher: a pending then a failure commit
// status on the Gitea commit, and one chat message; the chat answers 503 until after the
// daemon was killed and restarted, and the message still arrives exactly once.
func TestNotifications(t *testing.T) {
	run(t, 20, "notifications: commit status and chat across a restart", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		fake := &forgeAndChat{chatCode: http.StatusServiceUnavailable}
		srv := httptest.NewServer(fake)
		t.Cleanup(srv.Close)
		labels := map[string]string{shardLabel: "notify"}
		s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gitea", Namespace: s.ns},
			StringData: map[string]string{"token": "gitea-s3cret-token"}})
		s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "slack", Namespace: s.ns},
			StringData: map[string]string{"address": srv.URL + "/services/T0/B0/chat"}})
		s.create(&convergev1.Notifier{ObjectMeta: metav1.ObjectMeta{Name: "commits", Namespace: s.ns, Labels: labels},
			Spec: convergev1.NotifierSpec{Provider: convergev1.NotificationProvider{Type: convergev1.GiteaProvider,
				Address: srv.URL, SecretRef: &convergev1.LocalObjectReference{Name: "gitea"}}}})
		chat := &convergev1.Notifier{ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: s.ns, Labels: labels},
			Spec: convergev1.NotifierSpec{
				Events:   []convergev1.NotificationEvent{convergev1.EventFailed, convergev1.EventRolledBack},
				Provider: convergev1.NotificationProvider{Type: convergev1.SlackProvider, SecretRef: &convergev1.LocalObjectReference{Name: "slack"}}}}
		s.create(chat)

		r := s.repo("app")
		good := r.commit(map[string]string{"deploy/web.yaml": deployment("web", 1, "example.com/web:1", "")})
		st := s.syncTarget("web", r, func(st *convergev1.SyncTarget) {
			st.Labels = labels
			st.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
		})
		d := startDaemon(t, "notify", "--watch-label-selector", shardLabel+"=notify")
		s.explainWith(d)
		s.waitHealthy(st, good, 90*time.Second)
		goodSHA := strings.TrimPrefix(good, "main@sha1:")
		g.Eventually(func() []string { return fake.states(goodSHA) }).WithTimeout(30 * time.Second).
			Should(Equal([]string{"pending", "success"}))

		pushed := time.Now()
		bad := r.commit(map[string]string{"deploy/web.yaml": deployment("web", 1, "example.com/web:2", "no-such-node: anywhere")})
		badSHA := strings.TrimPrefix(bad, "main@sha1:")
		g.Eventually(func() []string { return fake.states(badSHA) }).WithTimeout(90 * time.Second).
			Should(Equal([]string{"pending", "failure"}))
		s.latency("push→failure commit status", time.Since(pushed))
		fake.mu.Lock()
		last := fake.statuses[len(fake.statuses)-1]
		fake.mu.Unlock()
		g.Expect(last.path).To(Equal("/api/v1/repos/e2e-20/app/statuses/" + badSHA))
		g.Expect(last.context).To(Equal("converge/" + s.ns + "/web"))
		g.Expect(last.description).To(HavePrefix("rolled back: "))
		g.Expect(last.auth).To(Equal("token gitea-s3cret-token"))

		// The commit statuses are recorded as delivered (a kill between a provider's answer
		// and that record would send the status again: the window every at-least-once
		// delivery has). The chat refuses its message; the daemon dies while it retries.
		cur := &convergev1.Notifier{}
		g.Eventually(func(g Gomega) {
			g.Expect(suite.k8s.Get(ctx, types.NamespacedName{Namespace: s.ns, Name: "commits"}, cur)).To(Succeed())
			g.Expect(cur.Status.Delivered).To(BeEquivalentTo(4))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		g.Eventually(func() int { n, _ := fake.chat(); return n }).WithTimeout(30 * time.Second).Should(BeNumerically(">=", 1))
		d.kill()
		g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(chat), cur)).To(Succeed())
		g.Expect(cur.Status.Delivered).To(BeZero())
		fake.answerChat(http.StatusOK)
		g.Expect(d.start()).To(Succeed())
		g.Eventually(func() []string { _, m := fake.chat(); return m }).WithTimeout(60 * time.Second).Should(HaveLen(1))
		_, msgs := fake.chat()
		g.Expect(msgs[0]).To(And(ContainSubstring(s.ns+"/web: rolled back"), ContainSubstring(bad)))
		g.Consistently(func() []string { _, m := fake.chat(); return m }).WithTimeout(5*time.Second).Should(HaveLen(1),
			"the message is not sent twice")
		g.Expect(fake.states(badSHA)).To(Equal([]string{"pending", "failure"}), "no status is sent twice after the restart")
		g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(chat), cur)).To(Succeed())
		g.Expect(cur.Status.Delivered).To(BeEquivalentTo(1))
		raw, _ := json.Marshal(cur.Status)
		g.Expect(string(raw)).NotTo(ContainSubstring(srv.URL), "the webhook address stays in its Secret")
	})
}
