// Package netguard says which addresses a tenant's input (a chart repository, a remote
// cluster's server) may not make the daemon connect to: its own host, its link, and the
// cloud metadata services that hand out a node's credentials. The callers check the
// address each connection dials, after name resolution.
package netguard

import (
	"fmt"
	"net/netip"
)

// metadata are the cloud metadata services (and the hosts' agents beside them) that hand
// out a node's credentials or configuration, link-local or not.
var metadata = map[netip.Addr]string{
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

// Normalize is addr as it is compared: an IPv4-mapped IPv6 address as IPv4, no zone.
func Normalize(addr netip.Addr) netip.Addr { return addr.Unmap().WithZone("") }

// NAT64 is the IPv4 address a normalized addr of the NAT64 prefix reaches.
func NAT64(addr netip.Addr) (netip.Addr, bool) {
	if !addr.Is6() || !nat64.Contains(addr) {
		return netip.Addr{}, false
	}
	b := addr.As16()
	return netip.AddrFrom4([4]byte(b[12:])), true
}

// Metadata says why a normalized addr is a cloud metadata service's (words that follow
// "it is"), or "".
func Metadata(addr netip.Addr) string {
	if cloud, ok := metadata[addr]; ok {
		return fmt.Sprintf("a cloud metadata address (%s: where the cloud hands out the node's credentials)", cloud)
	}
	return ""
}

// Local says why a normalized addr is the daemon's own host or its link (words that follow
// "it is"), or "": loopback, link-local, unspecified or multicast.
func Local(addr netip.Addr) string {
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

// Forbidden says why addr may not be dialled for a tenant's input (words that follow "it
// is"), or "" when it may: a cloud metadata service, or the daemon's own host or link —
// its NAT64 form included.
func Forbidden(addr netip.Addr) string {
	addr = Normalize(addr)
	if v4, ok := NAT64(addr); ok {
		if why := Forbidden(v4); why != "" {
			return "the NAT64 form of " + why
		}
	}
	if why := Metadata(addr); why != "" {
		return why
	}
	return Local(addr)
}
