package master

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/ovsdb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

func TestNarrowMemoryApplied(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 20, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		seq      int
		since    time.Time
		dp       nbstate.DataPlane
		now      time.Time
		ok, bnd  bool
		waitFrom time.Time
	}{
		{name: "hv_cfg reached the commit", seq: 7, dp: nbstate.DataPlane{Known: true, NBCfg: 7, HVCfg: 7}, now: t0, ok: true},
		{name: "hv_cfg behind the commit: waits from now", seq: 7, dp: nbstate.DataPlane{Known: true, NBCfg: 7, HVCfg: 6},
			now: t0, waitFrom: t0},
		{name: "our commit not in the cache yet: its seq counts", seq: 9, dp: nbstate.DataPlane{Known: true, NBCfg: 8, HVCfg: 8},
			now: t0, waitFrom: t0},
		{name: "a restarted master (seq 0) waits for NB's nb_cfg", seq: 0, dp: nbstate.DataPlane{Known: true, NBCfg: 4, HVCfg: 3},
			now: t0, waitFrom: t0},
		{name: "still waiting within the bound keeps its start", seq: 7, since: t0,
			dp: nbstate.DataPlane{Known: true, NBCfg: 7, HVCfg: 6}, now: t0.Add(rerouteApplyBound - time.Second), waitFrom: t0},
		{name: "the bound passed: narrows anyway", seq: 7, since: t0,
			dp: nbstate.DataPlane{Known: true, NBCfg: 7, HVCfg: 6}, now: t0.Add(rerouteApplyBound), ok: true, bnd: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nm := narrowMemory{seq: tc.seq, since: tc.since}
			ok, bnd := nm.applied(tc.dp, tc.now)
			if ok != tc.ok || bnd != tc.bnd || !nm.since.Equal(tc.waitFrom) {
				t.Errorf("applied = %v (bound %v), waiting since %v; want %v (bound %v), since %v", ok, bnd, nm.since, tc.ok, tc.bnd, tc.waitFrom)
			}
		})
	}
}

// setHVCfg plays ovn-northd reporting that every chassis applied nb_cfg v.
func (e *env) setHVCfg(v int) {
	e.t.Helper()
	e.transact(ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: nbdb.NBGlobalTable, Where: []ovsdb.Condition{{Column: "_uuid",
		Function: ovsdb.ConditionNotEqual, Value: ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"}}},
		Row: ovsdb.Row{"hv_cfg": v}})
}

// reroutedOf reads node's egress-ips-rerouted.
func (e *env) reroutedOf(node string) string {
	e.t.Helper()
	n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n.Annotations[annotations.EgressIPsRerouted]
}

// TestLocalGatewayReroutedWaitsForDataPlane: the master tells the previous holder
// that its reroutes are gone only once every chassis has applied the commit that
// removed them (NB_Global's hv_cfg reached the nb_cfg the commit set; the test plays
// ovn-northd). Told at commit, the node dropped its SNAT rules at the end of its
// linger while ovn-northd, reconnecting to a new NB leader, had not yet removed the
// flows: the pods left with the node's own address (CI's local-gateway chaos soak,
// seed 1796675801635180828, round 2).
func TestLocalGatewayReroutedWaitsForDataPlane(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := newEnv(t, start, gwmode.Local)
		populateObjects(e)
		e.transact(ovsdb.Operation{Op: ovsdb.OperationInsert, Table: nbdb.NBGlobalTable, Row: ovsdb.Row{"nb_cfg": 0, "hv_cfg": 0}})
		e.start()
		e.updateNode("node2", ready())
		e.updateNode("node1", ready("172.18.0.33"))
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.expectRows("on node1", map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2")}, nil)
		e.expectRerouted("node1", `["172.18.0.33"]`)
		nb, _ := e.nbGlobal()
		if nb < 1 {
			t.Fatalf("NB_Global nb_cfg %d: want the master's commit to have incremented it", nb)
		}
		e.setHVCfg(nb)

		e.updateNode("node1", unlabelAssignable)
		e.updateNode("node1", ready())
		e.updateNode("node2", ready("172.18.0.33"))
		e.expectStatus("eip-prod", "172.18.0.33@node2")
		e.expectRows("on node2", map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.2.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.2.2")}, nil)
		e.expectRerouted("node2", `["172.18.0.33"]`)
		e.settle() // the sync that moved the rows has decided what to tell node1
		nb2, hv := e.nbGlobal()
		if nb2 <= nb {
			t.Fatalf("NB_Global nb_cfg %d after the move, %d before: want the move's commit to have incremented it", nb2, nb)
		}
		if got := e.reroutedOf("node1"); got != `["172.18.0.33"]` {
			t.Fatalf("node1 told %s = %s while hv_cfg %d < nb_cfg %d (a chassis may still reroute to it)",
				annotations.EgressIPsRerouted, got, hv, nb2)
		}
		e.setHVCfg(nb2)
		e.eventually("node1 told once hv_cfg reached the move's nb_cfg", func() error {
			if got := e.reroutedOf("node1"); got != `[]` {
				return fmt.Errorf("%s = %q", annotations.EgressIPsRerouted, got)
			}
			return nil
		})
	})
}

// TestInterconnectLocalReroutedWaitsForDataPlane: a zone controller (local gateway
// mode) narrows its node's egress-ips-rerouted only once its chassis has applied
// the commit that removed the reroutes to the node's management port: told
// earlier, the node daemon drops its SNAT rules while the zone's ovn-northd (after
// the zone's NB and SB restarted, in its reconnect backoff) still has the flows
// send the pods there.
func TestInterconnectLocalReroutedWaitsForDataPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and four ovsdb-servers")
	}
	ic := newICEnv(t, gwmode.Local)
	cm, z1 := ic.cm, ic.zones["node1"]
	z1.transact(ovsdb.Operation{Op: ovsdb.OperationInsert, Table: nbdb.NBGlobalTable, Row: ovsdb.Row{"nb_cfg": 0, "hv_cfg": 0}})
	ic.web2OnNode3()
	ic.startCM()
	ic.startZone("node1", time.Second)
	ic.startZone("node3", time.Second)

	cm.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	cm.expectStatus("eip-prod", "172.18.0.33@node1")
	cm.updateNode("node1", func(n *corev1.Node) { n.Annotations[annotations.EgressIPsReady] = `["172.18.0.33"]` })
	toMgmt := rr("eip-prod", "10.244.3.6", "10.244.1.2")
	z1.eventually("holder zone reroutes web2 to node1's management port", func() error {
		if got := z1.reroutes()["prod/web2"]; got != toMgmt {
			return fmt.Errorf("web2: %q", got)
		}
		return nil
	})
	nb, _ := z1.nbGlobal()
	z1.setHVCfg(nb)
	cm.eventually("node1 told the IP is rerouted to it", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsRerouted); got != `["172.18.0.33"]` {
			return fmt.Errorf("%s = %q", annotations.EgressIPsRerouted, got)
		}
		return nil
	})

	// node1 can no longer hold the IP and its daemon, not lingering, lists it no
	// more: the sync that removes the reroute also decides what node1 is told.
	cm.updateNode("node1", unlabelAssignable, func(n *corev1.Node) { n.Annotations[annotations.EgressIPsReady] = `[]` })
	z1.eventually("holder zone removed web2's reroute", func() error {
		if got, ok := z1.reroutes()["prod/web2"]; ok {
			return fmt.Errorf("web2: %q", got)
		}
		return nil
	})
	z1.settle()
	nb2, hv := z1.nbGlobal()
	if nb2 <= nb {
		t.Fatalf("NB_Global nb_cfg %d after the removal, %d before: want the removal's commit to have incremented it", nb2, nb)
	}
	if got := ic.annotation("node1", annotations.EgressIPsRerouted); got != `["172.18.0.33"]` {
		t.Fatalf("node1 told %s = %s while hv_cfg %d < nb_cfg %d (its chassis may still reroute to it)",
			annotations.EgressIPsRerouted, got, hv, nb2)
	}
	z1.setHVCfg(nb2)
	cm.eventually("node1 told once hv_cfg reached the removal's nb_cfg", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsRerouted); got != `[]` {
			return fmt.Errorf("%s = %q", annotations.EgressIPsRerouted, got)
		}
		return nil
	})
}

// TestReroutedTargets: a node is told the IPs of an EgressIP rerouted to it that are its own (status gives them, or
// it still SNATs them after a release), not every IP of an EgressIP whose route has it as a next hop: a node holding
// .61 of eip1 was told .63 too, after it released .63, and kept .63's rules as long as it held .61 (a local-gateway
// chaos soak, seed 1796684085868235400: stale host rules on node3 after the linger).
func TestReroutedTargets(t *testing.T) {
	now := time.Date(2026, 12, 7, 22, 55, 30, 0, time.UTC)
	x, y := netip.MustParseAddr("172.18.0.61"), netip.MustParseAddr("172.18.0.63")
	mgmt2, mgmt3 := netip.MustParseAddr("10.244.2.2"), netip.MustParseAddr("10.244.3.2")
	routes := map[string]map[string]nbstate.Route{"eip1": {nbstate.FamilyIPv4: {Nexthops: []string{mgmt2.String(), mgmt3.String()}}}}
	kept := map[string][]netip.Addr{"eip1": {x, y}}
	items := map[string][]egressipv1.EgressIPStatusItem{"eip1": {{Node: "node3", EgressIP: x.String()}, {Node: "node2", EgressIP: y.String()}}}
	node := func(mgmt netip.Addr, f func(*nbstate.Node)) nbstate.Node {
		n := nbstate.Node{ManagementIPs: []netip.Addr{mgmt}, LingeringUntil: map[netip.Addr]time.Time{}, ListedReady: map[netip.Addr]bool{}}
		if f != nil {
			f(&n)
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		node3 func(*nbstate.Node)
		want3 []netip.Addr
	}{
		{name: "node3 holds .61 only", want3: []netip.Addr{x}},
		{name: "node3 released .63, its linger not over: both", node3: func(n *nbstate.Node) { n.LingeringUntil[y] = now.Add(time.Second) },
			want3: []netip.Addr{x, y}},
		{name: "node3's linger of .63 over: .61 only", node3: func(n *nbstate.Node) { n.LingeringUntil[y] = now.Add(-time.Second) },
			want3: []netip.Addr{x}},
		{name: "node3 still lists .63 ready (not taken the release in): both", node3: func(n *nbstate.Node) { n.ListedReady[y] = true },
			want3: []netip.Addr{x, y}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := map[string]nbstate.Node{"node2": node(mgmt2, nil), "node3": node(mgmt3, tc.node3)}
			got := reroutedTargets(routes, kept, nodes, items, now)
			if !sameIPSet(got["node3"], set(tc.want3...)) || !sameIPSet(got["node2"], set(y)) {
				t.Errorf("node3 told %v, node2 %v; want %v, [%v]", got["node3"], got["node2"], tc.want3, y)
			}
		})
	}
}

func set(ips ...netip.Addr) map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	for _, ip := range ips {
		m[ip] = true
	}
	return m
}
