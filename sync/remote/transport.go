package remote

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	"github.com/converge-gitops/converge/internal/category"
)

// Timeouts of the connections to a remote cluster: one that is away fails its
// SyncTargets in bounded time instead of holding a worker.
const (
	// DialTimeout bounds a TCP connect.
	DialTimeout = 10 * time.Second
	// TLSHandshakeTimeout bounds a TLS handshake.
	TLSHandshakeTimeout = 10 * time.Second
	// ResponseHeaderTimeout bounds the wait for the answer to a request once sent (a
	// watch answers at once, and is then bounded by its context).
	ResponseHeaderTimeout = 30 * time.Second
)

// UnreachableError is a remote cluster that could not be reached: connection refused,
// timed out, no route. It is temporary (a net.Error): the SyncTarget is retried with
// backoff, and no revision is blamed for it.
type UnreachableError struct {
	// Cluster names the cluster by its kubeconfig Secret, "namespace/name".
	Cluster string
	Err     error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("remote cluster of kubeconfig secret %s is unreachable: %v", e.Cluster, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Timeout implements net.Error.
func (e *UnreachableError) Timeout() bool {
	var ne net.Error
	return errors.As(e.Err, &ne) && ne.Timeout()
}

// Temporary implements net.Error: an unreachable cluster may come back.
func (e *UnreachableError) Temporary() bool { return true }

// FailureCategory says an unreachable cluster is not a revision's fault: retried.
func (e *UnreachableError) FailureCategory() (category.Category, string) { return category.Retry, "" }

// AddressRefusedError is a connection refused by converge itself: the address is one a
// remote cluster may not be at (see the package documentation).
type AddressRefusedError struct {
	Address string
	Why     string
}

// FailureCategory says a refused address is not a revision's fault: retried (the
// kubeconfig Secret may be fixed).
func (e *AddressRefusedError) FailureCategory() (category.Category, string) {
	return category.Retry, ""
}

func (e *AddressRefusedError) Error() string {
	return fmt.Sprintf("refusing to connect to %s: it is %s", e.Address, e.Why)
}

// withTransport gives cfg a transport of its own: it dials with the address check of where
// and the timeouts above, goes through no proxy, names the cluster in connection errors,
// and takes only the answers of a Kubernetes API server (apiAnswers: no redirect, no body
// of another server quoted). The *http.Transport is returned too, to close its idle
// connections when the cluster is closed.
func withTransport(cfg *rest.Config, name string, where addressPolicy) (*rest.Config, *http.Transport, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, nil, refused("its TLS settings: %v", err)
	}
	server, err := url.Parse(cfg.Host)
	if err != nil {
		return nil, nil, refused("the server is not a URL")
	}
	dialer := &net.Dialer{Timeout: DialTimeout, KeepAlive: 30 * time.Second, Control: where.checkDial}
	t := utilnet.SetTransportDefaults(&http.Transport{
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   TLSHandshakeTimeout,
		ResponseHeaderTimeout: ResponseHeaderTimeout,
		MaxIdleConnsPerHost:   25,
		IdleConnTimeout:       90 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				var refusedAddr *AddressRefusedError
				if errors.As(err, &refusedAddr) {
					return nil, err
				}
				return nil, &UnreachableError{Cluster: name, Err: err}
			}
			return conn, nil
		},
	})
	t.Proxy = nil // straight to the cluster: the address check must see the real destination
	out := rest.CopyConfig(cfg)
	out.TLSClientConfig = rest.TLSClientConfig{}
	out.Transport = &apiAnswers{next: t, prefix: strings.TrimSuffix(server.Path, "/")}
	return out, t, nil
}
