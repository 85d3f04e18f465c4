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
			if m := regexp.MustCompile(`http://127\.0\.0\.1:\d+/\?token=[0-9a-f]+`).FindString(sc.Text()); m != "" {
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

// Scenario 20: the web UI — the real `converge ui` in a real Chromium, next to the
// daemon: the overview and a target page, a push that shows up without a reload, a
// rollback from the page, and the API server's 403 for a user who may only read.
func TestWebUI(t *testing.T) {
	run(t, 20, "web UI (converge ui in Chromium)", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := browsertest.New(t)
		r := s.repo("ui")
		rev1 := r.commit(map[string]string{"deploy/configmap.yaml": configMap("ui-settings", "one"), "deploy/secret.yaml": uiSecret("hunter2-one")})
		st := s.syncTarget("web", r, nil)
		s.waitHealthy(st, rev1, 90*time.Second)
		rev2 := r.commit(map[string]string{"deploy/configmap.yaml": configMap("ui-settings", "two"), "deploy/secret.yaml": uiSecret("hunter2-two")})
		s.waitHealthy(st, rev2, 60*time.Second)

		url := startUI(t, suite.cluster.Kubeconfig)
		base := url[:strings.Index(url, "/?")]
		row := fmt.Sprintf(`document.querySelector('a[href="/targets/%s/web"]')`, s.ns)
		g.Expect(do(ctx, 30*time.Second, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
		g.Expect(poll(ctx, row+` && document.body.dataset.live === "on"`, 30*time.Second)).To(Succeed(), "the overview lists the target and follows /events")
		g.Expect(poll(ctx, row+`.closest("tr").textContent.includes("`+short(rev2)+`")`, 10*time.Second)).To(Succeed())
		browsertest.Screenshot(t, ctx, "overview")

		// A push shows up in the open page, without a reload.
		g.Expect(do(ctx, 30*time.Second, chromedp.Evaluate[chromedp.Void](`window.notReloaded = true`))).To(Succeed())
		pushed := time.Now()
		rev3 := r.commit(map[string]string{"deploy/configmap.yaml": configMap("ui-settings", "three"), "deploy/secret.yaml": uiSecret("hunter2-three")})
		g.Expect(poll(ctx, row+`.closest("tr").textContent.includes("`+short(rev3)+`") && window.notReloaded`, 60*time.Second)).To(Succeed())
		s.latency("push→overview row", time.Since(pushed))
		browsertest.Screenshot(t, ctx, "overview-after-push")

		// The target page: history, the tree with live health, the pending diff.
		g.Expect(do(ctx, 30*time.Second, chromedp.Navigate(fmt.Sprintf("%s/targets/%s/web", base, s.ns)), chromedp.WaitVisible(chromedp.CSS(".timeline")))).To(Succeed())
		g.Expect(poll(ctx, `document.querySelector(".timeline").textContent.includes("`+short(rev3)+`")`, 30*time.Second)).To(Succeed())
		g.Expect(poll(ctx, `document.querySelector(".tree") && document.querySelector(".tree").textContent.includes("ui-settings")`, 10*time.Second)).To(Succeed())
		tree, err := text(ctx, ".tree")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(tree).To(MatchRegexp(`Current\s+ui-settings`))
		g.Expect(tree).To(MatchRegexp(`Current\s+ui-secret`))
		g.Expect(poll(ctx, `!document.querySelector("#diff").hasAttribute("aria-busy") && document.querySelector("#diff").textContent.length > 0`, 60*time.Second)).To(Succeed())
		diffText, err := text(ctx, "#diff")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(diffText).To(ContainSubstring("No changes"))
		html, err := text(ctx, "html")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(html).NotTo(ContainSubstring("hunter2"))
		browsertest.Screenshot(t, ctx, "target")

		// Roll back to rev1 from the page, as a user who may.
		commit1 := strings.TrimPrefix(rev1, "main@sha1:")
		g.Expect(do(ctx, 30*time.Second,
			chromedp.Click(chromedp.CSS(`button[data-action="rollback"][data-to="`+rev1+`"]`)),
			chromedp.WaitVisible(chromedp.CSS("#confirm")),
		)).To(Succeed())
		browsertest.Screenshot(t, ctx, "rollback-confirm")
		g.Expect(do(ctx, 30*time.Second, chromedp.Click(chromedp.CSS("#confirm-ok")))).To(Succeed())
		g.Expect(poll(ctx, `document.querySelector("#flash").textContent.includes("pinned SyncTarget `+s.ns+`/web to commit `+commit1+`")`, 15*time.Second)).To(Succeed())
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: commit1}))
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue))
			g.Expect(st.Status.LastAppliedRevision).To(HaveSuffix(commit1))
		})
		g.Eventually(func(g Gomega) { g.Expect(configMapValue(g, s.app, "ui-settings")).To(Equal("one")) }).WithTimeout(30 * time.Second).Should(Succeed())
		g.Expect(poll(ctx, `document.querySelector("#live").textContent.includes("pinned by a rollback")`, 15*time.Second)).To(Succeed(), "the page follows")
		browsertest.Screenshot(t, ctx, "target-after-rollback")

		// A user who may only read gets the API server's 403, in words.
		viewer := s.viewerKubeconfig(s.ns + "-viewer")
		vurl := startUI(t, viewer, "-n", s.ns)
		vbase := vurl[:strings.Index(vurl, "/?")]
		g.Expect(do(ctx, 30*time.Second, chromedp.Navigate(vurl), chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
		g.Expect(do(ctx, 30*time.Second, chromedp.Navigate(fmt.Sprintf("%s/targets/%s/web", vbase, s.ns)), chromedp.WaitVisible(chromedp.CSS(".timeline")))).To(Succeed())
		requested := get(g, st).Annotations[convergev1.RequestedAtAnnotation]
		g.Expect(do(ctx, 30*time.Second,
			chromedp.Click(chromedp.CSS(`button[data-action="reconcile"]`)),
			chromedp.WaitVisible(chromedp.CSS("#confirm")),
			chromedp.Click(chromedp.CSS("#confirm-ok")),
		)).To(Succeed())
		want := fmt.Sprintf("you (user %s-viewer) may not patch synctargets in namespace %s", s.ns, s.ns)
		g.Expect(poll(ctx, `document.querySelector("#flash").textContent.includes("`+want+`")`, 15*time.Second)).To(Succeed())
		browsertest.Screenshot(t, ctx, "forbidden")
		g.Expect(get(g, st).Annotations).To(HaveKeyWithValue(convergev1.RequestedAtAnnotation, requested), "nothing changed")
	})
}

func short(rev string) string {
	r, err := sources.ParseRevision(rev)
	if err != nil {
		return rev
	}
	return r.Commit[:7]
}
