package hostinfo

import (
	"fmt"
	"net"
	"net/netip"
	"sort"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/addr"
)

// Read takes a Snapshot of the calling thread's network namespace: links
// (netlink), addresses with their IFA_PROTO (package addr) and the main table's
// IPv4 and IPv6 routes.
func Read() (Snapshot, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return Snapshot{}, fmt.Errorf("list links: %w", err)
	}
	addrs, err := addr.List()
	if err != nil {
		return Snapshot{}, err
	}
	byIndex := map[int][]Addr{}
	for _, a := range addrs {
		byIndex[a.LinkIndex] = append(byIndex[a.LinkIndex], Addr{
			Prefix:     a.Prefix,
			Ours:       a.Proto == Proto,
			Secondary:  a.Prefix.Addr().Is4() && a.Flags&unix.IFA_F_SECONDARY != 0,
			Tentative:  a.Flags&unix.IFA_F_TENTATIVE != 0,
			Deprecated: a.Flags&unix.IFA_F_DEPRECATED != 0,
		})
	}
	var snap Snapshot
	for _, l := range links {
		at := l.Attrs()
		snap.Links = append(snap.Links, Link{
			Index:    at.Index,
			Name:     at.Name,
			MAC:      append(net.HardwareAddr(nil), at.HardwareAddr...),
			Up:       at.Flags&net.FlagUp != 0,
			Loopback: at.Flags&net.FlagLoopback != 0,
			Addrs:    byIndex[at.Index],
		})
	}
	sort.Slice(snap.Links, func(i, j int) bool { return snap.Links[i].Index < snap.Links[j].Index })
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if err != nil {
			return Snapshot{}, fmt.Errorf("list main table routes: %w", err)
		}
		for _, r := range routes {
			if rr, ok := convertRoute(family, r); ok {
				snap.Routes = append(snap.Routes, rr)
			}
		}
	}
	return snap, nil
}

func convertRoute(family int, r netlink.Route) (Route, bool) {
	if r.Type != unix.RTN_UNICAST || r.LinkIndex == 0 || len(r.MultiPath) > 0 {
		return Route{}, false
	}
	out, ok := FromNetlinkRoute(family, r)
	// The kernel's IPv6 multicast and link-local routes are not copied anywhere.
	if !ok || out.Dst.Addr().Is6() && (out.Dst.Addr().IsMulticast() || out.Dst.Addr().IsLinkLocalUnicast()) {
		return Route{}, false
	}
	return out, true
}

// FromNetlinkRoute converts a netlink route of the given family (a nil Dst is the
// default route); false when its destination is unreadable.
func FromNetlinkRoute(family int, r netlink.Route) (Route, bool) {
	unmap := func(ip net.IP) netip.Addr {
		a, _ := netip.AddrFromSlice(ip)
		if family == netlink.FAMILY_V4 {
			return a.Unmap()
		}
		return a
	}
	out := Route{LinkIndex: r.LinkIndex, Scope: uint8(r.Scope), Metric: r.Priority}
	switch {
	case r.Dst == nil && family == netlink.FAMILY_V4:
		out.Dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	case r.Dst == nil:
		out.Dst = netip.PrefixFrom(netip.IPv6Unspecified(), 0)
	default:
		ip := unmap(r.Dst.IP)
		if !ip.IsValid() {
			return Route{}, false
		}
		ones, _ := r.Dst.Mask.Size()
		out.Dst = netip.PrefixFrom(ip, ones).Masked()
	}
	if r.Gw != nil {
		out.Gw = unmap(r.Gw)
	}
	if r.Src != nil {
		out.Src = unmap(r.Src)
	}
	return out, true
}
