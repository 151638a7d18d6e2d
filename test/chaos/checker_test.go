package chaos

import (
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
)

func keys(m map[string]int) []string {
	var out []string
	for k, n := range m {
		for i := 0; i < n; i++ {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestWantZoneRows: the rows of docs/interconnect.md's table, per zone, for a pod of a holder's zone and a pod of a
// zone that holds nothing, with two holders.
func TestWantZoneRows(t *testing.T) {
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "eip1"}, Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{
		{Node: "node2", EgressIP: "172.18.0.61"}, {Node: "node3", EgressIP: "172.18.0.62"}}}}
	pod := func(name, node, ip string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: name}, Spec: corev1.PodSpec{NodeName: node},
			Status: corev1.PodStatus{PodIP: ip}}
	}
	join := map[string]string{"node1": "100.64.0.2", "node2": "100.64.0.3", "node3": "100.64.0.4"}
	mgmt := map[string]string{"node1": "10.244.1.2", "node2": "10.244.2.2", "node3": "10.244.3.2"}
	transit := map[string]string{"node1": "100.88.0.2", "node2": "100.88.0.3", "node3": "100.88.0.4"}

	shared := map[string]int{}
	wantZoneRows(shared, e, pod("p1", "node1", "10.244.1.3"), false, join, transit)
	wantZoneRows(shared, e, pod("p2", "node2", "10.244.2.3"), false, join, transit)
	want := []string{
		"zone node1: reroute ns1/p1 10.244.1.3 [100.88.0.3 100.88.0.4] (eip1)", // pod zone: both holders over the transit switch
		"zone node2: reroute ns1/p1 10.244.1.3 [100.64.0.3] (eip1)",            // holder zones: to their own GR
		"zone node2: reroute ns1/p2 10.244.2.3 [100.64.0.3 100.88.0.4] (eip1)", // the holder's own pod: its GR and the other holder
		"zone node2: snat GR_node2 172.18.0.61 <- 10.244.1.3 (eip1)",
		"zone node2: snat GR_node2 172.18.0.61 <- 10.244.2.3 (eip1)",
		"zone node3: reroute ns1/p1 10.244.1.3 [100.64.0.4] (eip1)",
		"zone node3: reroute ns1/p2 10.244.2.3 [100.64.0.4] (eip1)",
		"zone node3: snat GR_node3 172.18.0.62 <- 10.244.1.3 (eip1)",
		"zone node3: snat GR_node3 172.18.0.62 <- 10.244.2.3 (eip1)",
	}
	if got := keys(shared); !slices.Equal(got, want) {
		t.Errorf("shared gateway mode:\n got %q\nwant %q", got, want)
	}

	local := map[string]int{}
	wantZoneRows(local, e, pod("p1", "node1", "10.244.1.3"), true, mgmt, transit)
	want = []string{
		"zone node1: reroute ns1/p1 10.244.1.3 [100.88.0.3 100.88.0.4] (eip1)",
		"zone node2: reroute ns1/p1 10.244.1.3 [10.244.2.2] (eip1)", // to the holder's management port; no SNAT rows
		"zone node3: reroute ns1/p1 10.244.1.3 [10.244.3.2] (eip1)",
	}
	if got := keys(local); !slices.Equal(got, want) {
		t.Errorf("local gateway mode:\n got %q\nwant %q", got, want)
	}
}

// TestCheckZoneAnnotations: SNAT-ready must list exactly the held IPs (shared mode), nothing may linger, a cut node
// is not read.
func TestCheckZoneAnnotations(t *testing.T) {
	eips := []egressipv1.EgressIP{{Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{
		{Node: "node2", EgressIP: "172.18.0.61"}, {Node: "node3", EgressIP: "172.18.0.62"}}}}}
	node := func(name string, ann map[string]string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}
	}
	nodes := []corev1.Node{
		node("node1", map[string]string{annotations.EgressIPsSNATReady: `["172.18.0.63"]`}),
		node("node2", map[string]string{annotations.EgressIPsSNATReady: `["172.18.0.61"]`, annotations.EgressIPsLingering: `[]`}),
		node("node3", map[string]string{annotations.EgressIPsLingering: `["172.18.0.64"]`}),
		node("node4", map[string]string{annotations.EgressIPsSNATReady: `not json`}),
	}
	var v verdict
	checkZoneAnnotations(eips, nodes, func(string) bool { return false }, &v)
	sort.Strings(v.stale)
	wantMissing := []string{"zone node3: k8s.ovn.org/egress-ips-snat-ready 172.18.0.62"}
	wantStale := []string{"zone node1: k8s.ovn.org/egress-ips-snat-ready 172.18.0.63", "zone node3: k8s.ovn.org/egress-ips-lingering 172.18.0.64"}
	if !slices.Equal(v.missing, wantMissing) || !slices.Equal(v.stale, wantStale) || len(v.statusErrs) != 1 {
		t.Errorf("missing %q (want %q), stale %q (want %q), errors %q (want one, node4's)", v.missing, wantMissing, v.stale, wantStale, v.statusErrs)
	}

	v = verdict{}
	checkZoneAnnotations(eips, nodes, func(n string) bool { return n != "node2" }, &v)
	if !v.ok() {
		t.Errorf("only node2 read, which is right: %v", v)
	}
}
