package nbstate

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Node is what the desired state needs to know about a node.
type Node struct {
	Name string
	// JoinIPs are the gateway router's join IPs (node-gateway-router-lrp-ifaddr), at
	// most one per family: the reroute next hops in shared gateway mode.
	JoinIPs []netip.Addr
	// ManagementIPs are the management port IPs (.2 of each node subnet): the
	// reroute next hops in local gateway mode.
	ManagementIPs []netip.Addr
	// Addresses are the node's own addresses: members of the node-ips address set.
	Addresses []netip.Addr
	// ReadyEgressIPs are the egress IPs the node reports fully programmed on its
	// host (annotations.EgressIPsReady). In local gateway mode a holder becomes a
	// reroute next hop only once the IP it holds is in this set (make-before-break).
	// nil (annotation absent or unparsable) means none is ready: readiness is never
	// assumed.
	ReadyEgressIPs map[netip.Addr]bool
	// TransitIPs are the node's transit switch addresses (interconnect layout,
	// node-transit-switch-port-ifaddr), at most one per family: the next hops other
	// zones reroute to when this node holds an egress IP.
	TransitIPs []netip.Addr
	// LingeringEgressIPs (interconnect layout), for the zone's own node only, are
	// the egress IPs the node no longer holds whose rows its zone still keeps
	// (KeepsRows): in shared gateway mode its SNAT rows and the reroutes of the other
	// zones' pods to its gateway router; in local gateway mode those reroutes to its
	// management port.
	LingeringEgressIPs map[netip.Addr]bool
	// LingeringUntil (local gateway mode; the interconnect layout in shared gateway
	// mode) are the egress IPs the node no longer holds but still SNATs, with the end
	// of that linger it published (annotations.ParseLingering): see Lingers.
	LingeringUntil map[netip.Addr]time.Time
	// ListedReady are the egress IPs the node lists ready as it wrote them, before
	// the master set aside claims for IPs that status gives another node: right
	// after an IP moves, its old holder still lists it (and still SNATs it) until
	// it takes the release in and publishes the linger's end (Lingers).
	ListedReady map[netip.Addr]bool
}

// Assignment says Node holds IP (one status item, parsed).
type Assignment struct {
	Node string
	IP   netip.Addr
}

// Pod is a served pod.
type Pod struct {
	Namespace, Name string
	IPs             []netip.Addr
	// Node is the node the pod runs on: in the interconnect layout it says whether
	// the pod is of the zone (Input.Zone).
	Node string
	// Created is the pod object's creation time: of two served pods sharing an IP,
	// the owner has its rows (selection.OwnsBefore).
	Created time.Time
}

// Key returns the pod's "namespace/name", the value of PodKey in external_ids.
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// EgressIP is one EgressIP with its assignments: what its routes (Routes) depend
// on. Pods, the pods it serves (a pod under one EgressIP only), are read by this
// package's tests alone: the master keeps who serves which pod in its own memory
// and asks PodRows for each pod's rows (master.plan).
type EgressIP struct {
	Name     string
	Assigned []Assignment
	Pods     []Pod
	// Strict (spec.strict): in a family with no route, the served pods' policy
	// drops instead of letting them leave with a node or gateway router address.
	Strict bool
	// IPs are the entries of spec.egressIPs the EgressIP keeps (the master gives
	// assign.Kept: no entry refused to it, such as an IP another EgressIP keeps):
	// the IPs whose lingering holders are a fallback (LingerHolders, LingerEnd; in
	// the interconnect layout lingeringHolders and the zone node's Local). A node
	// SNATting an IP not listed here does it for another EgressIP's pods.
	IPs []netip.Addr
}

// Input is what the rows are computed from (Routes, PodRows' routes, ClusterRows).
type Input struct {
	// Mode decides the reroute next hop and whether SNAT rows are written.
	Mode gwmode.Mode
	// ClusterSubnets are the pod networks (one or more per family in use).
	ClusterSubnets []netip.Prefix
	// JoinSubnets are the join switch networks (100.64.0.0/16, fd98::/64).
	JoinSubnets []netip.Prefix
	// EgressIPs in serving priority order (selection.Ordered), read by this
	// package's tests alone (see EgressIP.Pods).
	EgressIPs []EgressIP
	// Nodes are all nodes, by name.
	Nodes map[string]Node
	// Zone is, in the interconnect layout, the zone the rows are for: its node's
	// name (one zone per node). The zone's own pods get reroutes toward every
	// holder (its own node through the join or management port IP, other nodes
	// through their transit switch IP once they list the IP ready); pods of other
	// zones get rows here only when this zone's node holds (or lingers on) their
	// EgressIP's IP: a reroute to the local next hop and, in shared gateway mode,
	// the SNAT on this zone's gateway router. "" is the centralized layout: one
	// zone holding every node.
	Zone string
	// Now is the time the published linger ends are compared with (Lingers).
	Now time.Time
}

// local reports whether node is of the zone of in.
func (in Input) local(node string) bool { return in.Zone == "" || node == in.Zone }

// State is a set of rows keyed by identity. Rows have no UUID in a desired State;
// in a Current state they carry the NB UUID.
type State struct {
	Policies    map[Key]*nbdb.LogicalRouterPolicy
	NATs        map[Key]*nbdb.NAT
	AddressSets map[Key]*nbdb.AddressSet
}

// NewState returns an empty State.
func NewState() State {
	return State{
		Policies:    map[Key]*nbdb.LogicalRouterPolicy{},
		NATs:        map[Key]*nbdb.NAT{},
		AddressSets: map[Key]*nbdb.AddressSet{},
	}
}

// Len is the number of rows.
func (s State) Len() int { return len(s.Policies) + len(s.NATs) + len(s.AddressSets) }

// Holder is a node holding an egress IP, with its next hop.
type Holder struct {
	Node     string
	EgressIP netip.Addr
	Nexthop  netip.Addr
}

// Route is how the served pods of one EgressIP leave in one family: the reroute
// next hops (sorted) and, in shared gateway mode, the gateway routers that SNAT
// them (one per holder of the zone). Drop (strict EgressIPs with no holder)
// replaces the reroute with a drop: the pods' traffic leaving the cluster is
// dropped. Local (interconnect layout) are the next hops of the zone's own
// holders, assigned or lingering (sorted): where the traffic of the EgressIP's
// pods of other zones goes once it arrives here over the transit switch; empty:
// no rows here for pods of other zones.
type Route struct {
	Nexthops []string
	SNAT     []Holder
	Drop     bool
	Local    []string
}

// Equal reports whether two routes give the same rows.
func (r Route) Equal(o Route) bool {
	return r.Drop == o.Drop && slices.Equal(r.Nexthops, o.Nexthops) && slices.Equal(r.SNAT, o.SNAT) &&
		slices.Equal(r.Local, o.Local)
}

// nexthop returns the next hop toward node n for egress IP ip, if n can be one: a
// node of the zone through its gateway router join IP (shared gateway mode) or its
// management port IP (local gateway mode, once n lists ip ready: the host rules
// are there); a node of another zone through its transit switch IP, once n lists ip
// ready (its zone has programmed the SNAT or its host the rules). lingering skips
// the readiness check: n says it still serves ip while it lingers.
func nexthop(in Input, n Node, ip netip.Addr, lingering bool) (netip.Addr, bool) {
	candidates, needReady := n.TransitIPs, true
	if in.local(n.Name) {
		candidates, needReady = n.JoinIPs, false
		if in.Mode == gwmode.Local {
			candidates, needReady = n.ManagementIPs, true
		}
	}
	if needReady && !lingering && !n.ReadyEgressIPs[ip] {
		return netip.Addr{}, false
	}
	for _, nh := range candidates {
		if nh.Is4() == ip.Is4() {
			return nh, true
		}
	}
	return netip.Addr{}, false
}

// Routes returns, per family of the cluster subnets, how e's pods leave: reroute
// to the nodes holding an IP of e of that family that can be next hops (nexthop),
// sorted by next hop, with one SNAT per holder of the zone in shared mode. A family
// with no such holder falls back, in local mode and in the interconnect layout, to
// the nodes still SNATting one of e's IPs of that family by their published linger
// (LingerHolders). A family with neither has no route for the zone's pods (a drop
// when e is strict). In the interconnect layout the zone's node holding one of e's
// IPs (ready or not), and the zone's node while its zone keeps rows for one of e's
// IPs it released (LingeringEgressIPs), also give Local and their SNAT rows.
func Routes(in Input, e EgressIP) map[string]Route {
	out := map[string]Route{}
	byFamily := map[string][]Holder{}
	local := map[string][]Holder{}
	for _, a := range e.Assigned {
		n, ok := in.Nodes[a.Node]
		if !ok {
			continue
		}
		if nh, ok := nexthop(in, n, a.IP, false); ok {
			byFamily[Family(a.IP)] = append(byFamily[Family(a.IP)], Holder{Node: a.Node, EgressIP: a.IP, Nexthop: nh})
		}
		// The zone's own node holding an IP of e is a Local next hop for the other
		// zones' pods whether or not its daemon lists the IP ready: their traffic
		// reaches this zone only when their own zone reroutes it here, and one that
		// has not caught up yet (the IP edited to another one this node holds, the
		// pod's zone cut off from the API server) must find the reroute to the
		// node, whose daemon still SNATs them with the IP it released, rather than
		// leave through the gateway router with its address.
		if in.Zone != "" && a.Node == in.Zone {
			if nh, ok := nexthop(in, n, a.IP, true); ok {
				local[Family(a.IP)] = append(local[Family(a.IP)], Holder{Node: a.Node, EgressIP: a.IP, Nexthop: nh})
			}
		}
	}
	if in.Zone != "" {
		if zn, ok := in.Nodes[in.Zone]; ok {
			for _, ip := range e.IPs {
				if !zn.LingeringEgressIPs[ip] || slices.Contains(e.Assigned, Assignment{Node: in.Zone, IP: ip}) {
					continue
				}
				if nh, ok := nexthop(in, zn, ip, true); ok {
					local[Family(ip)] = append(local[Family(ip)], Holder{Node: in.Zone, EgressIP: ip, Nexthop: nh})
				}
			}
		}
	}
	for _, fam := range families(in.ClusterSubnets) {
		hs := byFamily[fam]
		var r Route
		switch {
		case len(hs) > 0:
			r.Nexthops = sortedHops(hs)
		case in.Mode == gwmode.Local || in.Zone != "":
			// The nodes that still SNAT one of e's IPs by their own published linger
			// (Lingers): no clock of the reader's own. Read only for a family without
			// a holder: it looks at every node for each IP of e.
			if hs := LingerHolders(in, e, fam); len(hs) > 0 {
				r.Nexthops = sortedHops(hs)
			} else if e.Strict {
				r.Drop = true
			}
		case e.Strict:
			r.Drop = true
		}
		switch {
		case in.Zone != "" && len(local[fam]) > 0:
			r.Local = sortedHops(local[fam])
			if in.Mode == gwmode.Shared {
				r.SNAT = local[fam]
			}
		case in.Zone == "" && in.Mode == gwmode.Shared:
			r.SNAT = hs
		}
		if len(r.Nexthops) == 0 && !r.Drop && len(r.Local) == 0 {
			continue
		}
		out[fam] = r
	}
	return out
}

// sortedHops sorts hs by next hop and returns the distinct next hops.
func sortedHops(hs []Holder) []string {
	sort.Slice(hs, func(i, j int) bool {
		if hs[i].Nexthop != hs[j].Nexthop {
			return hs[i].Nexthop.Less(hs[j].Nexthop)
		}
		return hs[i].EgressIP.Less(hs[j].EgressIP)
	})
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.Nexthop.String())
	}
	return slices.Compact(out)
}

// PodRows returns the rows of one pod served by EgressIP name, whose routes are
// Routes' result, and the pod IPs it serves: per family with a route, the pod's
// first IP of that family (when claim allows it: another pod may have it) gets a
// reroute policy (priority 100) on ovn_cluster_router and, in shared mode, one SNAT
// per holder on GR_<node>. claim is asked once per IP about to be served.
//
// In the interconnect layout (zone not ""), a pod of another zone gets rows only
// where its route has Local next hops (this zone's node holds its IP): the
// reroute to them and the SNAT rows; its IPs are not returned (the served-pods
// address sets hold the zone's own pods).
func PodRows(mode gwmode.Mode, zone string, name string, routes map[string]Route, pod Pod, claim func(netip.Addr) bool) (State, []netip.Addr) {
	st := NewState()
	ips := addPodRows(&st, mode, zone, name, routes, pod, claim)
	return st, ips
}

func addPodRows(st *State, mode gwmode.Mode, zone string, name string, routes map[string]Route, pod Pod, claim func(netip.Addr) bool) []netip.Addr {
	own := zone == "" || pod.Node == zone
	var served []netip.Addr
	podKey := pod.Key()
	seenFamily := [2]bool{}
	for _, ip := range pod.IPs {
		fam := Family(ip)
		fi := 0
		if fam == FamilyIPv6 {
			fi = 1
		}
		if seenFamily[fi] {
			continue
		}
		seenFamily[fi] = true
		r, ok := routes[fam]
		hops := r.Nexthops
		if !own {
			hops = r.Local
		}
		if !ok || (len(hops) == 0 && (!own || !r.Drop)) || !claim(ip) {
			continue
		}
		if own {
			served = append(served, ip)
		}
		ids := IDs{OwnerType: OwnerEgressIP, Name: name, Rule: RuleReroute, Family: fam, Pod: podKey}
		pol := &nbdb.LogicalRouterPolicy{
			Priority:    ReroutePriority,
			Match:       fam + ".src == " + ip.String(),
			Action:      nbdb.LogicalRouterPolicyActionReroute,
			Nexthops:    hops,
			ExternalIDs: ids.ExternalIDs(),
		}
		if own && len(hops) == 0 && r.Drop {
			// Same row (identity), other action: traffic inside the cluster is
			// allowed first by the no-reroute policies (priority 102).
			pol.Action, pol.Nexthops = nbdb.LogicalRouterPolicyActionDrop, nil
		}
		st.Policies[Key{Router: ClusterRouter, IDs: ids}] = pol
		if mode != gwmode.Shared {
			continue
		}
		for _, h := range r.SNAT {
			ids := IDs{OwnerType: OwnerEgressIP, Name: name, Rule: RuleSNAT, Family: fam, Pod: podKey,
				EgressIP: h.EgressIP.String()}
			st.NATs[Key{Router: GatewayRouter(h.Node), IDs: ids}] = &nbdb.NAT{
				Type:        nbdb.NATTypeSNAT,
				ExternalIP:  h.EgressIP.String(),
				LogicalIP:   ip.String(),
				ExternalIDs: ids.ExternalIDs(),
			}
		}
	}
	return served
}

// ClusterRows returns the rows shared by all EgressIPs, per family of the cluster
// subnets: no-reroute policies (priority 102, allow) pod-to-pod, pod-to-join (when
// a join subnet of that family is given) and pod-to-node, and the node-ips address
// set. The served-pods address sets are ServedPodsRow's.
func ClusterRows(in Input) State {
	st := NewState()
	for _, fam := range families(in.ClusterSubnets) {
		addClusterRows(&st, in, fam, nil)
		delete(st.AddressSets, ServedPodsKey(fam))
	}
	return st
}

// ServedPodsKey is the Key of the served-pods address set of a family.
func ServedPodsKey(fam string) Key {
	return Key{IDs: IDs{OwnerType: OwnerCluster, Rule: RuleServedPods, Family: fam}}
}

// ServedPodsRow is the served-pods address set of a family (addrs are not copied
// and must be sorted).
func ServedPodsRow(fam string, addrs []string) *nbdb.AddressSet {
	k := ServedPodsKey(fam)
	return &nbdb.AddressSet{Name: ServedPodsAddressSet(fam), Addresses: addrs, ExternalIDs: k.IDs.ExternalIDs()}
}

// Families returns the families of the prefixes, IPv4 first.
func Families(prefixes []netip.Prefix) []string { return families(prefixes) }

func addClusterRows(st *State, in Input, fam string, servedIPs []string) {
	cluster := prefixesOf(in.ClusterSubnets, fam)
	join := prefixesOf(in.JoinSubnets, fam)
	policy := func(rule, match string) {
		ids := IDs{OwnerType: OwnerCluster, Rule: rule, Family: fam}
		st.Policies[Key{Router: ClusterRouter, IDs: ids}] = &nbdb.LogicalRouterPolicy{
			Priority:    NoReroutePriority,
			Match:       match,
			Action:      nbdb.LogicalRouterPolicyActionAllow,
			ExternalIDs: ids.ExternalIDs(),
		}
	}
	policy(RulePodToPod, fmt.Sprintf("%s.src == %s && %s.dst == %s", fam, cluster, fam, cluster))
	if join != "" {
		policy(RulePodToJoin, fmt.Sprintf("%s.src == %s && %s.dst == %s", fam, cluster, fam, join))
	}
	policy(RulePodToNode, fmt.Sprintf("%s.src == $%s && %s.dst == $%s", fam, ServedPodsAddressSet(fam), fam, NodeIPsAddressSet(fam)))

	addressSet := func(rule, name string, addrs []string) {
		ids := IDs{OwnerType: OwnerCluster, Rule: rule, Family: fam}
		sort.Strings(addrs)
		st.AddressSets[Key{IDs: ids}] = &nbdb.AddressSet{Name: name, Addresses: addrs, ExternalIDs: ids.ExternalIDs()}
	}
	addressSet(RuleServedPods, ServedPodsAddressSet(fam), append([]string(nil), servedIPs...))
	addressSet(RuleNodeIPs, NodeIPsAddressSet(fam), nodeAddresses(in.Nodes, fam))
}

// nodeAddresses returns the distinct addresses of family fam of all nodes.
func nodeAddresses(nodes map[string]Node, fam string) []string {
	seen := map[netip.Addr]bool{}
	out := []string{}
	for _, n := range nodes {
		for _, a := range n.Addresses {
			a = a.Unmap()
			if Family(a) == fam && !seen[a] {
				seen[a] = true
				out = append(out, a.String())
			}
		}
	}
	return out
}

// families returns the families of the prefixes, IPv4 first.
func families(prefixes []netip.Prefix) []string {
	var has4, has6 bool
	for _, p := range prefixes {
		if p.Addr().Is4() {
			has4 = true
		} else {
			has6 = true
		}
	}
	var out []string
	if has4 {
		out = append(out, FamilyIPv4)
	}
	if has6 {
		out = append(out, FamilyIPv6)
	}
	return out
}

// prefixesOf renders the prefixes of family fam as an OVN match operand: a single
// prefix, or a {a, b} set; "" when there is none.
func prefixesOf(prefixes []netip.Prefix, fam string) string {
	var parts []string
	for _, p := range prefixes {
		if Family(p.Addr()) == fam {
			parts = append(parts, p.Masked().String())
		}
	}
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
