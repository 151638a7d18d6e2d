package hostegress

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

func TestReleaseAndMerge(t *testing.T) {
	f := newHeldAB()
	eipA, eipB, pod1, pod2, pod3 := f.eipA, f.eipB, f.pod1, f.pod2, f.pod3
	// Node holds A (default interface) for pod1, pod2 and B (eth1: policy routing) for pod3.
	prev := f.state()
	releasedA := Released{SNAT: []SNAT{f.snatA(pod1), f.snatA(pod2)}}
	releasedB := Released{SNAT: []SNAT{f.snatB(pod3)}, Rules: []Rule{f.ruleB(pod3)}, Routes: []Route{f.rtB}}

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
			next: State{Addresses: []Address{f.addrB}, SNAT: []SNAT{f.snatB(pod3)},
				Rules: []Rule{f.ruleB(pod3)}, Routes: []Route{f.rtB}},
			wantReleased: map[netip.Addr]Released{eipA: releasedA},
			wantMerged: State{Addresses: []Address{f.addrB}, SNAT: prev.SNAT,
				Rules: []Rule{f.ruleB(pod3)}, Routes: []Route{f.rtB}},
		},
		{
			name:         "B (policy routed) moved away: SNAT, ip rule and table routes stay",
			next:         State{Addresses: []Address{f.addrA}, SNAT: []SNAT{f.snatA(pod1), f.snatA(pod2)}},
			wantReleased: map[netip.Addr]Released{eipB: releasedB},
			wantMerged: State{Addresses: []Address{f.addrA}, SNAT: prev.SNAT,
				Rules: []Rule{f.ruleB(pod3)}, Routes: []Route{f.rtB}},
		},
		{
			name: "A moved away and pod2 is now served here by B: the new rule wins for pod2",
			next: State{Addresses: []Address{f.addrB}, SNAT: []SNAT{f.snatB(pod2), f.snatB(pod3)},
				Rules: []Rule{f.ruleB(pod2), f.ruleB(pod3)}, Routes: []Route{f.rtB}},
			wantReleased: map[netip.Addr]Released{eipA: releasedA},
			wantMerged: State{Addresses: []Address{f.addrB},
				SNAT:  []SNAT{f.snatA(pod1), f.snatB(pod2), f.snatB(pod3)},
				Rules: []Rule{f.ruleB(pod2), f.ruleB(pod3)}, Routes: []Route{f.rtB}},
		},
		{
			name:         "everything moved away: no address, all rules stay",
			next:         State{},
			wantReleased: map[netip.Addr]Released{eipA: releasedA, eipB: releasedB},
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

// TestMergeTwoReleasedForOnePodIP (issue 26's case c): a pod IP was SNATed here for a pod object that is gone (its
// EgressIP's IP released), and is now reused by a new pod object whose own EgressIP also released its IP here. While
// both linger, the pod IP's traffic leaves with the new pod object's egress IP (selection.OwnsBefore: the newest pod
// object owns the IP, as the master decides whose reroute it gets), whatever the order of the two egress IPs.
func TestMergeTwoReleasedForOnePodIP(t *testing.T) {
	ip := netip.MustParseAddr
	podIP := ip("10.244.1.6")
	old := selection.IPClaim{Namespace: "prod", Name: "web-old", Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cur := selection.IPClaim{Namespace: "prod", Name: "web-new", Created: old.Created.Add(time.Minute)}
	computed := func(eip netip.Addr, name string, owner selection.IPClaim) State {
		return State{Addresses: []Address{{IP: eip, LinkIndex: 2, Link: "eth0", EgressIP: name}},
			SNAT:   []SNAT{{PodIP: podIP, EgressIPAddr: eip, Link: "eth0", EgressIP: name}},
			Owners: map[netip.Addr]selection.IPClaim{podIP: owner}}
	}
	for _, tc := range []struct {
		name           string
		oldIP, curIP   netip.Addr
		wantEgressAddr netip.Addr
	}{
		{"the deleted pod object's egress IP sorts first", ip("172.18.0.70"), ip("172.18.0.90"), ip("172.18.0.90")},
		{"the current pod object's egress IP sorts first", ip("172.18.0.91"), ip("172.18.0.71"), ip("172.18.0.71")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relOld := Release(computed(tc.oldIP, "deleted", old), State{})[tc.oldIP]
			relCur := Release(computed(tc.curIP, "current", cur), State{})[tc.curIP]
			if !reflect.DeepEqual(relOld.Owners[podIP], old) || !reflect.DeepEqual(relCur.Owners[podIP], cur) {
				t.Fatalf("Release kept owners %v and %v, want %v and %v", relOld.Owners, relCur.Owners, old, cur)
			}
			for _, order := range [][]Released{{relOld, relCur}, {relCur, relOld}} {
				got := Merge(State{}, order...)
				if len(got.SNAT) != 1 || got.SNAT[0].EgressIPAddr != tc.wantEgressAddr {
					t.Errorf("merged SNAT %+v, want the pod IP's one rule to %s (web-new's EgressIP)", got.SNAT, tc.wantEgressAddr)
				}
			}
		})
	}
	// Released state without owners (none recorded) keeps the first claim, as before.
	a := Released{SNAT: []SNAT{{PodIP: podIP, EgressIPAddr: ip("172.18.0.70"), Link: "eth0", EgressIP: "a"}}}
	b := Released{SNAT: []SNAT{{PodIP: podIP, EgressIPAddr: ip("172.18.0.71"), Link: "eth0", EgressIP: "b"}}}
	if got := Merge(State{}, a, b); len(got.SNAT) != 1 || got.SNAT[0].EgressIP != "a" {
		t.Errorf("without owners: merged %+v, want a's rule (the first)", got.SNAT)
	}
}

// Live leaves out the released rules of pod objects that are gone or completed (their SNAT, their ip rules, and the
// routes of tables nothing kept uses); rules without a recorded owner stay.
func TestReleasedLive(t *testing.T) {
	ip := netip.MustParseAddr
	eip := ip("192.168.50.50")
	gone, live, unowned := ip("10.244.1.3"), ip("10.244.1.4"), ip("10.244.1.5")
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	claim := func(name string) selection.IPClaim {
		return selection.IPClaim{Namespace: "prod", Name: name, Created: created}
	}
	rt := func(table int) Route {
		return Route{Table: table, Route: hostinfo.Route{Dst: netip.MustParsePrefix("192.168.50.0/24"), LinkIndex: 3, Scope: 253}}
	}
	snat := func(pod netip.Addr) SNAT { return SNAT{PodIP: pod, EgressIPAddr: eip, Link: "eth1", EgressIP: "b"} }
	r := Released{
		SNAT:   []SNAT{snat(gone), snat(live), snat(unowned)},
		Rules:  []Rule{{PodIP: gone, Table: TableBase + 4}, {PodIP: live, Table: TableBase + 3}, {PodIP: unowned, Table: TableBase + 3}},
		Routes: []Route{rt(TableBase + 3), rt(TableBase + 4)},
		Owners: map[netip.Addr]selection.IPClaim{gone: claim("old"), live: claim("web")},
	}
	pods := LivePods([]*corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web", CreationTimestamp: metav1.NewTime(created)}},
		// the same name, created again: another pod object than the claim's
		{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "old", CreationTimestamp: metav1.NewTime(created.Add(time.Minute))}},
	})
	got := r.Live(pods)
	want := Released{
		SNAT:   []SNAT{snat(live), snat(unowned)},
		Rules:  []Rule{{PodIP: live, Table: TableBase + 3}, {PodIP: unowned, Table: TableBase + 3}},
		Routes: []Route{rt(TableBase + 3)},
		Owners: r.Owners,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Live:\n got  %+v\n want %+v", got, want)
	}
	if all := r.Live(func(selection.IPClaim) bool { return true }); !reflect.DeepEqual(all, r) {
		t.Errorf("Live with every pod object there: %+v, want r unchanged", all)
	}
	done := LivePods([]*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web", CreationTimestamp: metav1.NewTime(created)},
		Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}})
	if done(claim("web")) {
		t.Error("a completed pod object is live, want not: it sends nothing more")
	}
}
