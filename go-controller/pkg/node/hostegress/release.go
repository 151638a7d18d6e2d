package hostegress

import (
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
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
	return leftBehind(prev, func(s SNAT) (netip.Addr, bool) {
		return s.EgressIPAddr, !next.Holds(s.EgressIPAddr)
	})
}

// Unserved returns, for every pod IP that prev SNATs to an egress IP next still
// holds and that next has no SNAT rule for (the pod object stopped being served
// here: relabelled, its namespace relabelled, the selector edited), what its rule
// leaves behind, as Release does for an egress IP, keyed by pod IP.
func Unserved(prev, next State) map[netip.Addr]Released {
	served := map[netip.Addr]bool{}
	for _, s := range next.SNAT {
		served[s.PodIP] = true
	}
	return leftBehind(prev, func(s SNAT) (netip.Addr, bool) {
		return s.PodIP, !served[s.PodIP] && next.Holds(s.EgressIPAddr)
	})
}

// leftBehind groups the SNAT rules of prev that key selects, by its key, each
// group with the owners of its pod IPs, the ip rules of those pod IPs and the
// routes of those rules' tables, as prev had them.
func leftBehind(prev State, key func(SNAT) (netip.Addr, bool)) map[netip.Addr]Released {
	out := map[netip.Addr]Released{}
	for _, s := range prev.SNAT {
		k, ok := key(s)
		if !ok {
			continue
		}
		r := out[k]
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
		out[k] = r
	}
	for k, r := range out {
		tables := map[int]bool{}
		for _, rule := range r.Rules {
			tables[rule.Table] = true
		}
		for _, rt := range prev.Routes {
			if tables[rt.Table] {
				r.Routes = append(r.Routes, rt)
			}
		}
		out[k] = r
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

// LivePods reports, for Released.Live, whether a pod object is among pods (same namespace, name and creation time),
// has not completed (phase Succeeded or Failed) and still owns each of its IPs among the pods not completed
// (selection.Owners): an IP that a newer pod object has is no longer the claim's (its sandbox is gone).
func LivePods(pods []*corev1.Pod) func(selection.IPClaim) bool {
	var running []*corev1.Pod
	var claims []selection.IPClaim
	for _, p := range pods {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			running = append(running, p)
			claims = append(claims, selection.ClaimOf(p))
		}
	}
	owners := selection.Owners(claims)
	find := podOf(running)
	return func(c selection.IPClaim) bool {
		p := find(c)
		if p == nil {
			return false
		}
		for _, ip := range selection.PodIPs(p) {
			if i, ok := owners[ip]; ok && running[i] != p {
				return false
			}
		}
		return true
	}
}

// RunsOn reports whether the pod object of a claim is among pods and runs on node.
func RunsOn(pods []*corev1.Pod, node string) func(selection.IPClaim) bool {
	find := podOf(pods)
	return func(c selection.IPClaim) bool {
		p := find(c)
		return p != nil && p.Spec.NodeName == node
	}
}

// ServedWith reports whether a claim's pod object is served (selection.ServedPods) by an EgressIP whose spec lists
// egress IP ip. The selection is computed at the first call.
func ServedWith(eips []*egressipv1.EgressIP, namespaces map[string]*corev1.Namespace, pods []*corev1.Pod) func(selection.IPClaim, netip.Addr) bool {
	var served map[netip.Addr][]func(selection.IPClaim) *corev1.Pod
	return func(c selection.IPClaim, ip netip.Addr) bool {
		if served == nil {
			served = map[netip.Addr][]func(selection.IPClaim) *corev1.Pod{}
			res := selection.ServedPods(eips, namespaces, pods)
			for _, e := range eips {
				for _, s := range e.Spec.EgressIPs {
					if a, err := netip.ParseAddr(s); err == nil {
						served[a.Unmap()] = append(served[a.Unmap()], podOf(res.Served[e.Name]))
					}
				}
			}
		}
		return slices.ContainsFunc(served[ip], func(find func(selection.IPClaim) *corev1.Pod) bool { return find(c) != nil })
	}
}

// podOf finds a claim's pod object among pods: the same namespace, name and creation time.
func podOf(pods []*corev1.Pod) func(selection.IPClaim) *corev1.Pod {
	byName := make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		byName[p.Namespace+"/"+p.Name] = p
	}
	return func(c selection.IPClaim) *corev1.Pod {
		p, ok := byName[c.Namespace+"/"+c.Name]
		if !ok || !p.CreationTimestamp.Time.Equal(c.Created) {
			return nil
		}
		return p
	}
}

// releasedOwners picks, for every pod IP that st has no SNAT rule for, which of
// released keeps its rule: the one whose pod object owns the IP now
// (selection.OwnsBefore: the newest pod object, as the master decides whose rows
// the IP gets), then the first. A pod IP reused by a new pod object leaves with
// its own EgressIP's released address, not with the one a deleted pod object's
// EgressIP left behind.
func releasedOwners(hasSNAT map[netip.Addr]bool, released []Released) map[netip.Addr]int {
	out := map[netip.Addr]int{}
	for i, rel := range released {
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

// Merge returns st plus released states (Release, Unserved; the caller passes only
// what still lingers): their SNAT rules for pod IPs st has no rule for (what st
// wants wins; among released states, the one of the pod object owning the IP now:
// releasedOwners), the ip rules of those pod IPs, and the routes of tables st does
// not fill itself. No address is added. The result is sorted like Compute's.
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
	winner := releasedOwners(hasSNAT, released)
	for i, rel := range released {
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
