// Package hostinfo describes the part of a host's network state the node daemon
// reasons about (interfaces, their addresses, the main routing table) as plain
// values, and reads it from the kernel. The pure functions in egressfacts and
// hostegress take a Snapshot; only Read touches the kernel.
package hostinfo

import (
	"net"
	"net/netip"
)

// Proto is the number we stamp on everything we own in the kernel: the address
// protocol (IFA_PROTO) of egress IP addresses, the protocol (FRA_PROTOCOL) of ip
// rules, and the protocol (RTPROT) of routes. It is not in /etc/iproute2/rt_protos;
// `ip addr`, `ip rule` and `ip route` show it as "proto 201".
const Proto uint8 = 201

// Addr is one interface address.
type Addr struct {
	// Prefix is the address with its prefix length, host bits kept (172.18.0.10/16).
	Prefix netip.Prefix
	// Ours is true when the address carries Proto (we added it as an egress IP).
	Ours bool
	// Secondary is IFA_F_SECONDARY (IPv4: another address of the same subnet is primary).
	Secondary bool
	// Tentative/Deprecated mirror the IPv6 IFA_F_TENTATIVE/IFA_F_DEPRECATED flags.
	Tentative, Deprecated bool
}

// Link is one network interface and its addresses, in kernel order.
type Link struct {
	Index    int
	Name     string
	MAC      net.HardwareAddr
	Up       bool
	Loopback bool
	Addrs    []Addr
}

// Route is one unicast route of the main routing table.
type Route struct {
	// Dst is the destination (0.0.0.0/0 or ::/0 for a default route).
	Dst netip.Prefix
	// Gw is the next hop (invalid when the route is on-link).
	Gw netip.Addr
	// Src is the preferred source (invalid when unset).
	Src       netip.Addr
	LinkIndex int
	// Scope is the RT_SCOPE_* value (253 link, 0 universe).
	Scope  uint8
	Metric int
}

// IsDefault reports whether the route is a default route.
func (r Route) IsDefault() bool { return r.Dst.IsValid() && r.Dst.Bits() == 0 }

// Snapshot is the host network state at one instant.
type Snapshot struct {
	// Links are sorted by Index.
	Links []Link
	// Routes are the main table's unicast routes that leave through a link
	// (multipath and blackhole routes are left out).
	Routes []Route
}

// LinkByName returns the link with that name.
func (s Snapshot) LinkByName(name string) (Link, bool) {
	for _, l := range s.Links {
		if l.Name == name {
			return l, true
		}
	}
	return Link{}, false
}

// LinkByIndex returns the link with that index.
func (s Snapshot) LinkByIndex(index int) (Link, bool) {
	for _, l := range s.Links {
		if l.Index == index {
			return l, true
		}
	}
	return Link{}, false
}

// DefaultRouteLink returns the index of the link of the main table's best default
// route of the family of want (lowest metric, then lowest link index), and false
// when there is none.
func (s Snapshot) DefaultRouteLink(want4 bool) (int, bool) {
	best, found := Route{}, false
	for _, r := range s.Routes {
		if !r.IsDefault() || r.Dst.Addr().Is4() != want4 {
			continue
		}
		if !found || r.Metric < best.Metric || (r.Metric == best.Metric && r.LinkIndex < best.LinkIndex) {
			best, found = r, true
		}
	}
	return best.LinkIndex, found
}
