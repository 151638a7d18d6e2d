package master

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

func TestZoneMemoryApplied(t *testing.T) {
	a, b := netip.MustParseAddr("172.18.0.33"), netip.MustParseAddr("172.18.0.34")
	for _, tc := range []struct {
		name      string
		seq       int
		since     map[netip.Addr]int
		published map[netip.Addr]bool
		dp        nbstate.DataPlane
		want      map[netip.Addr]bool
		held      []netip.Addr
	}{
		{name: "no NB_Global row: nothing to wait for", seq: 0, dp: nbstate.DataPlane{},
			want: set(a, b)},
		{name: "committed at 7, applied up to 6: held", seq: 7, dp: nbstate.DataPlane{Known: true, NBCfg: 7, HVCfg: 6},
			want: set(), held: []netip.Addr{a, b}},
		{name: "applied up to 7: listed", seq: 7, dp: nbstate.DataPlane{Known: true, NBCfg: 7, HVCfg: 7},
			want: set(a, b)},
		{name: "already listed: stays listed while hv_cfg lags a later commit", seq: 9, published: set(a),
			dp: nbstate.DataPlane{Known: true, NBCfg: 9, HVCfg: 7}, want: set(a), held: []netip.Addr{b}},
		{name: "a later commit does not move what an IP waits for", seq: 12, since: map[netip.Addr]int{a: 8},
			dp: nbstate.DataPlane{Known: true, NBCfg: 12, HVCfg: 8}, want: set(a), held: []netip.Addr{b}},
		{name: "another writer's nb_cfg beyond ours counts (the rows are older)", seq: 3,
			dp: nbstate.DataPlane{Known: true, NBCfg: 5, HVCfg: 4}, want: set(), held: []netip.Addr{a, b}},
		{name: "NB reset: a wait beyond nb_cfg comes down to it", seq: 2, since: map[netip.Addr]int{a: 40, b: 40},
			dp: nbstate.DataPlane{Known: true, NBCfg: 2, HVCfg: 2}, want: set(a, b)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			zm := zoneMemory{seq: tc.seq, since: tc.since}
			ready := set(a, b)
			held := zm.applied(ready, tc.published, tc.dp)
			if !sameIPSet(ready, tc.want) || !slices.Equal(held, tc.held) {
				t.Errorf("listed %v, held %v; want %v, %v", ready, held, tc.want, tc.held)
			}
			for _, ip := range tc.held {
				if _, ok := zm.since[ip]; !ok {
					t.Errorf("%s held but not remembered", ip)
				}
			}
		})
	}
}

func sameIPSet(a, b map[netip.Addr]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// nbGlobal reads zone e's NB_Global nb_cfg and hv_cfg.
func (e *env) nbGlobal() (nbCfg, hvCfg int) {
	e.t.Helper()
	res, err := e.nbc.Transact(context.Background(), ovsdb.Operation{Op: ovsdb.OperationSelect, Table: nbdb.NBGlobalTable,
		Columns: []string{"nb_cfg", "hv_cfg"}})
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 {
		e.t.Fatalf("read NB_Global: %v %+v", err, res)
	}
	num := func(v any) int { f, _ := v.(float64); return int(f) }
	return num(res[0].Rows[0]["nb_cfg"]), num(res[0].Rows[0]["hv_cfg"])
}

// TestInterconnectSNATReadyWaitsForDataPlane: a zone lists an egress IP SNAT-ready only once its chassis has applied
// the IP's rows: its commit increments NB_Global's nb_cfg, and the zone waits until ovn-northd reports, in hv_cfg,
// that every chassis has applied it (here the test plays ovn-northd and ovn-controller). Until then no other zone
// reroutes to the holder: a pod rerouted to a holder whose flows are not installed leaves with the holder's gateway
// router address (CI's interconnect chaos soak, after a zone's NB and SB restart).
func TestInterconnectSNATReadyWaitsForDataPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and four ovsdb-servers")
	}
	ic := newICEnv(t, gwmode.Shared)
	cm, z1, z3 := ic.cm, ic.zones["node1"], ic.zones["node3"]
	z1.transact(ovsdb.Operation{Op: ovsdb.OperationInsert, Table: nbdb.NBGlobalTable, Row: ovsdb.Row{"nb_cfg": 0, "hv_cfg": 0}})
	ic.startWebPods(0)

	cm.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	cm.expectStatus("eip-prod", "172.18.0.33@node1")
	z1.expectRows("holder zone: both pods to its own gateway router, SNAT for both",
		map[string]string{
			"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"),
			"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2"),
		},
		[]string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")})
	nb, hv := z1.nbGlobal()
	if nb < 1 || hv != 0 {
		t.Fatalf("NB_Global nb_cfg %d, hv_cfg %d: want the zone's commit to have incremented nb_cfg", nb, hv)
	}
	z1.settle() // the sync that committed the rows has decided what to publish
	if got := ic.annotation("node1", annotations.EgressIPsSNATReady); got != "" && got != "[]" {
		t.Fatalf("node1 lists %s = %s while hv_cfg %d < nb_cfg %d (its chassis has not applied the rows)",
			annotations.EgressIPsSNATReady, got, hv, nb)
	}
	if got, ok := z3.reroutes()["prod/web2"]; ok {
		t.Fatalf("zone node3 reroutes web2 (%s) before node1's chassis has applied its rows", got)
	}

	z1.transact(ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: nbdb.NBGlobalTable, Where: []ovsdb.Condition{{Column: "_uuid",
		Function: ovsdb.ConditionNotEqual, Value: ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"}}},
		Row: ovsdb.Row{"hv_cfg": nb}})
	cm.eventually("node1 lists the IP once hv_cfg reached the commit's nb_cfg", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsSNATReady); got != `["172.18.0.33"]` {
			return fmt.Errorf("%s = %q", annotations.EgressIPsSNATReady, got)
		}
		return nil
	})
	z3.expectRows("pod zone: its pod to the holder's transit switch IP once the holder is ready",
		map[string]string{"prod/web2": rr("eip-prod", "10.244.3.6", "100.88.0.2")}, nil)
}
