package scale

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/model"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Tracker tests: pure, no servers. Times are fixed instants, so "converged at"
// is checked exactly.

func at(ms int) time.Time {
	return time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).Add(time.Duration(ms) * time.Millisecond)
}

func eip(name string, spec []string, items ...egressipv1.EgressIPStatusItem) *egressipv1.EgressIP {
	e := &egressipv1.EgressIP{Spec: egressipv1.EgressIPSpec{EgressIPs: spec}}
	e.Name = name
	e.Status.Items = items
	return e
}

func item(node, ip string) egressipv1.EgressIPStatusItem {
	return egressipv1.EgressIPStatusItem{Node: node, EgressIP: ip}
}

func reroute(uuid, pod, ip string, hops ...string) rowEvent {
	return rowEvent{uuid: uuid, row: &nbdb.LogicalRouterPolicy{
		UUID: uuid, Match: "ip4.src == " + ip, Nexthops: hops, Action: nbdb.LogicalRouterPolicyActionReroute,
		ExternalIDs: nbstate.IDs{OwnerType: nbstate.OwnerEgressIP, Name: "ns", Rule: nbstate.RuleReroute, Family: "ip4", Pod: pod}.ExternalIDs(),
	}}
}

func snat(uuid, pod, ext, ip string) rowEvent {
	return rowEvent{uuid: uuid, row: &nbdb.NAT{
		UUID: uuid, Type: nbdb.NATTypeSNAT, ExternalIP: ext, LogicalIP: ip,
		ExternalIDs: nbstate.IDs{OwnerType: nbstate.OwnerEgressIP, Name: "ns", Rule: nbstate.RuleSNAT, Family: "ip4", Pod: pod, EgressIP: ext}.ExternalIDs(),
	}}
}

func stamp(ms int, evs ...rowEvent) []rowEvent {
	for i := range evs {
		evs[i].at = at(ms)
	}
	return evs
}

func deleted(uuid string, ms int) rowEvent { return rowEvent{uuid: uuid, at: at(ms)} }

func wantState(t *testing.T, tr *tracker, converged bool, when time.Time) {
	t.Helper()
	conv, got, problem, _ := tr.state()
	if conv != converged || (converged && !got.Equal(when)) {
		t.Fatalf("converged %v at %v (%s); want %v at %v", conv, got, problem, converged, when)
	}
}

func TestTrackerConvergesAtTheCompletingEvent(t *testing.T) {
	tr := newTracker(map[string]string{"node1": "100.64.0.2", "node2": "100.64.0.3"}, 1)
	pod := netip.MustParseAddr("10.244.1.3")
	tr.expectPod("ns/p", pod, at(0))
	wantState(t, tr, false, time.Time{}) // no EgressIP yet

	tr.setEgressIP("ns", eip("ns", []string{"172.18.64.0", "172.18.64.1"}), at(10))
	wantState(t, tr, false, time.Time{}) // status empty
	tr.setEgressIP("ns", eip("ns", []string{"172.18.64.0", "172.18.64.1"},
		item("node1", "172.18.64.0"), item("node2", "172.18.64.1")), at(20))
	wantState(t, tr, false, time.Time{}) // rows missing

	tr.applyRows(stamp(30, reroute("r1", "ns/p", "10.244.1.3", "100.64.0.3", "100.64.0.2"), snat("n1", "ns/p", "172.18.64.0", "10.244.1.3")))
	wantState(t, tr, false, time.Time{}) // one SNAT missing
	tr.applyRows(stamp(40, snat("n2", "ns/p", "172.18.64.1", "10.244.1.3")))
	wantState(t, tr, true, at(40))

	// Rows the tracker does not classify per pod (address sets) do not move the time.
	tr.applyRows(stamp(50, rowEvent{uuid: "a1", row: &nbdb.AddressSet{UUID: "a1", Name: "egressip_served_pods_v4",
		ExternalIDs: nbstate.IDs{OwnerType: nbstate.OwnerCluster, Rule: nbstate.RuleServedPods, Family: "ip4"}.ExternalIDs()}}))
	wantState(t, tr, true, at(40))

	// A duplicate reroute policy is not converged; its deletion converges again.
	tr.applyRows(stamp(60, reroute("r2", "ns/p", "10.244.1.3", "100.64.0.2", "100.64.0.3")))
	wantState(t, tr, false, time.Time{})
	tr.applyRows([]rowEvent{deleted("r2", 70)})
	wantState(t, tr, true, at(70))
}

func TestTrackerNodeLossAndPodChurn(t *testing.T) {
	tr := newTracker(map[string]string{"node1": "100.64.0.2", "node2": "100.64.0.3"}, 1)
	pod := netip.MustParseAddr("10.244.1.3")
	tr.expectPod("ns/p", pod, at(0))
	tr.setEgressIP("ns", eip("ns", []string{"172.18.64.0"}, item("node1", "172.18.64.0")), at(0))
	tr.applyRows(stamp(10, reroute("r1", "ns/p", "10.244.1.3", "100.64.0.2"), snat("n1", "ns/p", "172.18.64.0", "10.244.1.3")))
	wantState(t, tr, true, at(10))

	tr.loseNode("node1", at(20))
	wantState(t, tr, false, time.Time{}) // status still on the lost node
	tr.setEgressIP("ns", eip("ns", []string{"172.18.64.0"}, item("node2", "172.18.64.0")), at(30))
	wantState(t, tr, false, time.Time{}) // rows still point at node1
	tr.applyRows(stamp(40, reroute("r1", "ns/p", "10.244.1.3", "100.64.0.3"), deleted("n1", 40), snat("n3", "ns/p", "172.18.64.0", "10.244.1.3")))
	wantState(t, tr, true, at(40))

	// The pod goes: its rows must go too.
	tr.forgetPod("ns/p", at(50))
	wantState(t, tr, false, time.Time{})
	tr.applyRows([]rowEvent{deleted("r1", 60), deleted("n3", 60)})
	wantState(t, tr, true, at(60))

	// An owned row whose ids do not parse is never converged.
	tr.applyRows(stamp(70, rowEvent{uuid: "x", row: &nbdb.NAT{UUID: "x", ExternalIDs: map[string]string{nbstate.OwnerControllerKey: nbstate.OwnerController}}}))
	wantState(t, tr, false, time.Time{})

	// After dropped events the cache's rows replace the view; the time is the rebuild's.
	tr.resetRows(map[string]model.Model{}, at(80))
	wantState(t, tr, true, at(80))
}
