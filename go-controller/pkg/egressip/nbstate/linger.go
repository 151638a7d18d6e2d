package nbstate

import (
	"maps"
	"net/netip"
	"slices"
	"time"
)

// LingerGrace is how long, in the interconnect layout, the zone of a node that released an egress IP keeps its rows
// for that IP after the linger end the node published (KeepsRows): every zone stops rerouting to the node at that
// end, each in its next commit, and traffic they send meanwhile must still meet the node's rows. It bounds the
// commit delay of the other zones plus the clock skew between nodes (ends are wall-clock times) that the release
// tolerates. A constant, not a clock: every reader derives the same time from the published end.
const LingerGrace = 2 * time.Second

// Lingers is the one rule, in local gateway mode (both layouts) and in the interconnect layout in shared gateway
// mode, for whether node n still SNATs egress IP ip that it is not assigned, by its own published facts at now: it
// lists ip as lingering with an end after now (until is that end), or it still lists ip as ready (it has not taken
// the release in yet: until is zero, and it publishes the end once it does). Anything else, including a linger whose
// end passed or was never published, is no: such a node is not a next hop for ip. The master, the zone controllers,
// explain and the checkers all decide with it. Who publishes: the node daemon in local gateway mode (its iptables
// rules SNAT), the node's zone controller in shared gateway mode (its gateway router's rows SNAT).
func Lingers(n Node, ip netip.Addr, now time.Time) (ok bool, until time.Time) {
	if t, listed := n.LingeringUntil[ip]; listed {
		return now.Before(t), t
	}
	return n.ListedReady[ip] || n.ReadyEgressIPs[ip], time.Time{}
}

// KeepsRows is the one rule, in the interconnect layout, for whether the zone of node n still keeps its rows for
// egress IP ip that n released (shared gateway mode: the SNAT rows on its gateway router and the reroutes of the
// other zones' pods to it; local gateway mode: those reroutes to its management port), at now: while n has not
// published the end yet (Lingers with a zero until), and until LingerGrace after the end it published. until is
// when they go (zero: not known yet). A zone controller restarted during a linger, and explain, read the same.
func KeepsRows(n Node, ip netip.Addr, now time.Time) (keeps bool, until time.Time) {
	lingers, end := Lingers(n, ip, now)
	if end.IsZero() {
		return lingers, time.Time{}
	}
	until = end.Add(LingerGrace)
	return now.Before(until), until
}

// LingerHolders are, for each of e's IPs of family fam, the one node not assigned it that still SNATs it
// (Lingers) and released it last, with its management port next hop: where e's pods keep going while no holder
// of fam is ready. One node per IP: the address answers on one node only, the one that held it last (and announced
// it last, so the routers outside send the replies there); traffic spread over two lingering nodes (ECMP) leaves
// half of its connections without replies. The last to release is a node that still lists the IP ready (it has
// not taken the release in), else the one whose published end comes last; ties by node name.
func LingerHolders(in Input, e EgressIP, fam string) []Holder {
	var out []Holder
	for _, ip := range e.IPs {
		if Family(ip) != fam {
			continue
		}
		var best *Holder
		var bestEnd time.Time
		for _, name := range slices.Sorted(maps.Keys(in.Nodes)) {
			n := in.Nodes[name]
			if slices.Contains(e.Assigned, Assignment{Node: name, IP: ip}) {
				continue
			}
			ok, end := Lingers(n, ip, in.Now)
			if !ok {
				continue
			}
			nh, ok := nexthop(in, n, ip, true)
			if !ok || (best != nil && !releasedLater(end, bestEnd)) {
				continue
			}
			best, bestEnd = &Holder{Node: name, EgressIP: ip, Nexthop: nh}, end
		}
		if best != nil {
			out = append(out, *best)
		}
	}
	return out
}

// releasedLater reports whether a linger with end a began after one with end b:
// a zero end (the release not taken in yet) is the latest.
func releasedLater(a, b time.Time) bool {
	switch {
	case b.IsZero():
		return false
	case a.IsZero():
		return true
	default:
		return a.After(b)
	}
}

// LingerEnd is the earliest published linger end after in.Now among the nodes e's routes fall back to (local
// gateway mode; the interconnect layout): when Routes changes without any event saying so. Zero: none.
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
