package hostegress

import (
	"net/netip"
	"slices"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// Released is the host state an egress IP leaves behind on the node that held it:
// its SNAT rules and their policy routing (ip rules, and the routes of their
// tables), without the address. A node keeps it for a while after the IP moved
// away (see Merge), because OVN still reroutes the served pods' traffic here until
// the master has seen the new holder ready and rewritten the reroute policies;
// without these rules that traffic would leave with the node's own address.
type Released struct {
	SNAT   []SNAT
	Rules  []Rule
	Routes []Route
	// Owners are, per pod IP of SNAT, the pod object the rules were for (from the
	// State they came from; State.Owners).
	Owners map[netip.Addr]selection.IPClaim
}

// Holds reports whether st programs egress IP ip (its address or a SNAT rule to it).
func (st State) Holds(ip netip.Addr) bool {
	for _, a := range st.Addresses {
		if a.IP == ip {
			return true
		}
	}
	for _, s := range st.SNAT {
		if s.EgressIPAddr == ip {
			return true
		}
	}
	return false
}

// Release returns, for every egress IP with SNAT rules in prev that next no longer
// holds, what it leaves behind: those rules, the ip rules of their pod IPs, and the
// routes of those rules' tables, as prev had them.
func Release(prev, next State) map[netip.Addr]Released {
	out := map[netip.Addr]Released{}
	for _, s := range prev.SNAT {
		if next.Holds(s.EgressIPAddr) {
			continue
		}
		r := out[s.EgressIPAddr]
		r.SNAT = append(r.SNAT, s)
		if c, ok := prev.Owners[s.PodIP]; ok {
			if r.Owners == nil {
				r.Owners = map[netip.Addr]selection.IPClaim{}
			}
			r.Owners[s.PodIP] = c
		}
		for _, rule := range prev.Rules {
			if rule.PodIP == s.PodIP {
				r.Rules = append(r.Rules, rule)
			}
		}
		out[s.EgressIPAddr] = r
	}
	for ip, r := range out {
		tables := map[int]bool{}
		for _, rule := range r.Rules {
			tables[rule.Table] = true
		}
		for _, rt := range prev.Routes {
			if tables[rt.Table] {
				r.Routes = append(r.Routes, rt)
			}
		}
		out[ip] = r
	}
	return out
}

// releasedOwners picks, for every pod IP that st has no SNAT rule for, which of
// released keeps its rule: the one whose pod object owns the IP now
// (selection.OwnsBefore: the newest pod object, as the master decides whose rows
// the IP gets), then the first. A pod IP reused by a new pod object leaves with
// its own EgressIP's released address, not with the one a deleted pod object's
// EgressIP left behind.
func releasedOwners(st State, hasSNAT map[netip.Addr]bool, released []Released) map[netip.Addr]int {
	out := map[netip.Addr]int{}
	for i, rel := range released {
		if len(rel.SNAT) > 0 && st.Holds(rel.SNAT[0].EgressIPAddr) {
			continue
		}
		for _, s := range rel.SNAT {
			if hasSNAT[s.PodIP] {
				continue
			}
			cur, ok := out[s.PodIP]
			if !ok {
				out[s.PodIP] = i
				continue
			}
			c, has := rel.Owners[s.PodIP]
			prevC, prevHas := released[cur].Owners[s.PodIP]
			if has && (!prevHas || selection.OwnsBefore(c, prevC)) {
				out[s.PodIP] = i
			}
		}
	}
	return out
}

// Merge returns st plus the released state of egress IPs st does not hold: their
// SNAT rules for pod IPs st has no rule for (what st wants wins; among released
// states, the one of the pod object owning the IP now: releasedOwners), the ip
// rules of those pod IPs, and the routes of tables st does not fill itself. No
// address is added. The result is sorted like Compute's.
func Merge(st State, released ...Released) State {
	out := State{
		Addresses: append([]Address(nil), st.Addresses...),
		SNAT:      append([]SNAT(nil), st.SNAT...),
		Rules:     append([]Rule(nil), st.Rules...),
		Routes:    append([]Route(nil), st.Routes...),
	}
	hasSNAT := map[netip.Addr]bool{}
	for _, s := range st.SNAT {
		hasSNAT[s.PodIP] = true
	}
	hasRule := map[netip.Addr]bool{}
	for _, r := range st.Rules {
		hasRule[r.PodIP] = true
	}
	ownTables := map[int]bool{}
	for _, r := range st.Routes {
		ownTables[r.Table] = true
	}
	addedTables := map[int]bool{}
	winner := releasedOwners(st, hasSNAT, released)
	for i, rel := range released {
		if len(rel.SNAT) > 0 && st.Holds(rel.SNAT[0].EgressIPAddr) {
			continue // held again: st has it all
		}
		lingering := map[netip.Addr]bool{}
		for _, s := range rel.SNAT {
			if hasSNAT[s.PodIP] || winner[s.PodIP] != i {
				continue
			}
			hasSNAT[s.PodIP] = true
			lingering[s.PodIP] = true
			out.SNAT = append(out.SNAT, s)
		}
		for _, r := range rel.Rules {
			if !lingering[r.PodIP] || hasRule[r.PodIP] {
				continue
			}
			hasRule[r.PodIP] = true
			out.Rules = append(out.Rules, r)
			addedTables[r.Table] = true
		}
		for _, rt := range rel.Routes {
			if addedTables[rt.Table] && !ownTables[rt.Table] && !slices.Contains(out.Routes, rt) {
				out.Routes = append(out.Routes, rt)
			}
		}
	}
	sortState(&out)
	return out
}
