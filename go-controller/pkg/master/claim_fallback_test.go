package master

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// TestClaimedIPIsNoFallback: EgressIP dev lists 172.18.0.50, which the older EgressIP prod keeps (dev is refused
// it: ClaimedByOtherEgressIP). A node holding .50, ready, or lingering on it SNATs with prod's IP: whatever the
// layout and mode, the sync plans no row that takes dev's pods there (no reroute of dev to that node as a fallback,
// no SNAT of dev with .50), while prod's pods keep their holder or fallback; explain plans the same rows and says
// dev's pods do not leave with .50 (no linger, no source .50, no note of a node still SNATting it for dev).
func TestClaimedIPIsNoFallback(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	anno := func(key, value string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Annotations[key] = value }
	}
	on := func(p *corev1.Pod, node string) *corev1.Pod {
		p.Spec.NodeName, p.CreationTimestamp = node, metav1.NewTime(now)
		return p
	}
	prod := func() *egressipv1.EgressIP {
		e := egressIP("prod", 0, []string{"172.18.0.50"}, prodNS, web)
		e.Status.Items = items("172.18.0.50", "node1")
		return e
	}
	// dev is younger and selects the web pods of every namespace (prod's are prod's: it comes first).
	dev := func(spec []string, pairs ...string) *egressipv1.EgressIP {
		e := egressIP("dev", 1, spec, nil, web)
		e.Status.Items = items(pairs...)
		return e
	}
	pods := []*corev1.Pod{on(pod("prod", "web1", "10.244.1.5", web), "node1"),
		on(pod("dev", "web3", "10.244.2.8", web), "node2"), on(pod("dev", "web4", "10.244.1.9", web), "node1")}
	scenarios := []planScenario{
		{name: "local: dev lists only prod's IP; prod's holder is ready", mode: gwmode.Local,
			nodes: []*corev1.Node{withNode(node(1, true), ready("172.18.0.50")), withNode(node(2, true), ready()), node(3, false)},
			eips:  []*egressipv1.EgressIP{prod(), dev([]string{"172.18.0.50"})}},
		{name: "local: dev's own holder is not ready yet; prod's holder is", mode: gwmode.Local,
			nodes: []*corev1.Node{withNode(node(1, true), ready("172.18.0.50")), withNode(node(2, true), ready()), node(3, false)},
			eips:  []*egressipv1.EgressIP{prod(), dev([]string{"172.18.0.50", "172.18.0.60"}, "172.18.0.60", "node2")}},
		{name: "local: prod's IP moved, its new holder is not ready, the old one lingers", mode: gwmode.Local,
			nodes: []*corev1.Node{withNode(node(1, true), ready()), withNode(node(2, true), ready()),
				withNode(node(3, false), ready(), lingering(map[string]time.Time{"172.18.0.50": later}))},
			eips: []*egressipv1.EgressIP{prod(), dev([]string{"172.18.0.50"})}},
		{name: "interconnect, local: dev lists only prod's IP; prod's holder is ready", mode: gwmode.Local, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, true), ready("172.18.0.50"), anno(annotations.EgressIPsSNATReady, `["172.18.0.50"]`)),
				withNode(icNode(2, true), ready()), icNode(3, false)},
			eips: []*egressipv1.EgressIP{prod(), dev([]string{"172.18.0.50"})}},
		{name: "interconnect, local: dev's own holder is not ready yet; prod's holder is", mode: gwmode.Local, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, true), ready("172.18.0.50"), anno(annotations.EgressIPsSNATReady, `["172.18.0.50"]`)),
				withNode(icNode(2, true), ready()), icNode(3, false)},
			eips: []*egressipv1.EgressIP{prod(), dev([]string{"172.18.0.50", "172.18.0.60"}, "172.18.0.60", "node2")}},
		{name: "interconnect, local: prod's IP moved, its new holder is not ready, the old one lingers", mode: gwmode.Local, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, true), ready()), withNode(icNode(2, true), ready()),
				withNode(icNode(3, false), ready(), lingering(map[string]time.Time{"172.18.0.50": later}))},
			eips: []*egressipv1.EgressIP{prod(), dev([]string{"172.18.0.50"})}},
		{name: "interconnect, shared: dev lists only prod's IP; prod's holder is ready", mode: gwmode.Shared, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, true), anno(annotations.EgressIPsSNATReady, `["172.18.0.50"]`)), icNode(2, true), icNode(3, false)},
			eips:  []*egressipv1.EgressIP{prod(), dev([]string{"172.18.0.50"})}},
		{name: "interconnect, shared: prod's IP moved, the old holder's zone lists it lingering", mode: gwmode.Shared, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, true), anno(annotations.EgressIPsSNATReady, `[]`)), icNode(2, true),
				withNode(icNode(3, false), anno(annotations.EgressIPsLingering, `["172.18.0.50"]`))},
			eips: []*egressipv1.EgressIP{prod(), dev([]string{"172.18.0.50"})}},
	}
	for _, sc := range scenarios {
		sc.pods = pods
		t.Run(sc.name, func(t *testing.T) {
			zones := []string{""}
			var zoneArg []string
			if sc.interconnect {
				zones = []string{"node1", "node2", "node3"}
				zoneArg = zones
			}
			synced := map[string]nbstate.State{}
			prodRows := 0
			for _, z := range zones {
				synced[z] = syncRows(t, sc, z, now)
				// In the zone of dev's own holder (the interconnect layout, local gateway mode), dev's pods of other
				// zones are rerouted to that node's management port for dev's own IP, before its host is ready
				// (nbstate.Routes): not prod's.
				rows := slices.DeleteFunc(nbstate.Dump(ofEgressIP(synced[z], "dev")), func(r string) bool {
					return sc.interconnect && sc.mode == gwmode.Local && ownHolderZone(sc.eips, "dev", z) &&
						strings.Contains(r, "nexthops=[10.244."+strings.TrimPrefix(z, "node")+".2]")
				})
				if len(rows) > 0 {
					t.Errorf("zone %q: the sync plans rows for dev, whose only IP of a holder or linger is prod's 172.18.0.50:\n  %s",
						z, strings.Join(rows, "\n  "))
				}
				prodRows += len(ofEgressIP(synced[z], "prod").Policies)
			}
			if prodRows == 0 {
				t.Errorf("no reroute of prod's pods planned: the scenario has no holder or fallback of 172.18.0.50 to test")
			}

			in := explainIn(sc, now, synced)
			planned, drift, err := PlannedRows(in, zoneArg)
			if err != nil {
				t.Fatal(err)
			}
			if len(drift) > 0 {
				t.Errorf("explain's assignment drifts from the status the master keeps: %v", drift)
			}
			for _, z := range zones {
				if got, want := nbstate.Dump(planned[z]), nbstate.Dump(synced[z]); !slices.Equal(got, want) {
					t.Errorf("zone %q: explain plans\n  %s\nthe sync plans\n  %s", z, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
			}
			for _, name := range []string{"web3", "web4"} {
				p, err := ExplainPod(in, "dev", name)
				if err != nil {
					t.Fatal(err)
				}
				if p.ServedBy != "dev" || len(p.Lingering) > 0 || slices.Contains(p.Sources, "172.18.0.50") ||
					slices.ContainsFunc(p.Via, func(v string) bool { return strings.Contains(v, "172.18.0.50") }) {
					t.Errorf("explain dev/%s: served by %q, lingering %+v, via %q, sources %q: want dev, and never prod's 172.18.0.50\n  why: %s",
						name, p.ServedBy, p.Lingering, p.Via, p.Sources, p.Why)
				}
			}
			r, err := ExplainEgressIP(in, "dev")
			if err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(r.Notes, func(n string) bool { return strings.Contains(n, "172.18.0.50") }); i >= 0 {
				t.Errorf("explain dev notes %q", r.Notes[i])
			}
			if i := slices.IndexFunc(r.IPs, func(ip IPReport) bool { return ip.IP == "172.18.0.50" }); i < 0 || r.IPs[i].Reason != string(assign.CauseClaimed) {
				t.Errorf("explain dev IPs %+v: want 172.18.0.50 refused as %s", r.IPs, assign.CauseClaimed)
			}
			if r.NB == nil || len(r.NB.Missing)+len(r.NB.Extra) > 0 {
				t.Errorf("explain dev over the sync's rows: %s", rowsReport(r.NB))
			}
		})
	}
}

// ownHolderZone says whether EgressIP name's status gives one of its IPs to node zone.
func ownHolderZone(eips []*egressipv1.EgressIP, name, zone string) bool {
	for _, e := range eips {
		if e.Name != name {
			continue
		}
		for _, it := range e.Status.Items {
			if it.Node == zone {
				return true
			}
		}
	}
	return false
}
