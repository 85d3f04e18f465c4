package remote

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"

	"github.com/converge-gitops/converge/internal/netguard"
)

// allowHint ends the error of an address refused unless loopback is allowed.
const allowHint = "; remote clusters there are refused unless the daemon runs with --allow-loopback-clusters"

// networksHint ends the error of an address outside the networks a daemon allows.
const networksHint = "; the daemon confines remote clusters to --remote-cluster-cidrs"

// addressPolicy says where a remote cluster may be.
type addressPolicy struct {
	// allowLoopback lets a cluster be at a loopback, link-local, unspecified or multicast
	// address (tests, local development, the CLI on a user's machine).
	allowLoopback bool
	// networks, when not empty, are the only networks a cluster may be in.
	networks Networks
}

// refuse says why addr may not be a remote cluster's, or "" when it may. Its words follow
// "it is".
func (p addressPolicy) refuse(addr netip.Addr) string {
	addr = netguard.Normalize(addr)
	if why := p.refuseHost(addr); why != "" {
		return why
	}
	if v4, ok := netguard.NAT64(addr); ok {
		if why := p.refuseHost(v4); why != "" {
			return "the NAT64 form of " + why
		}
	}
	if len(p.networks) > 0 && !p.networks.contain(addr) {
		return "outside the networks remote clusters may be in (" + p.networks.String() + ")" + networksHint
	}
	return ""
}

// refuseHost says why addr, itself, may not be a remote cluster's.
func (p addressPolicy) refuseHost(addr netip.Addr) string {
	if why := netguard.Metadata(addr); why != "" {
		return why
	}
	if why := netguard.Local(addr); why != "" && !p.allowLoopback {
		return why + allowHint
	}
	return ""
}

// checkDial refuses, before connecting, an address a remote cluster may not be at: a
// net.Dialer's Control, which sees the address actually dialled, after name resolution.
func (p addressPolicy) checkDial(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return &AddressRefusedError{Address: address, Why: "not an IP address"}
	}
	if why := p.refuse(ap.Addr()); why != "" {
		return &AddressRefusedError{Address: ap.Addr().String(), Why: why}
	}
	return nil
}

// Networks are the networks remote clusters may be in (Options.Networks). As a flag
// value (pflag.Value) it takes CIDRs, comma-separated or repeated.
type Networks []netip.Prefix

// contain reports whether addr is in one of the networks.
func (n Networks) contain(addr netip.Addr) bool {
	for _, p := range n {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// String lists the networks, comma-separated.
func (n Networks) String() string {
	s := make([]string, len(n))
	for i, p := range n {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// Set adds the CIDRs of a comma-separated list.
func (n *Networks) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR (such as 10.20.0.0/16 or fd00:20::/48)", s)
		}
		*n = append(*n, p.Masked())
	}
	return nil
}

// Type names the flag's value.
func (n *Networks) Type() string { return "cidrs" }
