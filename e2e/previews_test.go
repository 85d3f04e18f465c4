package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/forgetest"
	"github.com/converge-gitops/converge/sources"
)

// ingress is an Ingress of host, routed to the Service web.
func ingress(name, host string) string {
	return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: %s
spec:
  rules:
  - host: %s
    http:
      paths:
      - path: /
        pathType: Prefix
        backend: {service: {name: web, port: {number: 80}}}
`, name, host)
}

// pullRequestHook sends GitHub's pull_request webhook of repoURL, signed with token, to
// the daemon's receiver, and returns the HTTP status of the answer.
func pullRequestHook(g Gomega, repoURL string, number int, action, token string) int {
	body, err := json.Marshal(map[string]any{"action": action, "number": number,
		"pull_request": map[string]any{"number": number}, "repository": map[string]any{"clone_url": repoURL}})
	g.Expect(err).NotTo(HaveOccurred())
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, suite.webhookURL+sources.WebhookPath, bytes.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "pull_request")
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Scenario 64: a SyncTargetSet of previews over a forge on loopback. A maintainer's pull
// request is deployed from its refs/pull/N/head into a namespace the set creates, both as
// the service account the set names; its one comment says Ready with the preview's URL
// and its diff against the base branch's SyncTarget, and its head's commit status says
// success. A fork's waits for its label and its comment says so. The set lists the forge
// only when created and when a signed pull-request webhook comes (its interval is an
// hour): a push to the pull request and its webhook redeploy the preview and edit the
// comment; a broken push is rolled back in the preview, and the comment and the commit
// status say so; closing the pull request deletes the SyncTarget, its objects and its
// namespace.
func TestPreviewsOfPullRequests(t *testing.T) {
	run(t, 64, "preview environments of pull requests", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("app")
		mainRev := r.commit(map[string]string{"deploy/cm.yaml": configMap("web", "main")})
		repoPath := strings.TrimSuffix(r.Name, ".git")
		gh := forgetest.NewGitHub(t, repoPath, "forge-token")
		gh.Writer("maintainer")

		head := r.Commit(t, "feature", map[string]string{"deploy/cm.yaml": configMap("web", "pr1-a"),
			"deploy/ingress.yaml": ingress("web", "pr-1.preview.test")})
		r.SetRef(t, "refs/pull/1/head", head)
		gh.Open(1, "feature", head, "maintainer", false)
		gh.Open(2, "typo", head, "visitor", true)

		s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "forge", Namespace: s.ns},
			StringData: map[string]string{"token": "forge-token"}})
		s.create(&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "previewer", Namespace: s.ns}})
		// The previews' service account may create and delete namespaces and deploy the
		// app's kinds: the set makes each preview's namespace as that account.
		s.create(&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: s.ns + "-previewer"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "create", "delete"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}},
				{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"*"}},
				{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"ingresses"}, Verbs: []string{"*"}},
			}})
		s.create(&rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: s.ns + "-previewer"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: s.ns + "-previewer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "previewer", Namespace: s.ns}}})
		prNS := s.app + "-pr-1"
		// The base branch's SyncTarget: each pull request's comment shows the diff against
		// what it applied.
		base := s.syncTarget("app-main", r, nil)
		s.waitHealthy(base, mainRev, 60*time.Second)

		set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: "previews", Namespace: s.ns},
			Spec: convergev1.SyncTargetSetSpec{
				Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
					Provider: convergev1.GitHubForge, Address: gh.URL, Repository: repoPath,
					TokenSecretRef:   &convergev1.LocalObjectReference{Name: "forge"},
					WebhookSecretRef: &convergev1.LocalObjectReference{Name: webhookSecret},
					Interval:         &metav1.Duration{Duration: time.Hour}, ServiceAccountName: "previewer",
					CreateNamespace: true, DiffAgainst: "app-main",
				}}},
				Template: convergev1.SyncTargetTemplate{
					Metadata: convergev1.SyncTargetTemplateMeta{Name: "app-pr-{{ .number }}"},
					Spec: fleetSpec(g, r, map[string]any{
						"source": map[string]any{"url": r.httpURL(), "ref": map[string]any{"name": "{{ .headRef }}"},
							"secretRef": map[string]any{"name": httpSecret}, "interval": "1h",
							"webhookSecretRef": map[string]any{"name": webhookSecret}},
						"path": "deploy", "targetNamespace": s.app + "-pr-{{ .number }}", "serviceAccountName": "previewer",
					}),
				},
			}}
		s.create(set)

		preview := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "app-pr-1", Namespace: s.ns}}
		s.eventually(preview, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), "%v", st.Status.Conditions)
			g.Expect(st.Status.LastAppliedRevision).To(ContainSubstring(head))
		})
		g.Expect(configMapValue(g, prNS, "web")).To(Equal("pr1-a"))
		comment := func(n int, parts ...string) {
			t.Helper()
			g.Eventually(func(g Gomega) {
				c := gh.Comments(n)
				g.Expect(c).To(HaveLen(1), "one comment, edited in place")
				for _, p := range parts {
					g.Expect(c[0].Body).To(ContainSubstring(p))
				}
			}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		}
		comment(1, "- `app-pr-1`: ✅ **Ready** at `"+head[:7]+"`: 2 created", "  - http://pr-1.preview.test",
			"### Diff of `"+head[:7]+"` against `main@sha1:"+strings.TrimPrefix(mainRev, "main@sha1:")[:7]+"`",
			"**1 to create, 1 to change, 0 to prune, 0 unchanged**", "-  value: main\n+  value: pr1-a",
			"+  - host: pr-1.preview.test")
		statusOf := func(g Gomega, sha string) forgetest.Status {
			st := gh.Statuses(sha)
			g.Expect(st).NotTo(BeEmpty())
			return st[len(st)-1]
		}
		statusName := "converge/preview/" + s.ns + "/previews"
		g.Eventually(func(g Gomega) {
			g.Expect(statusOf(g, head)).To(Equal(forgetest.Status{State: "success", Context: statusName,
				Description: "app-pr-1 Ready at " + head[:7], TargetURL: "http://pr-1.preview.test"}))
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		comment(2, "**Not deployed**: from a fork")
		g.Eventually(func(g Gomega) {
			got := getSet(g, set)
			g.Expect(got.Status.PullRequests).To(HaveLen(2))
			g.Expect(got.Status.PullRequests[0].SyncTargets).To(Equal([]string{"app-pr-1"}))
			g.Expect(got.Status.PullRequests[1].Waiting).To(ContainSubstring("from a fork"))
			g.Expect(generatedNames(g, s.ns, "previews")).To(Equal([]string{"app-pr-1"}), "the fork's pull request is not deployed")
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		// A push to the pull request, and its webhook: the preview follows, its comment too.
		next := r.Commit(t, "feature", map[string]string{"deploy/cm.yaml": configMap("web", "pr1-b")})
		r.SetRef(t, "refs/pull/1/head", next)
		gh.Open(1, "feature", next, "maintainer", false)
		pushed := time.Now()
		g.Expect(pullRequestHook(g, r.httpURL(), 1, "synchronize", webhookToken)).To(Equal(http.StatusAccepted))
		g.Eventually(func(g Gomega) {
			g.Expect(configMapValue(g, prNS, "web")).To(Equal("pr1-b"))
		}).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		s.latency("pull-request webhook → preview redeployed", time.Since(pushed))
		comment(1, "✅ **Ready** at `"+next[:7]+"`")

		// A broken push: its Deployment never becomes ready, the preview rolls back to the
		// last healthy head, and the comment says so.
		broken := r.Commit(t, "feature", map[string]string{"deploy/cm.yaml": configMap("web", "pr1-c"),
			"deploy/web.yaml": deployment("web", 1, "example.com/web:1", "no-such-node: anywhere")})
		r.SetRef(t, "refs/pull/1/head", broken)
		gh.Open(1, "feature", broken, "maintainer", false)
		g.Expect(pullRequestHook(g, r.httpURL(), 1, "synchronize", webhookToken)).To(Equal(http.StatusAccepted))
		comment(1, "↩️ **Rolled back**: `"+broken[:7]+"` failed", "the preview runs `refs/pull/1/head@sha1:"+next[:7]+"` again")
		g.Eventually(func(g Gomega) {
			g.Expect(statusOf(g, broken)).To(And(HaveField("State", "failure"), HaveField("Description", "app-pr-1 failed at "+broken[:7])))
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		g.Expect(configMapValue(g, prNS, "web")).To(Equal("pr1-b"))

		// A webhook signed with another key is refused and changes nothing.
		gh.Close(1)
		g.Expect(pullRequestHook(g, r.httpURL(), 1, "closed", "not-the-token")).To(Equal(http.StatusUnauthorized))
		g.Expect(generatedNames(g, s.ns, "previews")).To(Equal([]string{"app-pr-1"}))

		// Closed: the preview and its objects are gone.
		g.Expect(pullRequestHook(g, r.httpURL(), 1, "closed", webhookToken)).To(Equal(http.StatusAccepted))
		g.Eventually(func(g Gomega) {
			g.Expect(generatedNames(g, s.ns, "previews")).To(BeEmpty())
			gone(g, prNS, "web", &corev1.ConfigMap{})
			ns := &corev1.Namespace{}
			err := suite.k8s.Get(ctx, client.ObjectKey{Name: prNS}, ns)
			g.Expect(err == nil && ns.DeletionTimestamp == nil).To(BeFalse(), "the preview's namespace is deleted with it")
			g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(preview), &convergev1.SyncTarget{})).NotTo(Succeed())
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		g.Expect(gh.Lists()).To(BeNumerically("<=", 5), "the forge is listed when the set is made and on the signed webhooks only")
	})
}
