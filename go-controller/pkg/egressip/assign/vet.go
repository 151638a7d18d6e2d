package assign

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
)

// What a node publishes about itself is believed only when it can be true. Vet
// finds the claims that cannot: a node's egress network address (node-primary-ifaddr
// or the cloud egress-ipconfig) or one of its host CIDRs that is another node's
// address, and an egress IP the node lists as ready although it does not hold it.
// The master then does not use such a claim (see Doubt) and reports it.

// Reasons of the Doubts (used as Event reasons on the Node).
const (
	// AddressOfAnotherNode: the address is another node's (in that node's
	// status.addresses or egress network), or an egress IP another node holds.
	AddressOfAnotherNode Reason = "AddressOfAnotherNode"
	// ReadyEgressIPNotHeld: the node lists as ready an egress IP that no status
	// item assigns to it.
	ReadyEgressIPNotHeld Reason = "ReadyEgressIPNotHeld"
)

// Claims is what one Node says about its addresses, parsed.
type Claims struct {
	Node string
	// Status are the InternalIP/ExternalIP addresses of status.addresses.
	Status []netip.Addr
	// Egress is the egress network the node offers (address with host bits), and
	// EgressField the annotation it comes from (annotations.PrimaryIfAddr or
	// annotations.EgressIPConfig); zero when absent or unparsable.
	Egress      annotations.DualPrefix
	EgressField string
	// HostCIDRs are the host CIDRs it publishes (annotations.HostCIDRs).
	HostCIDRs []netip.Prefix
	// Ready are the egress IPs it lists as ready (annotations.EgressIPsReady).
	Ready map[netip.Addr]bool
}

// Doubt is one claim that cannot be true. The claim is not to be used: an egress
// network (Field is PrimaryIfAddr or EgressIPConfig) is not offered for IP's
// family, an address (egress network or HostCIDRs) is not the node's, a ready IP
// is not ready.
type Doubt struct {
	Node string
	// Field is the annotation that carries the claim.
	Field string
	// IP is the address claimed (the egress network's address, a host CIDR's
	// address, or the egress IP listed as ready).
	IP      netip.Addr
	Reason  Reason
	Message string
}

// Vet returns the claims of nodes that cannot be true, sorted by node, field and
// IP. holders maps each egress IP in some EgressIP's status to the node holding it.
//
// An address (egress network or host CIDR) of node N is doubted when it is not in
// N's own status.addresses and it is in another node's status.addresses, or is
// another node's egress network address, or is an egress IP another node holds.
// Host CIDRs are not compared with each other: nodes may share an address (a
// container bridge on every node, a VIP). When two nodes publish the same egress
// network address and neither status lists it, both are doubted: which one lies
// cannot be told. A ready egress IP is doubted when holders does not give it to N.
func Vet(claims []Claims, holders map[netip.Addr]string) []Doubt {
	// Who says an address is theirs: status (the kubelet's word) and egress network.
	type owner struct{ node, field string }
	owners := map[netip.Addr][]owner{}
	for _, c := range claims {
		for _, a := range c.Status {
			owners[a.Unmap()] = append(owners[a.Unmap()], owner{c.Node, "status.addresses"})
		}
		for _, p := range c.Egress.Prefixes() {
			owners[p.Addr().Unmap()] = append(owners[p.Addr().Unmap()], owner{c.Node, c.EgressField})
		}
	}
	var out []Doubt
	check := func(c Claims, field string, a netip.Addr) {
		a = a.Unmap()
		if slices.Contains(c.Status, a) {
			return // the node's own status lists it
		}
		if h, ok := holders[a]; ok && h != c.Node {
			out = append(out, Doubt{Node: c.Node, Field: field, IP: a, Reason: AddressOfAnotherNode,
				Message: fmt.Sprintf("node %s: annotation %s: %s is egress IP held by node %s; not used", c.Node, field, a, h)})
			return
		}
		for _, o := range owners[a] {
			if o.node != c.Node {
				out = append(out, Doubt{Node: c.Node, Field: field, IP: a, Reason: AddressOfAnotherNode,
					Message: fmt.Sprintf("node %s: annotation %s: %s is node %s's address (its %s); not used", c.Node, field, a, o.node, o.field)})
				return
			}
		}
	}
	for _, c := range claims {
		for _, p := range c.Egress.Prefixes() {
			check(c, c.EgressField, p.Addr())
		}
		for _, p := range c.HostCIDRs {
			check(c, annotations.HostCIDRs, p.Addr())
		}
		for ip, ok := range c.Ready {
			if !ok {
				continue
			}
			ip = ip.Unmap()
			switch h, held := holders[ip]; {
			case !held:
				out = append(out, Doubt{Node: c.Node, Field: annotations.EgressIPsReady, IP: ip, Reason: ReadyEgressIPNotHeld,
					Message: fmt.Sprintf("node %s: annotation %s lists %s, which is assigned to no node; not used", c.Node, annotations.EgressIPsReady, ip)})
			case h != c.Node:
				out = append(out, Doubt{Node: c.Node, Field: annotations.EgressIPsReady, IP: ip, Reason: ReadyEgressIPNotHeld,
					Message: fmt.Sprintf("node %s: annotation %s lists %s, which node %s holds; not used", c.Node, annotations.EgressIPsReady, ip, h)})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Node != b.Node {
			return a.Node < b.Node
		}
		if a.Field != b.Field {
			return a.Field < b.Field
		}
		return a.IP.Less(b.IP)
	})
	return slices.CompactFunc(out, func(a, b Doubt) bool { return a.Node == b.Node && a.Field == b.Field && a.IP == b.IP })
}

// Distrust returns n without the claims of doubts that concern it: an egress
// network that is another node's no longer makes n eligible for its family, and
// doubted addresses are no longer n's (so they block no egress IP).
func Distrust(n Node, doubts []Doubt) Node {
	drop := map[netip.Addr]bool{}
	for _, d := range doubts {
		if d.Node != n.Name || d.Reason != AddressOfAnotherNode {
			continue
		}
		drop[d.IP] = true
		if d.Field == annotations.PrimaryIfAddr || d.Field == annotations.EgressIPConfig {
			if d.IP.Is4() && n.Egress.Network.V4.Addr() == d.IP {
				n.Egress.Network.V4 = netip.Prefix{}
			}
			if d.IP.Is6() && n.Egress.Network.V6.Addr() == d.IP {
				n.Egress.Network.V6 = netip.Prefix{}
			}
		}
	}
	if len(drop) > 0 {
		n.Addresses = slices.DeleteFunc(slices.Clone(n.Addresses), func(a netip.Addr) bool { return drop[a] })
	}
	return n
}
