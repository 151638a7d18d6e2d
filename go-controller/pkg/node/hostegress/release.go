package hostegress

import (
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

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

// Live returns r without what it keeps for pod objects that live does not report (deleted, or completed): their
// SNAT rules (by Owners; a rule without a recorded owner stays), the ip rules of those pod IPs, and the routes of
// tables no remaining rule uses. Such a pod sends nothing more and the master no longer reroutes it, but its IP may
// be given to a new pod object before this node has seen that one; the new pod's traffic, rerouted here for another
// EgressIP, must not leave with the gone pod's egress IP.
func (r Released) Live(live func(selection.IPClaim) bool) Released {
	kept := map[netip.Addr]bool{}
	var snat []SNAT
	for _, s := range r.SNAT {
		if c, ok := r.Owners[s.PodIP]; ok && !live(c) {
			continue
		}
		kept[s.PodIP] = true
		snat = append(snat, s)
	}
	if len(snat) == len(r.SNAT) {
		return r
	}
	out := Released{SNAT: snat, Owners: r.Owners}
	tables := map[int]bool{}
	for _, rule := range r.Rules {
		if kept[rule.PodIP] {
			out.Rules = append(out.Rules, rule)
			tables[rule.Table] = true
		}
	}
	for _, rt := range r.Routes {
		if tables[rt.Table] {
			out.Routes = append(out.Routes, rt)
		}
	}
	return out
}

// LivePods reports, for Released.Live, whether a pod object is among pods (same namespace, name and creation time)
// and has not completed (phase Succeeded or Failed).
func LivePods(pods []*corev1.Pod) func(selection.IPClaim) bool {
	created := make(map[string]time.Time, len(pods))
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			created[p.Namespace+"/"+p.Name] = p.CreationTimestamp.Time
		}
	}
	return func(c selection.IPClaim) bool {
		t, ok := created[c.Namespace+"/"+c.Name]
		return ok && t.Equal(c.Created)
	}
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
