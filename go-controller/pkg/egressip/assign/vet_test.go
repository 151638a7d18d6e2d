package assign

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
)

func claim(node, status, primary string, hostCIDRs ...string) Claims {
	c := Claims{Node: node, EgressField: annotations.PrimaryIfAddr}
	if status != "" {
		c.Status = []netip.Addr{netip.MustParseAddr(status)}
	}
	if primary != "" {
		p := netip.MustParsePrefix(primary)
		if p.Addr().Is4() {
			c.Egress.V4 = p
		} else {
			c.Egress.V6 = p
		}
	}
	for _, h := range hostCIDRs {
		c.HostCIDRs = append(c.HostCIDRs, netip.MustParsePrefix(h))
	}
	return c
}

func withReady(c Claims, ips ...string) Claims {
	c.Ready = map[netip.Addr]bool{}
	for _, ip := range ips {
		c.Ready[netip.MustParseAddr(ip)] = true
	}
	return c
}

func doubtStrings(ds []Doubt) []string {
	var out []string
	for _, d := range ds {
		out = append(out, fmt.Sprintf("%s %s %s %s", d.Node, d.Field, d.IP, d.Reason))
	}
	return out
}

func TestVet(t *testing.T) {
	held := map[netip.Addr]string{netip.MustParseAddr("172.18.0.33"): "node2", netip.MustParseAddr("fd00::33"): "node2"}
	honest := []Claims{
		withReady(claim("node1", "172.18.0.11", "172.18.0.11/16", "172.18.0.11/16", "172.17.0.1/16")),
		withReady(claim("node2", "172.18.0.12", "172.18.0.12/16", "172.18.0.12/16", "172.17.0.1/16"), "172.18.0.33"),
	}
	tests := []struct {
		name   string
		claims []Claims
		want   []string
		// in: each want's message contains this
		msg string
	}{
		{name: "honest nodes sharing a bridge address and one network", claims: honest},
		{name: "a ready list naming an IP the node holds", claims: []Claims{
			withReady(claim("node2", "172.18.0.12", "172.18.0.12/16"), "172.18.0.33", "fd00::33")}},
		{name: "egress network address is another node's status address",
			claims: append(slices.Clone(honest), claim("node3", "172.18.0.13", "172.18.0.12/16")),
			want:   []string{"node3 k8s.ovn.org/node-primary-ifaddr 172.18.0.12 AddressOfAnotherNode"},
			msg:    "172.18.0.12 is node node2's address (its status.addresses); not used"},
		{name: "the node whose status lists the address is believed",
			claims: []Claims{claim("node2", "172.18.0.12", "172.18.0.12/16"), claim("node3", "", "172.18.0.12/16")},
			want:   []string{"node3 k8s.ovn.org/node-primary-ifaddr 172.18.0.12 AddressOfAnotherNode"}},
		{name: "two nodes claim one egress network address and no status says whose: both doubted",
			claims: []Claims{claim("node2", "", "10.0.0.5/24"), claim("node3", "", "10.0.0.5/24")},
			want: []string{"node2 k8s.ovn.org/node-primary-ifaddr 10.0.0.5 AddressOfAnotherNode",
				"node3 k8s.ovn.org/node-primary-ifaddr 10.0.0.5 AddressOfAnotherNode"}},
		{name: "a cloud egress network is named by its annotation", claims: func() []Claims {
			c := claim("node3", "172.18.0.13", "172.18.0.11/16")
			c.EgressField = annotations.EgressIPConfig
			return append(slices.Clone(honest), c)
		}(), want: []string{"node3 cloud.network.openshift.io/egress-ipconfig 172.18.0.11 AddressOfAnotherNode"}},
		{name: "host CIDR is another node's address",
			claims: append(slices.Clone(honest), claim("node3", "172.18.0.13", "172.18.0.13/16", "172.18.0.13/16", "172.18.0.11/16")),
			want:   []string{"node3 k8s.ovn.org/host-cidrs 172.18.0.11 AddressOfAnotherNode"}},
		{name: "host CIDR is an egress IP another node holds",
			claims: append(slices.Clone(honest), claim("node3", "172.18.0.13", "172.18.0.13/16", "172.18.0.33/16")),
			want:   []string{"node3 k8s.ovn.org/host-cidrs 172.18.0.33 AddressOfAnotherNode"},
			msg:    "172.18.0.33 is egress IP held by node node2; not used"},
		{name: "egress network address is an egress IP another node holds (IPv6)",
			claims: []Claims{claim("node3", "", "fd00::33/64")},
			want:   []string{"node3 k8s.ovn.org/node-primary-ifaddr fd00::33 AddressOfAnotherNode"}},
		{name: "ready list names an IP another node holds",
			claims: append(slices.Clone(honest), withReady(claim("node3", "172.18.0.13", "172.18.0.13/16"), "172.18.0.33")),
			want:   []string{"node3 k8s.ovn.org/egress-ips-ready 172.18.0.33 ReadyEgressIPNotHeld"},
			msg:    "lists 172.18.0.33, which node node2 holds; not used"},
		{name: "ready list names an IP nobody holds",
			claims: []Claims{withReady(claim("node3", "172.18.0.13", "172.18.0.13/16"), "172.18.0.99")},
			want:   []string{"node3 k8s.ovn.org/egress-ips-ready 172.18.0.99 ReadyEgressIPNotHeld"},
			msg:    "assigned to no node"},
		{name: "one doubt per claim although two nodes own the address",
			claims: []Claims{claim("node1", "10.0.0.5", ""), claim("node2", "10.0.0.5", ""), claim("node3", "", "10.0.0.5/24", "10.0.0.5/24")},
			want: []string{"node3 k8s.ovn.org/host-cidrs 10.0.0.5 AddressOfAnotherNode",
				"node3 k8s.ovn.org/node-primary-ifaddr 10.0.0.5 AddressOfAnotherNode"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Vet(tc.claims, held)
			if g := doubtStrings(got); !slices.Equal(g, tc.want) {
				t.Errorf("Vet:\n got %q\nwant %q", g, tc.want)
			}
			for _, d := range got {
				if !strings.Contains(d.Message, d.Node) || !strings.Contains(d.Message, d.Field) || !strings.Contains(d.Message, tc.msg) {
					t.Errorf("message %q does not name node, field and %q", d.Message, tc.msg)
				}
			}
		})
	}
}

func TestDistrustTakesAwayTheDoubtedNetworkAndAddresses(t *testing.T) {
	n := Node{Name: "node3", Labelled: true, Ready: true, Reachable: true,
		Egress: annotations.EgressConfig{Network: annotations.DualPrefix{
			V4: netip.MustParsePrefix("172.18.0.12/16"), V6: netip.MustParsePrefix("fd00::13/64")}},
		Addresses: []netip.Addr{netip.MustParseAddr("172.18.0.13"), netip.MustParseAddr("172.18.0.12"),
			netip.MustParseAddr("fd00::13"), netip.MustParseAddr("172.18.0.33")}}
	doubts := []Doubt{
		{Node: "node3", Field: annotations.PrimaryIfAddr, IP: netip.MustParseAddr("172.18.0.12"), Reason: AddressOfAnotherNode},
		{Node: "node3", Field: annotations.HostCIDRs, IP: netip.MustParseAddr("172.18.0.33"), Reason: AddressOfAnotherNode},
		{Node: "node3", Field: annotations.EgressIPsReady, IP: netip.MustParseAddr("fd00::13"), Reason: ReadyEgressIPNotHeld},
		{Node: "node2", Field: annotations.PrimaryIfAddr, IP: netip.MustParseAddr("fd00::13"), Reason: AddressOfAnotherNode},
	}
	orig := slices.Clone(n.Addresses)
	got := Distrust(n, doubts)
	if got.Egress.Network.V4.IsValid() || got.Egress.Network.V6 != n.Egress.Network.V6 {
		t.Errorf("egress network after Distrust: %+v, want IPv4 gone and IPv6 kept", got.Egress.Network)
	}
	if want := []netip.Addr{netip.MustParseAddr("172.18.0.13"), netip.MustParseAddr("fd00::13")}; !slices.Equal(got.Addresses, want) {
		t.Errorf("addresses after Distrust: %v, want %v", got.Addresses, want)
	}
	if !slices.Equal(n.Addresses, orig) {
		t.Errorf("Distrust changed its input's addresses: %v", n.Addresses)
	}
	if !got.Eligible() {
		t.Error("node with a trusted IPv6 network is not eligible")
	}
	// Placement: the IPv4 egress IP in the doubted network goes to no node.
	res := Assign([]EgressIP{{Name: "e", Spec: []string{"172.18.0.44"}}}, []Node{got})
	if len(res.Status["e"]) != 0 {
		t.Errorf("172.18.0.44 placed on %v through a doubted egress network", res.Status["e"])
	}
}
