package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"regexp"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestDevPrintsTheUIURL runs `converge dev` — what `make run` runs — against the cluster
// KUBECONFIG names, and follows the web UI URL its banner prints: the overview lists the
// demo SyncTarget.
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
