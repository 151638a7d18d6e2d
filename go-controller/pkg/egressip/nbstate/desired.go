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
	// nil means the node does not take part in the handshake (its daemon predates
	// it): every IP it holds counts as ready, as before the handshake existed.
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

// EgressIP is one EgressIP with its assignments and the pods it serves
// (selection.ServedPods: a pod appears under one EgressIP only).
type EgressIP struct {
	Name     string
	Assigned []Assignment
	Pods     []Pod
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
	// Keep (desired states only) names rows that must stay as they are in NB,
	// if they exist: reroute policies whose new holder is not ready yet in local
	// gateway mode keep pointing at the previous one until it is.
	Keep map[Key]bool
}

// NewState returns an empty State.
func NewState() State {
	return State{
		Policies:    map[Key]*nbdb.LogicalRouterPolicy{},
		NATs:        map[Key]*nbdb.NAT{},
		AddressSets: map[Key]*nbdb.AddressSet{},
		Keep:        map[Key]bool{},
	}
}

// Len is the number of rows.
func (s State) Len() int { return len(s.Policies) + len(s.NATs) + len(s.AddressSets) }

// Desired computes the rows for in. With no EgressIP at all it is empty (not even
// the shared rows). Per family of the cluster subnets it holds the shared rows:
// no-reroute policies (priority 102, allow) pod-to-pod, pod-to-join (when a join
// subnet of that family is given) and pod-to-node, and the served-pods and node-ips
// address sets. Per served pod IP of a cluster subnet family in which its EgressIP
// has assigned IPs on nodes with a next hop: one reroute policy (priority 100) on ovn_cluster_router
// whose nexthops are those nodes' join IPs (shared) or management IPs (local),
// sorted; in shared mode also one SNAT row per such node on GR_<node>. In local
// mode only holders whose node lists the IP in ReadyEgressIPs count; when an
// EgressIP has holders of a family but none is ready, its reroute policies of that
// family are in State.Keep (left as they are until a holder is ready).
func Desired(in Input) State {
	st := NewState()
	if len(in.EgressIPs) == 0 {
		return st
	}
	served := map[string][]string{} // family -> served pod IPs
	claimed := map[netip.Addr]bool{}
	clusterFamilies := families(in.ClusterSubnets)
	for _, e := range in.EgressIPs {
		addEgressIP(&st, in, e, clusterFamilies, claimed, served)
	}
	for _, fam := range clusterFamilies {
		addClusterRows(&st, in, fam, served[fam])
	}
	return st
}

// holder is a node holding an egress IP of an EgressIP, with its next hop.
type holder struct {
	node     string
	egressIP netip.Addr
	nexthop  netip.Addr
}

// holders returns, per family, the nodes holding an IP of e of that family that
// can be next hops (known node, next hop of that family, in local mode: the IP is
// ready there), sorted by next hop; and the families with holders none of which
// is ready yet.
func holders(in Input, e EgressIP) (map[string][]holder, map[string]bool) {
	out := map[string][]holder{}
	pending := map[string]bool{}
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
			if in.Mode == LocalGateway && n.ReadyEgressIPs != nil && !n.ReadyEgressIPs[a.IP] {
				pending[Family(a.IP)] = true
				break
			}
			out[Family(a.IP)] = append(out[Family(a.IP)], holder{node: a.Node, egressIP: a.IP, nexthop: nh})
			break
		}
	}
	for fam, hs := range out {
		sort.Slice(hs, func(i, j int) bool { return hs[i].nexthop.Less(hs[j].nexthop) })
		delete(pending, fam)
	}
	return out, pending
}

func addEgressIP(st *State, in Input, e EgressIP, clusterFamilies []string, claimed map[netip.Addr]bool, served map[string][]string) {
	byFamily, pending := holders(in, e)
	// No cluster subnet of a family: without its no-reroute policies, pod-to-pod
	// traffic would be rerouted too. Serve nothing in it.
	for fam := range byFamily {
		if !slices.Contains(clusterFamilies, fam) {
			delete(byFamily, fam)
		}
	}
	for fam := range pending {
		if !slices.Contains(clusterFamilies, fam) {
			delete(pending, fam)
		}
	}
	for _, pod := range e.Pods {
		podKey := pod.Namespace + "/" + pod.Name
		seenFamily := map[string]bool{}
		for _, ip := range pod.IPs {
			fam := Family(ip)
			hs := byFamily[fam]
			if (len(hs) == 0 && !pending[fam]) || seenFamily[fam] || claimed[ip] {
				continue
			}
			seenFamily[fam] = true
			claimed[ip] = true
			served[fam] = append(served[fam], ip.String())
			if len(hs) == 0 { // holders, none ready: leave the current reroute, if any
				ids := IDs{OwnerType: OwnerEgressIP, Name: e.Name, Rule: RuleReroute, Family: fam, Pod: podKey}
				st.Keep[Key{Router: ClusterRouter, IDs: ids}] = true
				continue
			}
			nexthops := make([]string, len(hs))
			for i, h := range hs {
				nexthops[i] = h.nexthop.String()
			}
			ids := IDs{OwnerType: OwnerEgressIP, Name: e.Name, Rule: RuleReroute, Family: fam, Pod: podKey}
			st.Policies[Key{Router: ClusterRouter, IDs: ids}] = &nbdb.LogicalRouterPolicy{
				Priority:    ReroutePriority,
				Match:       fmt.Sprintf("%s.src == %s", fam, ip),
				Action:      nbdb.LogicalRouterPolicyActionReroute,
				Nexthops:    nexthops,
				ExternalIDs: ids.ExternalIDs(),
			}
			if in.Mode != SharedGateway {
				continue
			}
			for _, h := range hs {
				ids := IDs{OwnerType: OwnerEgressIP, Name: e.Name, Rule: RuleSNAT, Family: fam, Pod: podKey,
					Node: h.node, EgressIP: h.egressIP.String()}
				st.NATs[Key{Router: GatewayRouter(h.node), IDs: ids}] = &nbdb.NAT{
					Type:        nbdb.NATTypeSNAT,
					ExternalIP:  h.egressIP.String(),
					LogicalIP:   ip.String(),
					ExternalIDs: ids.ExternalIDs(),
				}
			}
		}
	}
}

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
