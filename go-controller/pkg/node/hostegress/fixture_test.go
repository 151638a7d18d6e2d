package hostegress

import (
	"net/netip"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

// addrOn and snatOn: the desired address and SNAT rule of egress IP eip (of EgressIP name) on testHost's eth0
// (index 2, the default route's interface) or eth1 (index 3, policy routed).
func addrOn(link, eip, name string) Address {
	return Address{IP: ma(eip), LinkIndex: linkIndex(link), Link: link, EgressIP: name}
}

func snatOn(link, podIP, eip, name string) SNAT {
	return SNAT{PodIP: ma(podIP), EgressIPAddr: ma(eip), Link: link, EgressIP: name}
}

func linkIndex(link string) int {
	if link == "eth1" {
		return 3
	}
	return 2
}

// heldAB is the node TestReleaseAndMerge and TestUnservedAndMerge start from: it holds egress IP A (172.18.0.50 of
// EgressIP "a", on eth0, the default interface) for pod1 and pod2, and B (192.168.50.50 of "b", on eth1: policy
// routing in table TableBase+3) for pod3.
type heldAB struct {
	eipA, eipB       netip.Addr
	pod1, pod2, pod3 netip.Addr
	addrA, addrB     Address
	rtB              Route
}

func newHeldAB() heldAB {
	return heldAB{
		eipA: ma("172.18.0.50"), eipB: ma("192.168.50.50"),
		pod1: ma("10.244.1.3"), pod2: ma("10.244.2.3"), pod3: ma("10.244.3.3"),
		addrA: addrOn("eth0", "172.18.0.50", "a"), addrB: addrOn("eth1", "192.168.50.50", "b"),
		rtB: Route{Table: TableBase + 3, Route: hostinfo.Route{Dst: mp("192.168.50.0/24"), LinkIndex: 3, Scope: 253}},
	}
}

// snatA and snatB: pod's SNAT rule to A (on eth0) or to B (on eth1); ruleB: its ip rule into B's table.
func (f heldAB) snatA(pod netip.Addr) SNAT {
	return SNAT{PodIP: pod, EgressIPAddr: f.eipA, Link: "eth0", EgressIP: "a"}
}

func (f heldAB) snatB(pod netip.Addr) SNAT {
	return SNAT{PodIP: pod, EgressIPAddr: f.eipB, Link: "eth1", EgressIP: "b"}
}

func (f heldAB) ruleB(pod netip.Addr) Rule { return Rule{PodIP: pod, Table: TableBase + 3} }

// state: the node's state before anything moved (A for pod1 and pod2, B for pod3), without owners.
func (f heldAB) state() State {
	return State{
		Addresses: []Address{f.addrA, f.addrB},
		SNAT:      []SNAT{f.snatA(f.pod1), f.snatA(f.pod2), f.snatB(f.pod3)},
		Rules:     []Rule{f.ruleB(f.pod3)},
		Routes:    []Route{f.rtB},
	}
}

// served: pod IP podIP served by egress IP eip of EgressIP name.
type served struct{ podIP, eip, name string }

// servedOn: the desired state of egress IPs on link (no policy routing), each serving one pod IP, in order.
func servedOn(link string, s ...served) State {
	var st State
	for _, x := range s {
		st.Addresses = append(st.Addresses, addrOn(link, x.eip, x.name))
		st.SNAT = append(st.SNAT, snatOn(link, x.podIP, x.eip, x.name))
	}
	return st
}
