package annotations

import (
	"encoding/json"
	"fmt"
	"math/big"
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// Node facts of the OVN Interconnect layout (one zone per node), written by the rest of OVN-Kubernetes (its
// cluster manager's node allocator) and read by every zone controller.
const (
	// NodeID is the node's integer id: the tunnel key of its transit switch port, and the index of its gateway
	// router's join address in the join subnet (node-id 2: 100.64.0.2).
	NodeID = "k8s.ovn.org/node-id"
	// NodeTransitSwitchPortIfAddr is JSON {"ipv4":"100.88.0.3/16","ipv6":"fd97::3/64"}: the node's address on the
	// transit switch, the next hop other zones reroute to when this node holds an egress IP.
	NodeTransitSwitchPortIfAddr = "k8s.ovn.org/node-transit-switch-port-ifaddr"
	// NodeChassisID is the node's OVS system-id (its chassis in every zone's southbound database).
	NodeChassisID = "k8s.ovn.org/node-chassis-id"
	// NodeEncapIPs is a JSON list of the node's tunnel endpoint IPs.
	NodeEncapIPs = "k8s.ovn.org/node-encap-ips"

	// EgressIPsSNATReady is, in the interconnect layout, the JSON list of the egress IPs (as EgressIPsReady) that
	// this node holds and whose rows its zone controller has committed for every pod the IP serves at that commit:
	// in shared gateway mode the SNAT rows on its gateway router; in local gateway mode, once the node daemon lists
	// the IP in EgressIPsReady, the reroutes to its management port; and that its chassis has applied (NB_Global's
	// hv_cfg has reached the nb_cfg that commit set: nbstate.CommitPlanSeq). Other zones reroute to this node's transit
	// switch IP for an egress IP only once it is listed here (local gateway mode: here and in EgressIPsReady):
	// make-before-break across zones. Written by the zone controller.
	EgressIPsSNATReady = "k8s.ovn.org/egress-ips-snat-ready"
	// EgressIPsLingering is the JSON list of the egress IPs this node no longer holds but still SNATs (the release
	// linger), with the end of each in EgressIPsLingeringUntil (ParseLingering). In the interconnect layout and
	// shared gateway mode it is written by the zone controller, whose SNAT rows those are: a zone whose pods have no
	// ready holder for an IP reroutes them to a node listing it here until the end it published; the zone keeps its
	// rows, and the IP listed, until a grace after that end (nbstate.KeepsRows). In local gateway mode the node
	// daemon writes it.
	EgressIPsLingering = "k8s.ovn.org/egress-ips-lingering"
)

// ParseNodeID reads NodeID: a positive integer.
func ParseNodeID(node *corev1.Node) (int, error) {
	v, ok := node.Annotations[NodeID]
	if !ok {
		return 0, fmt.Errorf("annotation %s is missing", NodeID)
	}
	id, err := strconv.Atoi(v)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("annotation %s: %q is not a positive integer", NodeID, v)
	}
	return id, nil
}

// JoinIPForNodeID is the gateway router's join address of the node with id: the id-th address of the join subnet
// (100.64.0.0/16, id 2: 100.64.0.2). ok is false when id does not fit in the subnet.
func JoinIPForNodeID(join netip.Prefix, id int) (netip.Addr, bool) {
	join = join.Masked()
	bits := join.Addr().BitLen()
	hostBits := bits - join.Bits()
	if id <= 0 || (hostBits < 63 && int64(id) >= int64(1)<<hostBits) {
		return netip.Addr{}, false
	}
	base := new(big.Int).SetBytes(join.Addr().AsSlice())
	sum := base.Add(base, big.NewInt(int64(id))).Bytes()
	buf := make([]byte, bits/8)
	copy(buf[len(buf)-len(sum):], sum)
	a, ok := netip.AddrFromSlice(buf)
	if !ok || !join.Contains(a) {
		return netip.Addr{}, false
	}
	return a, true
}

// GatewayRouterJoinIPs returns the node's gateway router join IPs, one per join subnet: derived from NodeID when the
// node has one (as OVN-Kubernetes does since the interconnect layout); otherwise, when fallback is set (the
// centralized layout), read from the deprecated GatewayRouterLRPIfAddr. Errors name the annotation.
func GatewayRouterJoinIPs(node *corev1.Node, joins []netip.Prefix, fallback bool) ([]netip.Addr, error) {
	if _, has := node.Annotations[NodeID]; has || !fallback {
		id, err := ParseNodeID(node)
		if err != nil {
			return nil, err
		}
		var out []netip.Addr
		for _, j := range joins {
			a, ok := JoinIPForNodeID(j, id)
			if !ok {
				return nil, fmt.Errorf("annotation %s: node id %d is outside the join subnet %s", NodeID, id, j)
			}
			out = append(out, a)
		}
		return out, nil
	}
	gr, err := ParseGatewayRouterIPs(node)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, p := range gr.Prefixes() {
		out = append(out, p.Addr())
	}
	return out, nil
}

// ParseTransitIPs reads NodeTransitSwitchPortIfAddr: the node's transit switch addresses, IPv4 first.
func ParseTransitIPs(node *corev1.Node) ([]netip.Addr, error) {
	v, ok := node.Annotations[NodeTransitSwitchPortIfAddr]
	if !ok {
		return nil, fmt.Errorf("annotation %s is missing", NodeTransitSwitchPortIfAddr)
	}
	d, err := ParseIfAddr(v)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w", NodeTransitSwitchPortIfAddr, err)
	}
	var out []netip.Addr
	for _, p := range d.Prefixes() {
		out = append(out, p.Addr())
	}
	return out, nil
}

// ParseEncapIPs reads NodeEncapIPs: a JSON list of IP addresses (at least one).
func ParseEncapIPs(node *corev1.Node) ([]netip.Addr, error) {
	v, ok := node.Annotations[NodeEncapIPs]
	if !ok {
		return nil, fmt.Errorf("annotation %s is missing", NodeEncapIPs)
	}
	var list []string
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return nil, fmt.Errorf("annotation %s: not a JSON list of IP addresses: %w", NodeEncapIPs, err)
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("annotation %s: empty list", NodeEncapIPs)
	}
	out := make([]netip.Addr, 0, len(list))
	for _, s := range list {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", NodeEncapIPs, err)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// ParseIPList reads annotation key of node as a JSON list of IP addresses (the shape of EgressIPsReady,
// EgressIPsSNATReady and EgressIPsLingering). Absent: an empty set, nil. Unparsable: an empty set and an error naming
// the annotation.
func ParseIPList(node *corev1.Node, key string) (map[netip.Addr]bool, error) {
	out := map[netip.Addr]bool{}
	v, ok := node.Annotations[key]
	if !ok {
		return out, nil
	}
	var list []string
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return map[netip.Addr]bool{}, fmt.Errorf("annotation %s: not a JSON list of IP addresses: %w", key, err)
	}
	for _, s := range list {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return map[netip.Addr]bool{}, fmt.Errorf("annotation %s: %w", key, err)
		}
		out[ip.Unmap()] = true
	}
	return out, nil
}
