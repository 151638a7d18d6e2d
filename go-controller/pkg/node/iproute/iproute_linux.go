// Package iproute keeps the ip rules and routes that carry our protocol mark
// (hostinfo.Proto) equal to a desired list: rules and routes with the mark that
// are not wanted are deleted, missing ones added; anything without the mark is
// never touched. Every call acts on the calling thread's network namespace.
package iproute

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

// Stats counts changes made by Sync.
type Stats struct {
	RulesAdded, RulesDeleted, RoutesAdded, RoutesDeleted int
}

// Sync converges the marked ip rules and routes of both families. Routes are
// added in the given order (on-link routes first), after stale ones are gone.
func Sync(rules []hostegress.Rule, routes []hostegress.Route) (Stats, error) {
	var st Stats
	var errs []error
	if err := syncRules(rules, &st); err != nil {
		errs = append(errs, err)
	}
	if err := syncRoutes(routes, &st); err != nil {
		errs = append(errs, err)
	}
	return st, errors.Join(errs...)
}

type ruleKey struct {
	src      netip.Prefix
	table    int
	priority int
}

func syncRules(want []hostegress.Rule, st *Stats) error {
	wanted := map[ruleKey]bool{}
	for _, r := range want {
		wanted[ruleKey{netip.PrefixFrom(r.PodIP, r.PodIP.BitLen()), r.Table, hostegress.RulePriority}] = true
	}
	var errs []error
	have := map[ruleKey]bool{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		list, err := netlink.RuleList(family)
		if err != nil {
			return fmt.Errorf("list ip rules: %w", err)
		}
		for _, r := range list {
			if r.Protocol != hostinfo.Proto {
				continue
			}
			k := ruleKey{table: r.Table, priority: r.Priority}
			if r.Src != nil {
				k.src = toPrefix(r.Src)
			}
			if wanted[k] && !have[k] {
				have[k] = true
				continue
			}
			r := r
			if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete ip rule %s: %w", r, err))
				continue
			}
			st.RulesDeleted++
		}
	}
	for _, r := range want {
		k := ruleKey{netip.PrefixFrom(r.PodIP, r.PodIP.BitLen()), r.Table, hostegress.RulePriority}
		if have[k] {
			continue
		}
		have[k] = true
		nr := netlink.NewRule()
		nr.Family = familyOf(r.PodIP)
		nr.Src = ipNet(k.src)
		nr.Table = r.Table
		nr.Priority = hostegress.RulePriority
		nr.Protocol = hostinfo.Proto
		if err := netlink.RuleAdd(nr); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("add ip rule from %s lookup %d: %w", k.src, r.Table, err))
			continue
		}
		st.RulesAdded++
	}
	return errors.Join(errs...)
}

type routeKey struct {
	table     int
	dst       netip.Prefix
	gw, src   netip.Addr
	linkIndex int
	scope     uint8
	metric    int
}

func keyOf(r hostegress.Route) routeKey {
	return routeKey{r.Table, r.Dst, r.Gw, r.Src, r.LinkIndex, r.Scope, r.Metric}
}

func syncRoutes(want []hostegress.Route, st *Stats) error {
	wanted := map[routeKey]bool{}
	for _, r := range want {
		wanted[keyOf(r)] = true
	}
	var errs []error
	have := map[routeKey]bool{}
	for _, family := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		filter := &netlink.Route{Table: unix.RT_TABLE_UNSPEC, Protocol: netlink.RouteProtocol(hostinfo.Proto)}
		list, err := netlink.RouteListFiltered(family, filter, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			return fmt.Errorf("list routes: %w", err)
		}
		for _, r := range list {
			k, ok := routeKeyOf(family, r)
			if ok && wanted[k] && !have[k] {
				have[k] = true
				continue
			}
			r := r
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("delete route %s: %w", r, err))
				continue
			}
			st.RoutesDeleted++
		}
	}
	for _, r := range want {
		k := keyOf(r)
		if have[k] {
			continue
		}
		have[k] = true
		nr := &netlink.Route{
			Table:     r.Table,
			Dst:       ipNet(r.Dst),
			LinkIndex: r.LinkIndex,
			Scope:     netlink.Scope(r.Scope),
			Priority:  r.Metric,
			Protocol:  netlink.RouteProtocol(hostinfo.Proto),
			Type:      unix.RTN_UNICAST,
		}
		if r.Gw.IsValid() {
			nr.Gw = r.Gw.AsSlice()
		}
		if r.Src.IsValid() {
			nr.Src = r.Src.AsSlice()
		}
		if err := netlink.RouteAdd(nr); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("add route %s table %d: %w", r.Dst, r.Table, err))
			continue
		}
		st.RoutesAdded++
	}
	return errors.Join(errs...)
}

func routeKeyOf(family int, r netlink.Route) (routeKey, bool) {
	hr, ok := hostinfo.FromNetlinkRoute(family, r)
	return keyOf(hostegress.Route{Table: r.Table, Route: hr}), ok
}

func familyOf(ip netip.Addr) int {
	if ip.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func toPrefix(n *net.IPNet) netip.Prefix {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}
	}
	if len(n.Mask) == net.IPv4len {
		a = a.Unmap()
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a, ones)
}

func ipNet(p netip.Prefix) *net.IPNet {
	bits := p.Addr().BitLen()
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), bits)}
}
