package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
	"github.com/converge-gitops/converge/sources"
)

// startUI runs `converge ui` with kubeconfig and args and returns the URL it printed
// (with its access token); the test's cleanup stops it.
func startUI(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.Command(suite.binary, append([]string{"ui", "--kubeconfig", kubeconfig}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting converge ui: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if m := regexp.MustCompile(`http://127\.\d+\.\d+\.\d+:\d+/\?token=[0-9a-f]+`).FindString(sc.Text()); m != "" {
				found <- m
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case url := <-found:
		return url
	case <-time.After(60 * time.Second):
		t.Fatal("converge ui printed no URL within 60s")
	}
	return ""
}

// viewerKubeconfig writes a kubeconfig that impersonates user, who may read the
// SyncTargets and events of ns and nothing else.
func (s *scenario) viewerKubeconfig(user string) string {
	s.t.Helper()
	s.create(&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "ui-viewer", Namespace: s.ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{convergev1.GroupVersion.Group}, Resources: []string{"synctargets"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"get", "list", "watch"}},
	}})
	s.create(&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "ui-viewer", Namespace: s.ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "ui-viewer"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}})
	cfg, err := clientcmd.LoadFromFile(suite.cluster.Kubeconfig)
	if err != nil {
		s.t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	path := filepath.Join(s.t.TempDir(), "viewer.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		s.t.Fatal(err)
	}
	return path
}

// uiSecret is a Secret whose value the UI must never show.
func uiSecret(value string) string {
	return "apiVersion: v1\nkind: Secret\nmetadata: {name: ui-secret}\nstringData: {password: " + value + "}\n"
}

// do runs actions in the page, for at most timeout.
func do(ctx context.Context, timeout time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// text is the text of the element sel selects.
func text(ctx context.Context, sel string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
}

// poll waits for a JavaScript expression to be truthy in the page.
func poll(ctx context.Context, expr string, timeout time.Duration) error {
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", expr, err)
	}
	return nil
}

// uiScenario is what the steps of scenario 24 share.
type uiScenario struct {
	*scenario
	g    Gomega
	ctx  context.Context // the browser's
	repo *repo
	st   *convergev1.SyncTarget
	revs []string // the revisions committed, oldest first
}

// Scenario 24: the web UI — the real `converge ui` in a real Chromium, next to the
// daemon: the overview and a target page, a push that shows up without a reload, a
// rollback from the page, and the API server's 403 for a user who may only read.
func TestWebUI(t *testing.T) {
	run(t, 24, "web UI (converge ui in Chromium)", parallel, func(s *scenario) {
		u := &uiScenario{scenario: s, g: NewWithT(t), ctx: browsertest.New(t), repo: s.repo("ui")}
		u.commit("one")
		u.st = s.syncTarget("web", u.repo, nil)
		s.waitHealthy(u.st, u.revs[0], 90*time.Second)
		u.commit("two")
		s.waitHealthy(u.st, u.revs[1], 60*time.Second)

		base := u.overviewFollowsAPush()
		u.targetPage(base)
		u.rollBack()
		u.forbidden()
	})
}

// commit changes the ConfigMap and the Secret the SyncTarget applies.
func (u *uiScenario) commit(value string) {
	u.revs = append(u.revs, u.repo.commit(map[string]string{
		"deploy/configmap.yaml": configMap("ui-settings", value), "deploy/secret.yaml": uiSecret("hunter2-" + value)}))
}

// overviewFollowsAPush opens the overview of an admin's converge ui, pushes, and sees
// the row change without a reload; it returns the UI's base URL.
func (u *uiScenario) overviewFollowsAPush() string {
	g, ctx := u.g, u.ctx
	url := startUI(u.t, suite.cluster.Kubeconfig)
	row := fmt.Sprintf(`document.querySelector('a[href="/targets/%s/web"]')`, u.ns)
	g.Expect(do(ctx, 30*time.Second, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
	g.Expect(poll(ctx, row+` && document.body.dataset.live === "on"`, 30*time.Second)).To(Succeed(), "the overview lists the target and follows /events")
	g.Expect(poll(ctx, row+`.closest("tr").textContent.includes("`+short(u.revs[1])+`")`, 10*time.Second)).To(Succeed())
	browsertest.Screenshot(u.t, ctx, "overview")

	g.Expect(do(ctx, 10*time.Second, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))).To(Succeed())
	pushed := time.Now()
	u.commit("three")
	g.Expect(poll(ctx, row+`.closest("tr").textContent.includes("`+short(u.revs[2])+`") && window.notReloaded`, 60*time.Second)).To(Succeed())
	u.latency("push→overview row", time.Since(pushed))
	browsertest.Screenshot(u.t, ctx, "overview-after-push")
	return url[:strings.Index(url, "/?")]
}

// targetPage checks the history, the tree with live health and the pending diff.
func (u *uiScenario) targetPage(base string) {
	g, ctx := u.g, u.ctx
	g.Expect(do(ctx, 30*time.Second, chromedp.Navigate(fmt.Sprintf("%s/targets/%s/web", base, u.ns)), chromedp.WaitVisible(chromedp.CSS(".timeline")))).To(Succeed())
	g.Expect(poll(ctx, `document.querySelector(".timeline").textContent.includes("`+short(u.revs[2])+`")`, 30*time.Second)).To(Succeed())
	g.Expect(poll(ctx, `document.querySelector(".tree") && document.querySelector(".tree").textContent.includes("ui-settings")`, 10*time.Second)).To(Succeed())
	tree, err := text(ctx, ".tree")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tree).To(MatchRegexp(`Current\s+ui-settings`))
	g.Expect(tree).To(MatchRegexp(`Current\s+ui-secret`))
	g.Expect(poll(ctx, `!document.querySelector("#diff").hasAttribute("aria-busy") && document.querySelector("#diff").textContent.length > 0`, 60*time.Second)).To(Succeed())
	diffText, err := text(ctx, "#diff")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(diffText).To(ContainSubstring("No changes"))
	page, err := text(ctx, "html")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(page).NotTo(ContainSubstring("hunter2"))
	browsertest.Screenshot(u.t, ctx, "target")
}

// rollBack rolls back to the first revision from the page, as a user who may.
func (u *uiScenario) rollBack() {
	g, ctx := u.g, u.ctx
	commit1 := strings.TrimPrefix(u.revs[0], "main@sha1:")
	g.Expect(do(ctx, 30*time.Second,
		chromedp.Click(chromedp.CSS(`button[data-action="rollback"][data-to="`+u.revs[0]+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
	)).To(Succeed())
	browsertest.Screenshot(u.t, ctx, "rollback-confirm")
	g.Expect(do(ctx, 10*time.Second, chromedp.Click(chromedp.CSS("#confirm-ok")))).To(Succeed())
	g.Expect(poll(ctx, `document.querySelector("#flash").textContent.includes("pinned SyncTarget `+u.ns+`/web to commit `+commit1+`")`, 15*time.Second)).To(Succeed())
	u.eventually(u.st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: commit1}))
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue))
		g.Expect(st.Status.LastAppliedRevision).To(HaveSuffix(commit1))
	})
	g.Eventually(func(g Gomega) { g.Expect(configMapValue(g, u.app, "ui-settings")).To(Equal("one")) }).WithTimeout(30 * time.Second).Should(Succeed())
	g.Expect(poll(ctx, `document.querySelector("#live").textContent.includes("pinned by a rollback")`, 15*time.Second)).To(Succeed(), "the page follows")
	browsertest.Screenshot(u.t, ctx, "target-after-rollback")
}

// forbidden asks for a reconcile as a user who may only read: the API server's 403, in words.
func (u *uiScenario) forbidden() {
	g, ctx := u.g, u.ctx
	viewer := u.viewerKubeconfig(u.ns + "-viewer")
	url := startUI(u.t, viewer, "-n", u.ns)
	base := url[:strings.Index(url, "/?")]
	g.Expect(do(ctx, 30*time.Second, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
	g.Expect(do(ctx, 30*time.Second, chromedp.Navigate(fmt.Sprintf("%s/targets/%s/web", base, u.ns)), chromedp.WaitVisible(chromedp.CSS(".timeline")))).To(Succeed())
	requested := get(g, u.st).Annotations[convergev1.RequestedAtAnnotation]
	g.Expect(do(ctx, 30*time.Second,
		chromedp.Click(chromedp.CSS(`button[data-action="reconcile"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)).To(Succeed())
	want := fmt.Sprintf("you (user %s-viewer) may not patch synctargets in namespace %s", u.ns, u.ns)
	g.Expect(poll(ctx, `document.querySelector("#flash").textContent.includes("`+want+`")`, 15*time.Second)).To(Succeed())
	browsertest.Screenshot(u.t, ctx, "forbidden")
	g.Expect(get(g, u.st).Annotations).To(HaveKeyWithValue(convergev1.RequestedAtAnnotation, requested), "nothing changed")
}

func short(rev string) string {
	r, err := sources.ParseRevision(rev)
	if err != nil {
		return rev
	}
	return r.Commit[:7]
}
