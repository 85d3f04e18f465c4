package remote

import (
	"fmt"
	"net/netip"
	"strings"
	"syscall"
)

// allowHint ends the error of an address refused unless loopback is allowed.
const allowHint = "; remote clusters there are refused unless the daemon runs with --allow-loopback-clusters"

// networksHint ends the error of an address outside the networks a daemon allows.
const networksHint = "; the daemon confines remote clusters to --remote-cluster-cidrs"

// metadataAddresses are the cloud metadata services (and the hosts' agents beside them)
// that hand out a node's credentials or configuration: refused always, even where loopback
// is allowed. Those at a link-local address are refused as link-local too.
var metadataAddresses = map[netip.Addr]string{
	netip.MustParseAddr("169.254.169.254"):    "AWS, GCP, Azure, OpenStack and most clouds",
	netip.MustParseAddr("169.254.170.2"):      "AWS ECS task credentials",
	netip.MustParseAddr("100.100.100.200"):    "Alibaba Cloud",
	netip.MustParseAddr("168.63.129.16"):      "Azure wireserver",
	netip.MustParseAddr("192.0.0.192"):        "Oracle Cloud@Customer",
	netip.MustParseAddr("fd00:ec2::254"):      "AWS IPv6",
	netip.MustParseAddr("fd20:ce::254"):       "GCP IPv6",
	netip.MustParseAddr("fd00:c1::a9fe:a9fe"): "Oracle Cloud IPv6",
}

// nat64 is the well-known NAT64 prefix: an address in it reaches the IPv4 address of its
// last four bytes.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

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
	addr = addr.Unmap().WithZone("")
	if why := p.refuseHost(addr); why != "" {
		return why
	}
	if addr.Is6() && nat64.Contains(addr) {
		b := addr.As16()
		if why := p.refuseHost(netip.AddrFrom4([4]byte(b[12:]))); why != "" {
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
	if cloud, ok := metadataAddresses[addr]; ok {
		return fmt.Sprintf("a cloud metadata address (%s: where the cloud hands out the node's credentials)", cloud)
	}
	if why := forbiddenAddress(addr); why != "" && !p.allowLoopback {
		return why + allowHint
	}
	return ""
}

// forbiddenAddress says why addr may not be a remote cluster's unless loopback is allowed,
// or "" when it may.
func forbiddenAddress(addr netip.Addr) string {
	switch {
	case addr.IsLoopback():
		return "a loopback address (the daemon's own host)"
	case addr.IsLinkLocalUnicast():
		return "a link-local address (where cloud metadata services hand out the node's credentials)"
	case addr.IsUnspecified():
		return "the unspecified address (the daemon's own host)"
	case addr.IsMulticast():
		return "a multicast address"
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
