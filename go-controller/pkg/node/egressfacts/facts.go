// Package egressfacts computes the egress facts a node publishes on its own Node
// object (k8s.ovn.org/node-primary-ifaddr and k8s.ovn.org/host-cidrs) from a host
// Snapshot, and the merge patch that writes them. Everything here is pure.
package egressfacts

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

// Facts are a node's egress facts.
type Facts struct {
	// Primary is the gateway interface's primary IPv4 and IPv6 CIDR (host bits kept).
	Primary annotations.DualPrefix
	// HostCIDRs are every usable host CIDR (host bits kept), sorted, without egress IPs.
	HostCIDRs []netip.Prefix
}

// GatewayLink picks the gateway interface: the one named by override when set,
// else the link of the best IPv4 default route of the main table, else that of
// the best IPv6 default route. The error says what is missing.
func GatewayLink(snap hostinfo.Snapshot, override string) (hostinfo.Link, error) {
	if override != "" {
		l, ok := snap.LinkByName(override)
		if !ok {
			return hostinfo.Link{}, fmt.Errorf("gateway interface %q (--gateway-interface) does not exist", override)
		}
		return l, nil
	}
	for _, v4 := range []bool{true, false} {
		if idx, ok := snap.DefaultRouteLink(v4); ok {
			if l, ok := snap.LinkByIndex(idx); ok {
				return l, nil
			}
		}
	}
	return hostinfo.Link{}, fmt.Errorf("no default route in the main table and no --gateway-interface: cannot tell the gateway interface")
}

// usable reports whether a host address may be published: not ours, not an egress
// IP, not loopback, link-local, multicast or unspecified.
func usable(a hostinfo.Addr, egressIPs map[netip.Addr]bool) bool {
	ip := a.Prefix.Addr()
	return !a.Ours && !egressIPs[ip] && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() &&
		!ip.IsMulticast() && !ip.IsUnspecified()
}

// Compute returns the facts of the host: Primary from the gateway link gw (per
// family, the first usable address, preferring non-secondary, non-deprecated,
// non-host (/32, /128) ones), HostCIDRs from every link. egressIPs are the IPs of
// every EgressIP status item in the cluster; an address equal to one of them is
// never published, nor is any address we added (Ours).
func Compute(snap hostinfo.Snapshot, gw hostinfo.Link, egressIPs map[netip.Addr]bool) Facts {
	var f Facts
	f.Primary.V4 = primary(gw, true, egressIPs)
	f.Primary.V6 = primary(gw, false, egressIPs)
	seen := map[netip.Prefix]bool{}
	for _, l := range snap.Links {
		if l.Loopback {
			continue
		}
		for _, a := range l.Addrs {
			if usable(a, egressIPs) && !seen[a.Prefix] {
				seen[a.Prefix] = true
				f.HostCIDRs = append(f.HostCIDRs, a.Prefix)
			}
		}
	}
	sort.Slice(f.HostCIDRs, func(i, j int) bool {
		a, b := f.HostCIDRs[i], f.HostCIDRs[j]
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c < 0
		}
		return a.Bits() < b.Bits()
	})
	return f
}

func primary(l hostinfo.Link, want4 bool, egressIPs map[netip.Addr]bool) netip.Prefix {
	// rank: lower is better.
	rank := func(a hostinfo.Addr) int {
		r := 0
		if a.Secondary || a.Deprecated || a.Tentative {
			r += 2
		}
		if a.Prefix.IsSingleIP() {
			r++
		}
		return r
	}
	var best netip.Prefix
	bestRank := 0
	for _, a := range l.Addrs {
		if a.Prefix.Addr().Is4() != want4 || !usable(a, egressIPs) {
			continue
		}
		if r := rank(a); !best.IsValid() || r < bestRank {
			best, bestRank = a.Prefix, r
		}
	}
	return best
}

// Values renders f as the two annotation values; an absent value ("" with ok
// false) means the annotation should not exist (no primary address at all).
func Values(f Facts) (primary string, primaryOK bool, hostCIDRs string) {
	if f.Primary.V4.IsValid() || f.Primary.V6.IsValid() {
		primary, primaryOK = f.Primary.Marshal(), true
	}
	list := make([]string, 0, len(f.HostCIDRs))
	for _, p := range f.HostCIDRs {
		list = append(list, p.String())
	}
	b, _ := json.Marshal(list)
	return primary, primaryOK, string(b)
}

// Patch returns the JSON merge patch that makes current (the Node's annotations)
// carry f, and false when nothing needs to change. Values are compared as
// parsed facts, so an equivalent hand-written value is left alone.
func Patch(current map[string]string, f Facts) ([]byte, bool) {
	set := Changes(current, f)
	if len(set) == 0 {
		return nil, false
	}
	return MergePatch(set), true
}

// Changes returns the annotation changes that make current carry f: annotation
// name -> new value, nil meaning "remove". Empty when nothing needs to change.
func Changes(current map[string]string, f Facts) map[string]*string {
	primaryVal, primaryOK, cidrsVal := Values(f)
	set := map[string]*string{}
	cur, has := current[annotations.PrimaryIfAddr]
	switch {
	case primaryOK && (!has || !samePrimary(cur, f.Primary)):
		set[annotations.PrimaryIfAddr] = &primaryVal
	case !primaryOK && has:
		set[annotations.PrimaryIfAddr] = nil
	}
	if curC, has := current[annotations.HostCIDRs]; !has || !sameCIDRs(curC, f.HostCIDRs) {
		set[annotations.HostCIDRs] = &cidrsVal
	}
	return set
}

// MergePatch renders annotation changes (name -> value, nil = remove) as a JSON
// merge patch of a Node's metadata.annotations.
func MergePatch(set map[string]*string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	return b
}

func samePrimary(value string, want annotations.DualPrefix) bool {
	got, err := annotations.ParseIfAddr(value)
	return err == nil && got == want
}

func sameCIDRs(value string, want []netip.Prefix) bool {
	var list []string
	if err := json.Unmarshal([]byte(value), &list); err != nil || len(list) != len(want) {
		return false
	}
	for i, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil || p != want[i] {
			return false
		}
	}
	return true
}
