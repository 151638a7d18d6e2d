package hostegress

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

func TestReleaseAndMerge(t *testing.T) {
	ip := netip.MustParseAddr
	eipA, eipB := ip("172.18.0.50"), ip("192.168.50.50")
	pod1, pod2, pod3 := ip("10.244.1.3"), ip("10.244.2.3"), ip("10.244.3.3")
	addrA := Address{IP: eipA, LinkIndex: 2, Link: "eth0", EgressIP: "a"}
	addrB := Address{IP: eipB, LinkIndex: 3, Link: "eth1", EgressIP: "b"}
	snat := func(pod, eip netip.Addr, link, name string) SNAT {
		return SNAT{PodIP: pod, EgressIPAddr: eip, Link: link, EgressIP: name}
	}
	rtB := Route{Table: TableBase + 3, Route: hostinfo.Route{Dst: netip.MustParsePrefix("192.168.50.0/24"), LinkIndex: 3, Scope: 253}}
	// Node holds A (default interface) for pod1, pod2 and B (eth1: policy routing) for pod3.
	prev := State{
		Addresses: []Address{addrA, addrB},
		SNAT:      []SNAT{snat(pod1, eipA, "eth0", "a"), snat(pod2, eipA, "eth0", "a"), snat(pod3, eipB, "eth1", "b")},
		Rules:     []Rule{{PodIP: pod3, Table: TableBase + 3}},
		Routes:    []Route{rtB},
	}

	tests := []struct {
		name         string
		next         State
		wantReleased map[netip.Addr]Released
		wantMerged   State
	}{
		{
			name:         "nothing moved",
			next:         prev,
			wantReleased: map[netip.Addr]Released{},
			wantMerged:   prev,
		},
		{
			name: "A moved away: its SNAT rules stay, its address goes",
			next: State{Addresses: []Address{addrB}, SNAT: []SNAT{snat(pod3, eipB, "eth1", "b")},
				Rules: []Rule{{PodIP: pod3, Table: TableBase + 3}}, Routes: []Route{rtB}},
			wantReleased: map[netip.Addr]Released{eipA: {SNAT: []SNAT{snat(pod1, eipA, "eth0", "a"), snat(pod2, eipA, "eth0", "a")}}},
			wantMerged: State{Addresses: []Address{addrB},
				SNAT:  []SNAT{snat(pod1, eipA, "eth0", "a"), snat(pod2, eipA, "eth0", "a"), snat(pod3, eipB, "eth1", "b")},
				Rules: []Rule{{PodIP: pod3, Table: TableBase + 3}}, Routes: []Route{rtB}},
		},
		{
			name:         "B (policy routed) moved away: SNAT, ip rule and table routes stay",
			next:         State{Addresses: []Address{addrA}, SNAT: []SNAT{snat(pod1, eipA, "eth0", "a"), snat(pod2, eipA, "eth0", "a")}},
			wantReleased: map[netip.Addr]Released{eipB: {SNAT: []SNAT{snat(pod3, eipB, "eth1", "b")}, Rules: []Rule{{PodIP: pod3, Table: TableBase + 3}}, Routes: []Route{rtB}}},
			wantMerged: State{Addresses: []Address{addrA},
				SNAT:  []SNAT{snat(pod1, eipA, "eth0", "a"), snat(pod2, eipA, "eth0", "a"), snat(pod3, eipB, "eth1", "b")},
				Rules: []Rule{{PodIP: pod3, Table: TableBase + 3}}, Routes: []Route{rtB}},
		},
		{
			name: "A moved away and pod2 is now served here by B: the new rule wins for pod2",
			next: State{Addresses: []Address{addrB}, SNAT: []SNAT{snat(pod2, eipB, "eth1", "b"), snat(pod3, eipB, "eth1", "b")},
				Rules: []Rule{{PodIP: pod2, Table: TableBase + 3}, {PodIP: pod3, Table: TableBase + 3}}, Routes: []Route{rtB}},
			wantReleased: map[netip.Addr]Released{eipA: {SNAT: []SNAT{snat(pod1, eipA, "eth0", "a"), snat(pod2, eipA, "eth0", "a")}}},
			wantMerged: State{Addresses: []Address{addrB},
				SNAT:  []SNAT{snat(pod1, eipA, "eth0", "a"), snat(pod2, eipB, "eth1", "b"), snat(pod3, eipB, "eth1", "b")},
				Rules: []Rule{{PodIP: pod2, Table: TableBase + 3}, {PodIP: pod3, Table: TableBase + 3}}, Routes: []Route{rtB}},
		},
		{
			name:         "everything moved away: no address, all rules stay",
			next:         State{},
			wantReleased: map[netip.Addr]Released{eipA: {SNAT: []SNAT{snat(pod1, eipA, "eth0", "a"), snat(pod2, eipA, "eth0", "a")}}, eipB: {SNAT: []SNAT{snat(pod3, eipB, "eth1", "b")}, Rules: []Rule{{PodIP: pod3, Table: TableBase + 3}}, Routes: []Route{rtB}}},
			wantMerged:   State{SNAT: prev.SNAT, Rules: prev.Rules, Routes: prev.Routes},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Release(prev, tc.next)
			if !reflect.DeepEqual(got, tc.wantReleased) {
				t.Fatalf("Release:\n got  %+v\n want %+v", got, tc.wantReleased)
			}
			var rel []Released
			for _, r := range got {
				rel = append(rel, r)
			}
			merged := Merge(tc.next, rel...)
			if !reflect.DeepEqual(norm(merged), norm(tc.wantMerged)) {
				t.Fatalf("Merge:\n got  %+v\n want %+v", merged, tc.wantMerged)
			}
			if again := Merge(merged, rel...); !reflect.DeepEqual(norm(again), norm(merged)) {
				t.Fatalf("Merge is not idempotent:\n %+v\n %+v", again, merged)
			}
		})
	}
	// Held again (moved back): the released state adds nothing.
	rel := Release(prev, State{})
	if got := Merge(prev, rel[eipA], rel[eipB]); !reflect.DeepEqual(norm(got), norm(prev)) {
		t.Fatalf("Merge over a state that holds both again:\n got  %+v\n want %+v", got, prev)
	}
}

// norm makes empty and nil slices equal for comparison.
func norm(s State) State {
	if len(s.Addresses) == 0 {
		s.Addresses = nil
	}
	if len(s.SNAT) == 0 {
		s.SNAT = nil
	}
	if len(s.Rules) == 0 {
		s.Rules = nil
	}
	if len(s.Routes) == 0 {
		s.Routes = nil
	}
	return s
}
