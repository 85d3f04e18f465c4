package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
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
		Short: "Serve the web UI on 127.0.0.1, acting with your kubeconfig's identity",
		Long: `Serve converge's web UI on 127.0.0.1, like kubectl proxy: every read and every action is an
API call with your kubeconfig's identity, so the UI shows and does exactly what you may.

The overview lists every SyncTarget (filters by namespace and state, search) with its state,
revision, last sync and message, the counts per state and the dependsOn graph; a SyncTarget's
page shows its conditions, history, objects with their live health, events and the pending
diff, and can reconcile, suspend, resume and roll back. Pages follow the cluster live.

The URL printed carries a random access token (kept in a cookie afterwards), so that other
users of this machine cannot use the UI with your credentials. -n limits it to a namespace.`,
		Example: `  converge ui --open
  converge ui --port 8090 -n team-a`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	o.cli.BindFlags(cmd.Flags(), false)
	cmd.Flags().IntVar(&o.port, "port", 0, "port on 127.0.0.1 (0: any free port)")
	cmd.Flags().BoolVar(&o.open, "open", false, "open the UI in the browser (xdg-open)")
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
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(o.port)))
	if err != nil {
		return fmt.Errorf("listening on 127.0.0.1:%d: %w", o.port, err)
	}
	defer func() { _ = ln.Close() }()
	token, err := ui.NewAccessToken()
	if err != nil {
		return err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	h, err := ui.New(ctx, ui.Options{Config: cfg, Namespace: o.cli.namespace, AccessToken: token,
		AllowedHosts: []string{fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("localhost:%d", port)}})
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/?token=%s", port, token)
	if _, err := fmt.Fprintf(out, "converge ui serving on %s (Ctrl-C stops it)\n", url); err != nil {
		return err
	}
	if o.open {
		openBrowser(url)
	}
	return serveUntilDone(ctx, ln, h)
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

// openBrowser opens url with xdg-open, ignoring any failure: the URL is printed.
func openBrowser(url string) {
	cmd := exec.Command("xdg-open", url)
	if err := cmd.Start(); err == nil {
		go func() { _ = cmd.Wait() }()
	}
}
