package hostegress

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// Unserved: the rules of pod IPs an egress IP still held no longer serves, with their policy routing and owner;
// Merge keeps them beside the held IP's current rules, and what st wants for a pod IP wins.
func TestUnservedAndMerge(t *testing.T) {
	f := newHeldAB()
	pod1, pod2, pod3 := f.pod1, f.pod2, f.pod3
	claim := func(name string) selection.IPClaim { return selection.IPClaim{Namespace: "prod", Name: name} }
	prev := f.state()
	prev.Owners = map[netip.Addr]selection.IPClaim{pod1: claim("p1"), pod2: claim("p2"), pod3: claim("p3")}
	// pod2 no longer served (A still held), pod3 no longer served (B still held, for pod1 now: policy routed);
	// pod1 moved from A to B: served, so not unserved.
	next := State{
		Addresses: []Address{f.addrA, f.addrB},
		SNAT:      []SNAT{f.snatB(pod1)},
		Rules:     []Rule{f.ruleB(pod1)},
		Routes:    []Route{f.rtB},
		Owners:    map[netip.Addr]selection.IPClaim{pod1: claim("p1")},
	}
	got := Unserved(prev, next)
	want := map[netip.Addr]Released{
		pod2: {SNAT: []SNAT{f.snatA(pod2)}, Owners: map[netip.Addr]selection.IPClaim{pod2: claim("p2")}},
		pod3: {SNAT: []SNAT{f.snatB(pod3)}, Rules: []Rule{f.ruleB(pod3)},
			Routes: []Route{f.rtB}, Owners: map[netip.Addr]selection.IPClaim{pod3: claim("p3")}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Unserved:\n got  %+v\n want %+v", got, want)
	}
	merged := Merge(next, got[pod2], got[pod3])
	wantMerged := State{
		Addresses: []Address{f.addrA, f.addrB},
		SNAT:      []SNAT{f.snatB(pod1), f.snatA(pod2), f.snatB(pod3)},
		Rules:     []Rule{f.ruleB(pod1), f.ruleB(pod3)},
		Routes:    []Route{f.rtB},
	}
	if !reflect.DeepEqual(norm(merged), norm(wantMerged)) {
		t.Fatalf("Merge of the unserved rules over a state that still holds their egress IPs:\n got  %+v\n want %+v", merged, wantMerged)
	}
	// pod2 served again, by B: its current rule wins over the kept one.
	again := State{Addresses: next.Addresses, SNAT: []SNAT{f.snatB(pod1), f.snatB(pod2)},
		Rules: []Rule{f.ruleB(pod1), f.ruleB(pod2)}, Routes: []Route{f.rtB}}
	if m := Merge(again, got[pod2]); !reflect.DeepEqual(norm(m), norm(again)) {
		t.Fatalf("Merge over a state serving pod2 again:\n got  %+v\n want %+v", m, again)
	}
	if u := Unserved(prev, State{}); len(u) != 0 {
		t.Fatalf("Unserved with nothing held: %+v, want none (Release's)", u)
	}
}

// LivePods: a pod object whose IP a newer pod object has is not live (its sandbox is gone: the IP is the new one's);
// RunsOn tells the node a claim's pod object runs on.
func TestLivePodsOwnershipAndRunsOn(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pod := func(name, node string, at time.Time, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: name, CreationTimestamp: metav1.NewTime(at)},
			Spec:   corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	claim := func(name string, at time.Time) selection.IPClaim {
		return selection.IPClaim{Namespace: "prod", Name: name, Created: at}
	}
	pods := []*corev1.Pod{
		pod("old", "node2", created, "10.244.2.3"),                  // terminating, still Running: its IP is new's now
		pod("new", "node2", created.Add(time.Minute), "10.244.2.3"), // created later: owns the IP
		pod("other", "node1", created, "10.244.1.3"),
	}
	live := LivePods(pods)
	for name, want := range map[string]bool{"old": false, "new": true, "other": true} {
		at := created
		if name == "new" {
			at = created.Add(time.Minute)
		}
		if got := live(claim(name, at)); got != want {
			t.Errorf("LivePods(%s) = %v, want %v", name, got, want)
		}
	}
	on := RunsOn(pods, "node1")
	if !on(claim("other", created)) || on(claim("new", created.Add(time.Minute))) || on(claim("other", created.Add(time.Hour))) {
		t.Error("RunsOn(node1): want true for other (on node1) only, not for new (node2) nor another pod object named other")
	}
}

// ServedWith: a pod object is served with an egress IP when the EgressIP serving it lists that IP in its spec.
func TestServedWith(t *testing.T) {
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ns := map[string]*corev1.Namespace{"prod": {ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}}}
	web := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web", CreationTimestamp: metav1.NewTime(created),
		Labels: map[string]string{"app": "web"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.3", PodIPs: []corev1.PodIP{{IP: "10.244.1.3"}}}}
	eip := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip1"}, Spec: egressipv1.EgressIPSpec{
		EgressIPs:         []string{"172.18.0.50"},
		NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
		PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	served := ServedWith([]*egressipv1.EgressIP{eip}, ns, []*corev1.Pod{web})
	c := selection.IPClaim{Namespace: "prod", Name: "web", Created: created}
	if !served(c, netip.MustParseAddr("172.18.0.50")) {
		t.Error("web with 172.18.0.50: false, want true (eip1 lists it and serves web)")
	}
	if served(c, netip.MustParseAddr("172.18.0.60")) {
		t.Error("web with 172.18.0.60: true, want false (no EgressIP lists it)")
	}
	if served(selection.IPClaim{Namespace: "prod", Name: "web", Created: created.Add(time.Minute)}, netip.MustParseAddr("172.18.0.50")) {
		t.Error("another pod object named web: true, want false")
	}
	if none := ServedWith(nil, ns, []*corev1.Pod{web}); none(c, netip.MustParseAddr("172.18.0.50")) {
		t.Error("no EgressIP (deleted): true, want false")
	}
}
