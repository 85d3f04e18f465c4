package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-gitops/converge/internal/ui"
)

// uiOptions are the flags of `converge ui`.
type uiOptions struct {
	cli  cliOptions
	port int
	open bool
}

func newUICommand() *cobra.Command {
	o := &uiOptions{}
	cmd := &cobra.Command{
		Use:   "ui [--port N] [--open]",
		Short: "Serve the web UI on a loopback address, acting with your kubeconfig's identity",
		Long: `Serve converge's web UI on a loopback address, like kubectl proxy: every read and every action
is an API call with your kubeconfig's identity, so the UI shows and does exactly what you may.

The overview lists every SyncTarget (filters by namespace and state, search) with its state,
revision, last sync and message, the counts per state and the dependsOn graph; a SyncTarget's
page shows its conditions, history, objects with their live health, events and the pending
diff, and can reconcile, suspend, resume and roll back. Pages follow the cluster live.

The URL printed carries a random access token (kept in a cookie afterwards), so that other
users of this machine cannot use the UI with your credentials. On Linux the address is a
random one of 127/8 (127.0.0.1 elsewhere), so that the browser sends that cookie to no other
local server on 127.0.0.1 or localhost. --open hands the browser a file (readable by you
only, removed once used) that leads to the URL, so that the token is in no command line.
-n limits it to a namespace.`,
		Example: `  converge ui --open
  converge ui --port 8090 -n team-a`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
	cmd.Flags().IntVar(&o.port, "port", 0, "port on the loopback address (0: any free port)")
	cmd.Flags().BoolVar(&o.open, "open", false, "open the UI in the browser (xdg-open; open on macOS), through a page only you may read")
	return cmd
}

func (o *uiOptions) run(ctx context.Context, out io.Writer) error {
	if o.port < 0 || o.port > 65535 {
		return usageError(fmt.Errorf("--port %d is not a port", o.port))
	}
	cfg, err := o.cli.kube.restConfig()
	if err != nil {
		return err
	}
	ln, err := listenLoopback(o.port)
	if err != nil {
		return err
	}
	defer func() { _ = ln.Close() }()
	token, err := ui.NewAccessToken()
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	page := &browserPage{}
	defer page.remove()
	h, err := ui.New(ctx, ui.Options{Config: cfg, Namespace: o.cli.namespace, AccessToken: token,
		AllowedHosts: allowedHosts(ln.Addr()), TokenUsed: page.remove})
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://%s/?token=%s", ln.Addr(), token)
	if _, err := fmt.Fprintf(out, "converge ui serving on %s (Ctrl-C stops it)\n", url); err != nil {
		return err
	}
	if o.open {
		// A browser that does not start is no failure: the URL is printed.
		_ = page.open(url, browserOpener)
	}
	return serveUntilDone(ctx, ln, h)
}

// listenLoopback listens on port of a loopback address. On Linux, where all of 127/8 is
// loopback, it is a random one (127.x.y.z), a host name of the UI's own: browsers keep
// cookies per host name, not per port, so the UI's cookie is never sent to a server on
// 127.0.0.1 or localhost, whoever runs it. Elsewhere, or where that address cannot be
// bound, 127.0.0.1.
func listenLoopback(port int) (net.Listener, error) {
	p := strconv.Itoa(port)
	if runtime.GOOS == "linux" {
		if ln, err := net.Listen("tcp", net.JoinHostPort(randomLoopback(), p)); err == nil {
			return ln, nil
		}
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", p))
	if err != nil {
		return nil, fmt.Errorf("listening on 127.0.0.1:%d: %w", port, err)
	}
	return ln, nil
}

// randomLoopback is a random address of 127.1.0.1–127.254.255.254: none of 127.0.x.x,
// where other programs listen, and no .0 or .255.
func randomLoopback() string {
	var b [3]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail
	return fmt.Sprintf("127.%d.%d.%d", 1+int(b[0])%254, b[1], 1+int(b[2])%254)
}

// allowedHosts are the Host headers the UI on addr answers: its address, and localhost
// when that is 127.0.0.1.
func allowedHosts(addr net.Addr) []string {
	hosts := []string{addr.String()}
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.Equal(net.IPv4(127, 0, 0, 1)) {
		hosts = append(hosts, fmt.Sprintf("localhost:%d", tcp.Port))
	}
	return hosts
}

// serveUntilDone serves h on ln until ctx ends, then closes every connection (the
// event streams never end on their own).
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	_ = srv.Close()
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// browserPageTTL is how long the page that opens the browser is kept at most.
const browserPageTTL = 2 * time.Minute

// browserPage opens the UI in the browser without putting its URL, which carries the
// access token, in a command line (which every user of the machine can read, in ps):
// the opener is given the path of a page that sends the browser on to the URL, in a
// directory of its own that only this user may enter (0700), the page itself 0600. The
// page is removed once the token is used, after browserPageTTL, or when converge ui
// stops, whichever comes first.
type browserPage struct {
	mu    sync.Mutex
	dir   string
	timer *time.Timer
}

// browserOpener starts the browser on a file (xdg-open; open on macOS); tests replace it.
var browserOpener = func(path string) error {
	name := "xdg-open"
	if runtime.GOOS == "darwin" {
		name = "open"
	}
	cmd := exec.Command(name, path)
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

// open writes the page for url and has opener open it.
func (p *browserPage) open(url string, opener func(path string) error) error {
	dir, err := os.MkdirTemp("", "converge-ui-")
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.dir = dir
	p.timer = time.AfterFunc(browserPageTTL, p.remove)
	p.mu.Unlock()
	path := filepath.Join(dir, "open.html")
	u := html.EscapeString(url)
	body := `<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">` +
		`<meta http-equiv="refresh" content="0; url=` + u + `"><title>converge ui</title></head>` +
		`<body><p>Opening <a href="` + u + `">converge ui</a>…</p></body></html>` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		p.remove()
		return err
	}
	if err := opener(path); err != nil {
		p.remove()
		return err
	}
	return nil
}

// remove deletes the page and its directory, if they are still there.
func (p *browserPage) remove() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	if p.dir != "" {
		_ = os.RemoveAll(p.dir)
		p.dir = ""
	}
}
