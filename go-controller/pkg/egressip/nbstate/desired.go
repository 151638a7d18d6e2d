package nbstate

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Mode is the gateway mode: it decides the reroute next hop and whether SNAT rows
// are written.
type Mode string

const (
	// SharedGateway: reroute to the egress node's gateway router join IP; SNAT on GR_<node>.
	SharedGateway Mode = "shared"
	// LocalGateway: reroute to the egress node's management port IP; the node does SNAT.
	LocalGateway Mode = "local"
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
}

// Key returns the pod's "namespace/name", the value of PodKey in external_ids.
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// EgressIP is one EgressIP with its assignments and the pods it serves
// (selection.ServedPods: a pod appears under one EgressIP only).
type EgressIP struct {
	Name     string
	Assigned []Assignment
	Pods     []Pod
	// Fallback (local gateway mode) are, per family, the next hops its pods keep
	// being rerouted to while no holder of that family is ready: the previous ready
	// holders during their release linger (the master decides for how long). Empty:
	// no reroute until a holder is ready.
	Fallback map[string][]netip.Addr
	// Strict (spec.strict): in a family with no route, the served pods' policy
	// drops instead of letting them leave with a node or gateway router address.
	Strict bool
}

// Input is everything Desired reads.
type Input struct {
	Mode Mode
	// ClusterSubnets are the pod networks (one or more per family in use).
	ClusterSubnets []netip.Prefix
	// JoinSubnets are the join switch networks (100.64.0.0/16, fd98::/64).
	JoinSubnets []netip.Prefix
	// EgressIPs in serving priority order (selection.Ordered); when two pods share an
	// IP the first one met keeps the rows.
	EgressIPs []EgressIP
	// Nodes are all nodes, by name.
	Nodes map[string]Node
}

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

// Desired computes the rows for in. With no EgressIP at all it is empty (not even
// the shared rows). Per family of the cluster subnets it holds the shared rows
// (ClusterRows). Per served pod, the rows of PodRows under its EgressIP's Routes;
// when two served pods share an IP, the first met (EgressIP order, then pod order)
// has the rows of that IP.
func Desired(in Input) State {
	st := NewState()
	if len(in.EgressIPs) == 0 {
		return st
	}
	served := map[string][]string{} // family -> served pod IPs
	claimed := map[netip.Addr]bool{}
	claim := func(ip netip.Addr) bool {
		if claimed[ip] {
			return false
		}
		claimed[ip] = true
		return true
	}
	for _, e := range in.EgressIPs {
		routes := Routes(in, e)
		for _, pod := range e.Pods {
			for _, ip := range addPodRows(&st, in.Mode, e.Name, routes, pod, claim) {
				served[Family(ip)] = append(served[Family(ip)], ip.String())
			}
		}
	}
	for _, fam := range families(in.ClusterSubnets) {
		addClusterRows(&st, in, fam, served[fam])
	}
	return st
}

// Holder is a node holding an egress IP, with its next hop.
type Holder struct {
	Node     string
	EgressIP netip.Addr
	Nexthop  netip.Addr
}

// Route is how the served pods of one EgressIP leave in one family: the reroute
// next hops (sorted) and, in shared gateway mode, the gateway routers that SNAT
// them (one per holder). Drop (strict EgressIPs with no holder) replaces the
// reroute with a drop: the pods' traffic leaving the cluster is dropped.
type Route struct {
	Nexthops []string
	SNAT     []Holder
	Drop     bool
}

// Equal reports whether two routes give the same rows.
func (r Route) Equal(o Route) bool {
	return r.Drop == o.Drop && slices.Equal(r.Nexthops, o.Nexthops) && slices.Equal(r.SNAT, o.SNAT)
}

// Routes returns, per family of the cluster subnets, how e's pods leave: reroute
// to the nodes holding an IP of e of that family that can be next hops (known node,
// next hop of that family; in local mode: the node lists the IP as ready), sorted by
// next hop, with one SNAT per holder in shared mode. In local mode a family with no
// ready holder falls back to e.Fallback. A family with neither has no route: its
// pods are not rerouted.
func Routes(in Input, e EgressIP) map[string]Route {
	out := map[string]Route{}
	clusterFamilies := families(in.ClusterSubnets)
	byFamily := map[string][]Holder{}
	for _, a := range e.Assigned {
		n, ok := in.Nodes[a.Node]
		if !ok {
			continue
		}
		candidates := n.JoinIPs
		if in.Mode == LocalGateway {
			candidates = n.ManagementIPs
		}
		for _, nh := range candidates {
			if nh.Is4() != a.IP.Is4() {
				continue
			}
			if in.Mode == LocalGateway && !n.ReadyEgressIPs[a.IP] {
				break
			}
			byFamily[Family(a.IP)] = append(byFamily[Family(a.IP)], Holder{Node: a.Node, EgressIP: a.IP, Nexthop: nh})
			break
		}
	}
	for _, fam := range clusterFamilies {
		hs := byFamily[fam]
		var r Route
		switch {
		case len(hs) > 0:
			sort.Slice(hs, func(i, j int) bool { return hs[i].Nexthop.Less(hs[j].Nexthop) })
			for _, h := range hs {
				r.Nexthops = append(r.Nexthops, h.Nexthop.String())
			}
			if in.Mode == SharedGateway {
				r.SNAT = hs
			}
		case in.Mode == LocalGateway && len(e.Fallback[fam]) > 0:
			for _, nh := range e.Fallback[fam] {
				r.Nexthops = append(r.Nexthops, nh.String())
			}
			slices.Sort(r.Nexthops)
			r.Nexthops = slices.Compact(r.Nexthops)
		case e.Strict:
			r.Drop = true
		default:
			continue
		}
		out[fam] = r
	}
	return out
}

// PodRows returns the rows of one pod served by EgressIP name, whose routes are
// Routes' result, and the pod IPs it serves: per family with a route, the pod's
// first IP of that family (when claim allows it: another pod may have it) gets a
// reroute policy (priority 100) on ovn_cluster_router and, in shared mode, one SNAT
// per holder on GR_<node>. claim is asked once per IP about to be served.
func PodRows(mode Mode, name string, routes map[string]Route, pod Pod, claim func(netip.Addr) bool) (State, []netip.Addr) {
	st := NewState()
	ips := addPodRows(&st, mode, name, routes, pod, claim)
	return st, ips
}

func addPodRows(st *State, mode Mode, name string, routes map[string]Route, pod Pod, claim func(netip.Addr) bool) []netip.Addr {
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
		if !ok || !claim(ip) {
			continue
		}
		served = append(served, ip)
		ids := IDs{OwnerType: OwnerEgressIP, Name: name, Rule: RuleReroute, Family: fam, Pod: podKey}
		pol := &nbdb.LogicalRouterPolicy{
			Priority:    ReroutePriority,
			Match:       fam + ".src == " + ip.String(),
			Action:      nbdb.LogicalRouterPolicyActionReroute,
			Nexthops:    r.Nexthops,
			ExternalIDs: ids.ExternalIDs(),
		}
		if r.Drop {
			// Same row (identity), other action: traffic inside the cluster is
			// allowed first by the no-reroute policies (priority 102).
			pol.Action, pol.Nexthops = nbdb.LogicalRouterPolicyActionDrop, nil
		}
		st.Policies[Key{Router: ClusterRouter, IDs: ids}] = pol
		if mode != SharedGateway {
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
