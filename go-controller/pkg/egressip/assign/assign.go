package assign

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// wanted is one usable spec entry of an EgressIP.
type wanted struct {
	addr  netip.Addr
	raw   string
	index int // position in spec.egressIPs
}

// pending is a Problem with the spec position that orders it.
type pending struct {
	order, index int
	p            Problem
}

// allocation counts the IPs a node holds.
type allocation struct{ v4, v6 int }

func (a allocation) total() int { return a.v4 + a.v6 }

// state is the working memory of one Assign call.
type state struct {
	order    []*EgressIP      // oldest first, then by name
	nodes    map[string]*Node // by name
	eligible []*Node          // eligible nodes, sorted by name
	alloc    map[string]*allocation
	wants    [][]wanted         // per order index
	winner   map[netip.Addr]int // contested IP -> order index of the EgressIP that keeps it
	kept     []map[netip.Addr]string
	used     []map[string]bool // per order index: nodes already holding one of its IPs
	problems []pending
}

// Assign computes the new status of every EgressIP. It never fails: every spec
// entry is either in the returned status or reported as a Problem.
func Assign(eips []EgressIP, nodes []Node) Result {
	s := newState(eips, nodes)
	s.parseSpecs()
	s.resolveClaims()
	s.keepValidItems()
	s.placeRest()
	return s.result()
}

func newState(eips []EgressIP, nodes []Node) *state {
	s := &state{
		nodes:  map[string]*Node{},
		alloc:  map[string]*allocation{},
		winner: map[netip.Addr]int{},
	}
	for i := range eips {
		s.order = append(s.order, &eips[i])
	}
	sort.SliceStable(s.order, func(i, j int) bool {
		a, b := s.order[i], s.order[j]
		if !a.Created.Equal(b.Created) {
			return a.Created.Before(b.Created)
		}
		return a.Name < b.Name
	})
	for i := range nodes {
		n := &nodes[i]
		s.nodes[n.Name] = n
		s.alloc[n.Name] = &allocation{}
		if n.Eligible() {
			s.eligible = append(s.eligible, n)
		}
	}
	sort.Slice(s.eligible, func(i, j int) bool { return s.eligible[i].Name < s.eligible[j].Name })
	s.wants = make([][]wanted, len(s.order))
	s.kept = make([]map[netip.Addr]string, len(s.order))
	s.used = make([]map[string]bool, len(s.order))
	for i := range s.order {
		s.kept[i] = map[netip.Addr]string{}
		s.used[i] = map[string]bool{}
	}
	return s
}

func (s *state) report(oi, index int, ip string, reason Reason, cause Cause, format string, args ...any) {
	s.problems = append(s.problems, pending{order: oi, index: index, p: Problem{
		EgressIP: s.order[oi].Name, IP: ip, Index: index, Reason: reason, Cause: cause, Message: fmt.Sprintf(format, args...),
	}})
}

// nodeAddressOwners maps every node address to the first node (by name) that has it.
func (s *state) nodeAddressOwners() map[netip.Addr]string {
	names := make([]string, 0, len(s.nodes))
	for name := range s.nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	owners := map[netip.Addr]string{}
	for _, name := range names {
		for _, a := range s.nodes[name].Addresses {
			a = a.Unmap().WithZone("")
			if _, ok := owners[a]; !ok {
				owners[a] = name
			}
		}
	}
	return owners
}

// parseSpecs turns each spec entry into a wanted address or a Problem.
func (s *state) parseSpecs() {
	owners := s.nodeAddressOwners()
	for oi, e := range s.order {
		seen := map[netip.Addr]int{}
		for i, raw := range e.Spec {
			addr, reason, why := ParseEgressIP(raw)
			if reason != "" {
				cause := CauseNotAnIP
				if reason == UnsupportedRequest {
					cause = CauseUnsupported
				}
				s.report(oi, i, raw, reason, cause, "EgressIP %s: spec.egressIPs[%d] %q: %s", e.Name, i, raw, why)
				continue
			}
			if prev, dup := seen[addr]; dup {
				s.report(oi, i, raw, InvalidEgressIP, CauseDuplicate, "EgressIP %s: spec.egressIPs[%d] %q is the same address as spec.egressIPs[%d] %q",
					e.Name, i, raw, prev, e.Spec[prev])
				continue
			}
			seen[addr] = i
			if node, ok := owners[addr]; ok {
				s.report(oi, i, raw, EgressIPConflict, CauseNodeAddress, "EgressIP %s: spec.egressIPs[%d] %q is an address of node %s", e.Name, i, raw, node)
				continue
			}
			s.wants[oi] = append(s.wants[oi], wanted{addr: addr, raw: raw, index: i})
		}
	}
}

// holds reports whether the EgressIP at order index oi has addr in its current status.
func (s *state) holds(oi int, addr netip.Addr) bool {
	for _, it := range s.order[oi].Status {
		if a, err := netip.ParseAddr(it.EgressIP); err == nil && a == addr {
			return true
		}
	}
	return false
}

// resolveClaims decides, for every IP wanted by several EgressIPs, which one keeps
// it: the first (oldest, then by name) that already has it in its status, else the
// oldest claimer. Keeping it with its current holder means that an edit of another
// EgressIP never takes an IP that is already serving traffic.
func (s *state) resolveClaims() {
	claims := map[netip.Addr][]int{}
	for oi := range s.order {
		for _, w := range s.wants[oi] {
			claims[w.addr] = append(claims[w.addr], oi)
		}
	}
	for addr, claimers := range claims {
		win := claimers[0]
		for _, c := range claimers {
			if s.holds(c, addr) {
				win = c
				break
			}
		}
		s.winner[addr] = win
	}
}

// keeps reports whether the EgressIP at order index oi keeps addr, one of its
// wanted addresses, under the claim rule (resolveClaims): every other EgressIP
// wanting addr is refused it (CauseClaimed).
func (s *state) keeps(oi int, addr netip.Addr) bool { return s.winner[addr] == oi }

// Kept returns, for every EgressIP of eips by name, the addresses of its spec it
// keeps, in spec order: its usable entries (ParseEgressIP, not a duplicate, not
// the address of a node of nodes) that the claim rule (resolveClaims) leaves to it
// and to no other EgressIP. These are its IPs whether or not a node can hold them
// now; Assign reports every other entry as a Problem, and an entry claimed by
// another EgressIP is that one's IP, never this one's. Only Name, Created, Spec and
// Status of eips and the Name and Addresses of nodes are read.
func Kept(eips []EgressIP, nodes []Node) map[string][]netip.Addr {
	s := newState(eips, nodes)
	s.parseSpecs()
	s.resolveClaims()
	out := make(map[string][]netip.Addr, len(s.order))
	for oi, e := range s.order {
		var ips []netip.Addr
		for _, w := range s.wants[oi] {
			if s.keeps(oi, w.addr) {
				ips = append(ips, w.addr)
			}
		}
		out[e.Name] = ips
	}
	return out
}

// fits reports whether the node's egress network of addr's family contains addr.
func fits(n *Node, addr netip.Addr) bool {
	p := n.Egress.Network.For(addr)
	return p.IsValid() && p.Contains(addr)
}

// hasRoom reports whether the node can take one more IP of addr's family.
func (s *state) hasRoom(n *Node, addr netip.Addr) bool {
	a := s.alloc[n.Name]
	famCap, famUsed := n.Egress.CapacityV6, a.v6
	if addr.Is4() {
		famCap, famUsed = n.Egress.CapacityV4, a.v4
	}
	if famCap >= 0 && famUsed >= famCap {
		return false
	}
	return n.Egress.CapacityTotal < 0 || a.total() < n.Egress.CapacityTotal
}

func (s *state) take(oi int, n *Node, addr netip.Addr) {
	s.kept[oi][addr] = n.Name
	s.used[oi][n.Name] = true
	if addr.Is4() {
		s.alloc[n.Name].v4++
	} else {
		s.alloc[n.Name].v6++
	}
}

// keepValidItems keeps every current status item that still satisfies all
// constraints, in processing order, so that the nodes' allocations are known
// before anything new is placed.
func (s *state) keepValidItems() {
	for oi, e := range s.order {
		want := map[netip.Addr]bool{}
		for _, w := range s.wants[oi] {
			want[w.addr] = true
		}
		for _, it := range e.Status {
			addr, err := netip.ParseAddr(it.EgressIP)
			if err != nil || !want[addr] || !s.keeps(oi, addr) {
				continue // IP left the spec, became invalid, or belongs to another EgressIP
			}
			if _, dup := s.kept[oi][addr]; dup {
				continue
			}
			n, ok := s.nodes[it.Node]
			if !ok || !n.Eligible() || !e.selects(n) || !fits(n, addr) || s.used[oi][n.Name] || !s.hasRoom(n, addr) {
				continue
			}
			s.take(oi, n, addr)
		}
	}
}

// placeRest places every wanted IP that is not held yet on the eligible node with
// the fewest allocations (ties by name) that satisfies the constraints.
func (s *state) placeRest() {
	for oi, e := range s.order {
		for _, w := range s.wants[oi] {
			if !s.keeps(oi, w.addr) {
				s.report(oi, w.index, w.raw, EgressIPConflict, CauseClaimed, "EgressIP %s: spec.egressIPs[%d] %q is claimed by EgressIP %s, which keeps it",
					e.Name, w.index, w.raw, s.order[s.winner[w.addr]].Name)
				continue
			}
			if _, ok := s.kept[oi][w.addr]; ok {
				continue
			}
			var best *Node
			matching := false
			for _, n := range s.eligible {
				if !e.selects(n) || !fits(n, w.addr) {
					continue
				}
				matching = true
				if s.used[oi][n.Name] || !s.hasRoom(n, w.addr) {
					continue
				}
				if best == nil || s.alloc[n.Name].total() < s.alloc[best.Name].total() {
					best = n
				}
			}
			switch {
			case best != nil:
				s.take(oi, best, w.addr)
			case !matching:
				cause, detail := s.noCandidate(e, w.addr)
				s.report(oi, w.index, w.raw, NoMatchingNodeFound, cause, "EgressIP %s: spec.egressIPs[%d] %q: no egress-assignable, Ready and reachable node has an egress network containing it%s",
					e.Name, w.index, w.raw, detail)
			default:
				s.report(oi, w.index, w.raw, UnassignedRequest, CauseCapacity, "EgressIP %s: spec.egressIPs[%d] %q: every eligible node whose egress network contains it already holds an IP of this EgressIP or is at capacity",
					e.Name, w.index, w.raw)
			}
		}
	}
}

// noCandidate says why no node is a candidate for addr of e, as a Cause and a
// detail for the message naming each node whose network contains addr.
func (s *state) noCandidate(e *EgressIP, addr netip.Addr) (Cause, string) {
	if e.NodeSelectorErr != nil {
		return CauseInvalidSelector, fmt.Sprintf(" (spec.nodeSelector: %v)", e.NodeSelectorErr)
	}
	names := make([]string, 0, len(s.nodes))
	for name, n := range s.nodes {
		if fits(n, addr) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return CauseNoMatchingNetwork, " (no node's network contains it)"
	}
	sort.Strings(names)
	causes := map[NodeCause]bool{}
	parts := make([]string, 0, len(names))
	for _, name := range names {
		c := Why(e, s.nodes[name], addr)
		causes[c] = true
		parts = append(parts, name+": "+string(c))
	}
	cause := CauseNoEligibleNode
	if len(causes) == 1 {
		for c := range causes {
			cause = map[NodeCause]Cause{NodeNotLabelled: CauseNodesNotLabelled, NodeExcluded: CauseNodesExcluded,
				NodeConfigInvalid: CauseNodesConfigInvalid, NodeNotReady: CauseNodesNotReady, NodeUnreachable: CauseNodesUnreachable}[c]
		}
		if cause == "" {
			cause = CauseNoEligibleNode
		}
	}
	return cause, " (" + strings.Join(parts, ", ") + ")"
}

func (s *state) result() Result {
	res := Result{Status: map[string][]Item{}}
	for oi, e := range s.order {
		var items []Item
		for _, w := range s.wants[oi] {
			if node, ok := s.kept[oi][w.addr]; ok {
				items = append(items, Item{Node: node, EgressIP: w.raw})
			}
		}
		res.Status[e.Name] = items
	}
	sort.SliceStable(s.problems, func(i, j int) bool {
		if s.problems[i].order != s.problems[j].order {
			return s.problems[i].order < s.problems[j].order
		}
		return s.problems[i].index < s.problems[j].index
	})
	for _, p := range s.problems {
		res.Problems = append(res.Problems, p.p)
	}
	return res
}

// ParseEgressIP parses one spec.egressIPs entry. On failure it returns the Reason
// (InvalidEgressIP or UnsupportedRequest) and a short explanation.
func ParseEgressIP(raw string) (netip.Addr, Reason, string) {
	addr, err := netip.ParseAddr(raw)
	switch {
	case err != nil:
		return netip.Addr{}, InvalidEgressIP, "not an IP address"
	case addr.Zone() != "":
		return netip.Addr{}, InvalidEgressIP, "an egress IP cannot carry a zone"
	case addr.Is4In6():
		return netip.Addr{}, UnsupportedRequest, "IPv4-mapped IPv6 addresses are not supported; write the IPv4 address"
	case addr.IsUnspecified(), addr.IsLoopback(), addr.IsMulticast(),
		addr.IsLinkLocalUnicast(), addr.IsInterfaceLocalMulticast():
		return netip.Addr{}, UnsupportedRequest, "unspecified, loopback, multicast and link-local addresses cannot be egress IPs"
	}
	return addr, "", ""
}
