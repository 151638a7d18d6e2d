package nbstate

import (
	"net/netip"
	"slices"
	"time"
)

// Lingers is the one rule, in local gateway mode (both layouts), for whether node n still SNATs egress
// IP ip that it is not assigned, by its own published facts at now: it lists ip as lingering with an end after now
// (until is that end), or it still lists ip as ready (it has not taken the release in yet: until is zero, and it
// publishes the end once it does). Anything else, including a linger whose end passed or was never published, is
// no: such a node is not a next hop for ip. The master, explain and the checkers all decide with it.
func Lingers(n Node, ip netip.Addr, now time.Time) (ok bool, until time.Time) {
	if t, listed := n.LingeringUntil[ip]; listed {
		return now.Before(t), t
	}
	return n.ListedReady[ip] || n.ReadyEgressIPs[ip], time.Time{}
}

// LingerHolders are the nodes not assigned one of e's IPs of family fam that still SNAT it (Lingers), with their
// management port next hops: where e's pods keep going while no holder of fam is ready.
func LingerHolders(in Input, e EgressIP, fam string) []Holder {
	var out []Holder
	for _, ip := range e.IPs {
		if Family(ip) != fam {
			continue
		}
		for name, n := range in.Nodes {
			if slices.Contains(e.Assigned, Assignment{Node: name, IP: ip}) {
				continue
			}
			if ok, _ := Lingers(n, ip, in.Now); !ok {
				continue
			}
			if nh, ok := nexthop(in, n, ip, true); ok {
				out = append(out, Holder{Node: name, EgressIP: ip, Nexthop: nh})
			}
		}
	}
	return out
}

// LingerEnd is the earliest published linger end after in.Now among the nodes e's routes fall back to
// (centralized layout, local gateway mode): when Routes changes without any event saying so. Zero: none.
func LingerEnd(in Input, e EgressIP) time.Time {
	var next time.Time
	for _, ip := range e.IPs {
		for name, n := range in.Nodes {
			if slices.Contains(e.Assigned, Assignment{Node: name, IP: ip}) {
				continue
			}
			if ok, t := Lingers(n, ip, in.Now); ok && !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}
