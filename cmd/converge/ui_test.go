package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
)

func TestUIRefusesBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"ui", "--port", "70000"}, want: "converge: --port 70000 is not a port\n"},
		{args: []string{"ui", "extra"}, want: `converge: unknown command "extra" for "converge ui"` + "\n"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			g := NewWithT(t)
			_, errOut, code := cliRun(context.Background(), "/nonexistent/kubeconfig", tc.args...)
			g.Expect(code).To(Equal(2))
			g.Expect(errOut).To(Equal(tc.want))
		})
	}
}

// TestUIListensOnAPrivateLoopbackAddress: on Linux each `converge ui` listens on a random
// address of 127/8, never 127.0.0.1, and answers for that host only.
func TestUIListensOnAPrivateLoopbackAddress(t *testing.T) {
	g := NewWithT(t)
	var hosts []string
	for range 2 {
		ln, err := listenLoopback(0)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = ln.Close() }()
		addr := ln.Addr().(*net.TCPAddr)
		g.Expect(addr.IP.IsLoopback()).To(BeTrue())
		if runtime.GOOS != "linux" {
			g.Expect(addr.IP.String()).To(Equal("127.0.0.1"))
			g.Expect(allowedHosts(addr)).To(Equal([]string{addr.String(), fmt.Sprintf("localhost:%d", addr.Port)}))
			return
		}
		g.Expect(addr.IP.String()).NotTo(HavePrefix("127.0."), "not 127.0.0.1, nor its neighbours")
		g.Expect(allowedHosts(addr)).To(Equal([]string{addr.String()}), "not localhost: that is 127.0.0.1")
		hosts = append(hosts, addr.IP.String())
	}
	g.Expect(hosts[0]).NotTo(Equal(hosts[1]), "random (one chance in 16 million to fail)")
}

// TestUIOpenPutsNoTokenInACommandLine: --open hands the opener the path of a page (0600,
// in a directory only the user may enter) that leads to the URL; the token is in the
// page, not in the path; the page is gone once removed.
func TestUIOpenPutsNoTokenInACommandLine(t *testing.T) {
	g := NewWithT(t)
	const url = "http://127.1.2.3:4567/?token=0123456789abcdef"
	var argv []string
	page := &browserPage{}
	g.Expect(page.open(url, func(path string) error { argv = append(argv, path); return nil })).To(Succeed())
	g.Expect(argv).To(HaveLen(1))
	g.Expect(argv[0]).NotTo(ContainSubstring("0123456789abcdef"))
	g.Expect(argv[0]).NotTo(ContainSubstring("127.1.2.3"))
	fi, err := os.Stat(argv[0])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode().Perm()).To(Equal(os.FileMode(0o600)))
	di, err := os.Stat(filepath.Dir(argv[0]))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(di.Mode().Perm()).To(Equal(os.FileMode(0o700)))
	body, err := os.ReadFile(argv[0])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(body)).To(ContainSubstring(`<meta http-equiv="refresh" content="0; url=` + url + `">`))

	page.remove()
	_, err = os.Stat(filepath.Dir(argv[0]))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "the page and its directory are removed")
	page.remove() // twice is harmless

	failing := &browserPage{}
	g.Expect(failing.open(url, func(path string) error { argv = append(argv, path); return errors.New("no browser") })).NotTo(Succeed())
	_, err = os.Stat(filepath.Dir(argv[1]))
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "nor kept when the browser does not start")
}

// TestUIInTheBrowser runs `converge ui --open` against an API server and opens what it
// hands the opener in Chromium: the page leads to the UI, signed in, and is removed. The
// cookie is host-only, HttpOnly and SameSite=Strict, for the UI's own address: servers on
// 127.0.0.1 and localhost do not receive it. A server on another port of the UI's own
// address does: that is the limit SECURITY.md states.
func TestUIInTheBrowser(t *testing.T) {
	a := startAPIServer(t)
	g := NewWithT(t)
	a.create(t, &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: "https://git.example.com/web.git", Ref: convergev1.GitRef{Branch: "main"}}}})
	opened := make(chan string, 1)
	defer func(old func(string) error) { browserOpener = old }(browserOpener)
	browserOpener = func(path string) error { opened <- path; return nil }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := cliStart(ctx, a.kubeconfig, "ui", "--open")
	var path string
	select {
	case path = <-opened:
	case err := <-p.done:
		t.Fatalf("converge ui ended: %v\n%s", err, p.errOut.String())
	case <-time.After(60 * time.Second):
		t.Fatal("converge ui opened nothing within 60s")
	}
	m := regexp.MustCompile(`serving on (http://(127\.[0-9.]+):([0-9]+)/)\?token=([0-9a-f]+) `).FindStringSubmatch(p.out.String())
	g.Expect(m).NotTo(BeNil(), p.out.String())
	base, host, token := m[1], m[2], m[4]
	g.Expect(path).NotTo(ContainSubstring(token), "the opener's command line")
	if runtime.GOOS == "linux" {
		g.Expect(host).NotTo(Equal("127.0.0.1"))
	}

	b := browsertest.New(t)
	g.Expect(chromedp.Do(b, chromedp.Navigate("file://"+path), chromedp.WaitVisible(chromedp.CSS(`#targets a[href="/targets/default/web"]`)))).To(Succeed())
	loc, err := chromedp.Run(b, chromedp.Location())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(loc).To(Equal(base), "signed in, the token out of the address bar")
	browsertest.Screenshot(t, b, "converge-ui-open")
	g.Eventually(func() bool { _, err := os.Stat(filepath.Dir(path)); return os.IsNotExist(err) }).Should(BeTrue(), "the page is removed once used")

	cookies, err := chromedp.Call(b, network.GetCookies, network.GetCookiesParams{URLs: []string{base}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cookies.Cookies).To(HaveLen(1))
	c := cookies.Cookies[0]
	g.Expect([]any{c.Name, c.Value, c.Domain, c.Path, c.HTTPOnly, c.SameSite}).To(Equal([]any{"converge-ui", token, host, "/", true, network.CookieSameSiteStrict}))

	// Who else receives it: servers on 127.0.0.1, localhost, and another port of the UI's address.
	sent := func(ln net.Listener, url string) string {
		got := make(chan string, 1)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case got <- r.Header.Get("Cookie"):
			default:
			}
			_, _ = io.WriteString(w, "<!doctype html><title>another server</title>")
		}), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer func() { _ = srv.Close() }()
		g.Expect(chromedp.Do(b, chromedp.Navigate(url))).To(Succeed())
		return <-got
	}
	other, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sent(other, "http://"+other.Addr().String()+"/")).NotTo(ContainSubstring("converge-ui"), "127.0.0.1")
	other, err = net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sent(other, fmt.Sprintf("http://localhost:%d/", other.Addr().(*net.TCPAddr).Port))).NotTo(ContainSubstring("converge-ui"), "localhost")
	other, err = net.Listen("tcp", host+":0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sent(other, "http://"+other.Addr().String()+"/")).To(ContainSubstring("converge-ui="+token),
		"the limit: cookies are not kept per port, so a server on the UI's own address receives it")

	// The Set-Cookie itself: no Domain, HttpOnly, SameSite=Strict.
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(base + "?token=" + token)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusSeeOther))
	g.Expect(resp.Header.Values("Set-Cookie")).To(Equal([]string{"converge-ui=" + token + "; Path=/; HttpOnly; SameSite=Strict"}))
	cancel()
	g.Expect(<-p.done).To(Succeed())
}
