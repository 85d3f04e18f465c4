package charts

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/converge-gitops/converge/internal/netguard"
	"github.com/converge-gitops/converge/sources"
)

// AddressRefusedError is a connection refused because of the address it would reach: a
// repository, or where a redirect, a chart URL of an index or a registry's token realm
// leads, at a loopback, link-local (cloud metadata), unspecified or multicast address. It
// matches sources.ErrInvalidSource: the source cannot work as written.
type AddressRefusedError struct {
	// Address is the IP address (and port) refused.
	Address string
	// Why the address is refused; its words follow "it is".
	Why string
}

func (e *AddressRefusedError) Error() string {
	return fmt.Sprintf("refusing to connect to %s: it is %s", e.Address, e.Why)
}

// Unwrap returns sources.ErrInvalidSource.
func (e *AddressRefusedError) Unwrap() error { return sources.ErrInvalidSource }

// allowHint ends the error of an address refused unless AllowLoopback.
const allowHint = "; chart repositories there are refused unless the daemon runs with --allow-loopback-clusters"

// checkAddress refuses an address the client may not connect to.
func (c *Client) checkAddress(ap netip.AddrPort) error {
	if c.AllowLoopback || (c.allowAddr != nil && c.allowAddr(ap)) {
		return nil
	}
	if why := netguard.Forbidden(ap.Addr()); why != "" {
		return &AddressRefusedError{Address: ap.String(), Why: why + allowHint}
	}
	return nil
}

// checkDial is a net.Dialer's Control: it sees the address actually dialled, once the name
// is resolved, so a name that resolves to a forbidden address (DNS rebinding included) is
// refused before anything is sent.
func (c *Client) checkDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &AddressRefusedError{Address: address, Why: "not an IP address"}
	}
	return c.checkAddress(ap)
}

// dialer dials with the address check (none with AllowLoopback).
func (c *Client) dialer() *net.Dialer {
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	if !c.AllowLoopback {
		d.Control = c.checkDial
	}
	return d
}

// checkedProxy is proxy (the environment's, by default) once the request's destination
// is checked: through a proxy the connection made is to the proxy, so the destination is
// checked here — its literal address, or the addresses its name resolves to now (a name
// that does not resolve here is left to the proxy). The proxy itself is dialled with the
// address check: one on a loopback or link-local address is refused too.
func (c *Client) checkedProxy(proxy func(*http.Request) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	if c.AllowLoopback || proxy == nil {
		return proxy
	}
	return func(req *http.Request) (*url.URL, error) {
		p, err := proxy(req)
		if err != nil || p == nil {
			return p, err
		}
		return p, c.checkDestination(req.Context(), req.URL)
	}
}

// checkDestination checks the addresses of u's host.
func (c *Client) checkDestination(ctx context.Context, u *url.URL) error {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = []netip.Addr{a}
	} else {
		addrs, _ = net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return &AddressRefusedError{Address: u.Host, Why: "not a host and port"}
	}
	for _, a := range addrs {
		if err := c.checkAddress(netip.AddrPortFrom(a, uint16(p))); err != nil {
			return err
		}
	}
	return nil
}
