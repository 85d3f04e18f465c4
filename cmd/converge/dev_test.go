package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestDevPrintsTheUIURL runs `converge dev` — what `make run` runs — against the cluster
// KUBECONFIG names, and follows the web UI URL its banner prints: the overview lists the
// demo SyncTarget. What a person reads is the banner and a line per sync: the daemon's JSON
// log is in the file the banner names.
func TestDevPrintsTheUIURL(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a local cluster")
	}
	g := NewWithT(t)
	e := newEnv(t)
	d := &daemon{}
	d.cmd = exec.Command(binary, "dev", "--dir", t.TempDir())
	d.cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	d.cmd.Stdout, d.cmd.Stderr = d, d
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	g.Expect(d.cmd.Start()).To(Succeed())
	t.Cleanup(func() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = d.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = d.cmd.Process.Kill()
			<-done
		}
	})

	banner := regexp.MustCompile(`web UI: +(http://127\.[0-9]+\.[0-9]+\.[0-9]+:[0-9]+/\?token=[A-Za-z0-9_-]+) `)
	var url string
	g.Eventually(func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		m := banner.FindStringSubmatch(d.out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	}, 2*time.Minute, 200*time.Millisecond).Should(BeTrue(), "the banner names the UI's URL")

	// The demo's Deployment never becomes ready here (no controllers): a SyncTarget of a
	// ConfigMap ends its sync at once.
	e.repo.Commit(t, "main", map[string]string{"settings/cm.yaml": cm("settings", "1")})
	e.target(t, "settings", nil)
	logs := regexp.MustCompile(`logs: +(\S+converge\.log) `)
	sync := regexp.MustCompile(`(?m)^[0-9]{2}:[0-9]{2}:[0-9]{2}  default/settings  main@sha1:[0-9a-f]{7}  Succeeded in [0-9.]+m?s \(1 created\)$`)
	var logPath string
	g.Eventually(func(g Gomega) {
		d.mu.Lock()
		out := d.out.String()
		d.mu.Unlock()
		m := logs.FindStringSubmatch(out)
		g.Expect(m).NotTo(BeNil(), "the banner names the log file")
		logPath = m[1]
		g.Expect(out).To(MatchRegexp(sync.String()), "a line per sync")
	}, 2*time.Minute, 200*time.Millisecond).Should(Succeed())
	d.mu.Lock()
	g.Expect(d.out.String()).NotTo(ContainSubstring(`{"level"`), "no JSON log line on the terminal")
	d.mu.Unlock()
	logged, err := os.ReadFile(logPath)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(logged)).To(ContainSubstring(`"msg":"Starting Controller"`), "the daemon's log is in the file")

	jar, err := cookiejar.New(nil)
	g.Expect(err).NotTo(HaveOccurred())
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	g.Eventually(func(g Gomega) {
		resp, err := browser.Get(url)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		body, err := io.ReadAll(resp.Body)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		g.Expect(string(body)).To(ContainSubstring(`href="/targets/default/demo"`))
	}, time.Minute, 500*time.Millisecond).Should(Succeed())
}

// TestServeLogFormat: --log-format json writes a JSON object per record, text a line for
// a person; anything else is refused.
func TestServeLogFormat(t *testing.T) {
	g := NewWithT(t)
	for format, want := range map[string]string{"json": `^\{"level":"info","ts":.*"msg":"synced","target":"shop/web"\}\n$`,
		"text": `^\S+\tINFO\tsynced\t\{"target": "shop/web"\}\n$`} {
		var b strings.Builder
		logger, err := newLogger(format, &b)
		g.Expect(err).NotTo(HaveOccurred())
		logger.Info("synced", "target", "shop/web")
		g.Expect(b.String()).To(MatchRegexp(want), format)
	}
	_, err := newLogger("yaml", io.Discard)
	g.Expect(err).To(MatchError(ContainSubstring("--log-format must be json or text")))
}

// TestSyncLine: a sync attempt in one line — what it did when it succeeded, why when not.
func TestSyncLine(t *testing.T) {
	g := NewWithT(t)
	end := metav1.NewTime(time.Date(2026, 12, 7, 10, 4, 5, 0, time.Local))
	key := client.ObjectKey{Namespace: "default", Name: "demo"}
	rev := "main@sha1:1a2b3c4d5e6f70819a2b3c4d5e6f70819a2b3c4d"
	ok := convergev1.HistoryEntry{Revision: rev, FinishedAt: &end, Duration: &metav1.Duration{Duration: 1234 * time.Millisecond},
		Result: convergev1.SyncSucceeded, Created: 2, Configured: 1}
	g.Expect(syncLine(key, ok)).To(Equal("10:04:05  default/demo  main@sha1:1a2b3c4  Succeeded in 1.2s (2 created, 1 configured)"))
	ok.Created, ok.Configured = 0, 0
	g.Expect(syncLine(key, ok)).To(HaveSuffix("(no change)"))
	bad := ok
	bad.Result, bad.Message = convergev1.SyncRolledBack, "revision "+rev+" failed: health check failed\nsecond line"
	g.Expect(syncLine(key, bad)).To(Equal("10:04:05  default/demo  main@sha1:1a2b3c4  RolledBack in 1.2s: revision main@sha1:1a2b3c4 failed: health check failed second line"))
}
