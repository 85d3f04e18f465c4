package main

import (
	"context"
	"fmt"
	"net"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/internal/ui"
)

// serveUIOptions is --ui-bind-address of `converge serve`.
type serveUIOptions struct {
	addr string
}

func (o *serveUIOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.addr, "ui-bind-address", "", "address of the web UI for many users (empty disables it): each request needs a bearer token, "+
		"checked with a TokenReview, and every read and action is authorized for its user with a SubjectAccessReview; serve it behind TLS")
}

// addTo runs the UI with the manager, on every replica, when an address is set.
func (o *serveUIOptions) addTo(mgr ctrl.Manager, cfg *rest.Config) error {
	if o.addr == "" {
		return nil
	}
	c, err := client.New(cfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return err
	}
	return mgr.Add(uiServer{addr: o.addr, cfg: cfg, client: c})
}

// uiServer is the in-cluster web UI as a manager runnable.
type uiServer struct {
	addr   string
	cfg    *rest.Config
	client client.Client
}

func (u uiServer) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", u.addr)
	if err != nil {
		return fmt.Errorf("web UI: %w", err)
	}
	defer func() { _ = ln.Close() }()
	h, err := ui.New(ctx, ui.Options{Config: u.cfg, InCluster: &ui.InCluster{Client: u.client}})
	if err != nil {
		return fmt.Errorf("web UI: %w", err)
	}
	ctrl.Log.WithName("ui").Info("serving the web UI", "address", ln.Addr().String())
	return serveUntilDone(ctx, ln, h)
}

// NeedLeaderElection is false: every replica serves the UI.
func (uiServer) NeedLeaderElection() bool { return false }
