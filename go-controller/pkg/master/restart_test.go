package master

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// TestRestartWithNothingChanged: a master restarted over a converged cluster
// writes nothing: no NB transaction, no status update.
func TestRestartWithNothingChanged(t *testing.T) {
	forEachNBAndRaft(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44"}, prodNS, web))
		e.create(egressIP("eip-dev", 1, []string{"172.18.0.55"}, map[string]string{"env": "dev"}, nil))
		e.create(egressIP("eip-bad", 2, []string{"10.99.0.1"}, map[string]string{"env": "dev"}, nil))
		e.expectStatus("eip-prod", "172.18.0.33@node1", "172.18.0.44@node2")
		e.expectStatus("eip-dev", "172.18.0.55@node1")
		e.expectRows("converged",
			map[string]string{
				"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2", "100.64.0.3"),
				"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2", "100.64.0.3"),
				"dev/web3":  rr("eip-dev", "10.244.2.8", "100.64.0.2"),
			},
			[]string{
				sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod"),
				sn("node2", "172.18.0.44", "10.244.1.5", "eip-prod"), sn("node2", "172.18.0.44", "10.244.3.6", "eip-prod"),
				sn("node1", "172.18.0.55", "10.244.2.8", "eip-dev"),
			})
		// Converged includes the conditions written after the NB commit (a write
		// retried after an error may still be pending when the syncs so far are done:
		// a master restarted then would rightly finish it).
		e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed)
		e.expectCondition("eip-dev", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed)
		e.expectCondition("eip-bad", conditions.TypeReady, metav1.ConditionFalse, conditions.ReasonNotAssigned)
		e.settle()
		rows := e.ours()
		e.stop()

		e.start() // waits for the start-up sync
		e.settle()
		if got := e.metric(metricNBTransactions); got != 0 {
			t.Errorf("restart with nothing changed made %v NB transactions, want 0", got)
		}
		if got := e.metric(metricStatusUpdateTotal); got != 0 {
			t.Errorf("restart with nothing changed wrote status %v times, want 0", got)
		}
		if got := e.ours(); !slices.Equal(got, rows) {
			t.Errorf("NB rows changed across restart:\n got  %v\n want %v", got, rows)
		}
	})
}

// TestRestartAfterChanges: changes made while the master is down (node unlabelled,
// pod deleted, pod added, EgressIP edited, EgressIP deleted) converge at start-up
// with no stale row.
func TestRestartAfterChanges(t *testing.T) {
	forEachNBAndRaft(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		foreign := e.foreignRows()
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44"}, prodNS, web))
		e.create(egressIP("eip-dev", 1, []string{"172.18.0.55"}, map[string]string{"env": "dev"}, nil))
		e.expectStatus("eip-prod", "172.18.0.33@node1", "172.18.0.44@node2")
		e.expectStatus("eip-dev", "172.18.0.55@node1")
		e.settle()
		e.stop()

		e.updateNode("node1", unlabelAssignable)
		e.deletePod("prod", "web1")
		e.create(pod("prod", "web5", "10.244.2.11", web))
		e.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) { o.Spec.EgressIPs = []string{"172.18.0.44", "172.18.0.66"} })
		e.deleteEgressIP("eip-dev")
		e.updateNode("node3", labelAssignable)

		e.start()
		e.expectStatus("eip-prod", "172.18.0.44@node2", "172.18.0.66@node3")
		e.expectHeldRows("converged after restart", "eip-prod", map[string]string{"prod/web2": "10.244.3.6", "prod/web5": "10.244.2.11"},
			holder{"node2", "172.18.0.44", "100.64.0.3"}, holder{"node3", "172.18.0.66", "100.64.0.4"})
		served := `address-set egressip_served_pods_v4 [10.244.2.11 10.244.3.6] owner-type=Cluster,rule=served-pods,ip-family=ip4`
		if got := e.ours(); !slices.Contains(got, served) || len(got) != 11 { // 2 reroutes, 4 SNAT, 3 no-reroute, 2 sets
			t.Errorf("NB rows after restart (want 11, incl. %s):\n%v", served, got)
		}
		if got := e.foreignRows(); !slices.Equal(got, foreign) {
			t.Errorf("foreign rows changed:\n got  %v\n want %v", got, foreign)
		}
	})
}

// TestResyncRepairsTampering: rows of ours changed or deleted behind the master's
// back are repaired by the periodic resync, and a gateway router created late
// gets its rows as soon as it appears.
func TestResyncRepairsTampering(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := newEnv(t, start, gwmode.Shared)
		e.create(node(1, true))
		e.create(namespace("prod", prodNS))
		e.create(pod("prod", "web1", "10.244.1.5", web))
		p := e.params()
		p.ResyncPeriod = 100 * time.Millisecond
		e.startWith(p)
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		want := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2")}
		wantSNAT := []string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod")}
		e.expectRows("programmed", want, wantSNAT)
		rows := e.ours()

		// Someone edits our reroute policy and drops our SNAT from GR_node1.
		cur := e.current()
		var ops []ovsdb.Operation
		for k, pol := range cur.Rows.Policies {
			if k.IDs.Rule == nbstate.RuleReroute {
				edit := &nbdb.LogicalRouterPolicy{UUID: pol.UUID, Nexthops: []string{"100.64.0.99"}}
				o, err := e.nbc.Where(edit).Update(edit, &edit.Nexthops)
				if err != nil {
					t.Fatal(err)
				}
				ops = append(ops, o...)
			}
		}
		for k, nat := range cur.Rows.NATs {
			gr := &nbdb.LogicalRouter{UUID: cur.Routers[k.Router]}
			o, err := e.nbc.Where(gr).Mutate(gr, model.Mutation{Field: &gr.Nat, Mutator: ovsdb.MutateOperationDelete, Value: []string{nat.UUID}})
			if err != nil {
				t.Fatal(err)
			}
			ops = append(ops, o...)
		}
		e.transact(ops...)
		e.eventually("repaired", func() error {
			if got := e.ours(); !slices.Equal(got, rows) {
				return fmt.Errorf("rows:\n got  %v\n want %v", got, rows)
			}
			return nil
		})
	})
}

// TestLateGatewayRouter: SNAT rows for a node whose gateway router does not exist
// yet wait for it (no failed transaction, the reroute still switches) and are
// written as soon as the router appears (NB event, no periodic resync).
func TestLateGatewayRouter(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.updateNode("node2", unlabelAssignable)
		e.create(node(4, true))
		e.updateNode("node1", unlabelAssignable)
		e.expectStatus("eip-prod", "172.18.0.33@node4")
		moved := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.5"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.5")}
		e.expectRows("reroute moved, SNAT waiting for GR_node4", moved, nil)
		// Its SNAT rows are not written: the EgressIP is not programmed, and says why.
		c := e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionFalse, conditions.ReasonNotProgrammed)
		if !strings.Contains(c.Message, "GR_node4") {
			t.Errorf("NotProgrammed message %q does not name the missing gateway router", c.Message)
		}
		e.addRouter(nbstate.GatewayRouter("node4"))
		e.expectRows("GR_node4 created", moved,
			[]string{sn("node4", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node4", "172.18.0.33", "10.244.3.6", "eip-prod")})
		e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed)
		if got := e.metric(metricSyncErrorsTotal); got != 0 {
			t.Errorf("%v failed syncs, want 0", got)
		}
	})
}

// TestNBRestart: the NB database goes away and comes back (same data); changes
// made meanwhile are written after the master reconnects.
func TestNBRestart(t *testing.T) {
	e := cluster(t, nbserver.Start, gwmode.Shared)
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	both := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2")}
	e.expectRows("before", both, []string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")})

	e.nb.Stop()
	e.create(pod("prod", "web6", "10.244.1.20", web))
	e.eventually("a sync fails while NB is down", func() error {
		if e.metric(metricSyncErrorsTotal) == 0 {
			return fmt.Errorf("no failed sync yet")
		}
		return nil
	})
	e.nb.Restart()
	e.nbc = e.nb.Client(t)
	both["prod/web6"] = rr("eip-prod", "10.244.1.20", "100.64.0.2")
	e.expectRows("after NB restart", both, []string{
		sn("node1", "172.18.0.33", "10.244.1.20", "eip-prod"),
		sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod"),
	})
}

// TestNBRestartsDuringSyncs: the production master lets libovsdb reconnect by itself, and libovsdb's reconnect purges
// the client's cache. Here the real NB ovsdb-server is restarted again and again while pods churn, so that syncs run
// (and read the cache) across the reconnects; with -race a data race between the purge and the master's reads fails
// the test. Afterwards the rows converge.
func TestNBRestartsDuringSyncs(t *testing.T) {
	e := cluster(t, nbserver.Start, gwmode.Shared)
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	e.expectStatus("eip-prod", "172.18.0.33@node1")
	want := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2")}
	e.expectRows("before", want, []string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")})
	snats := []string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")}
	const restarts = 8
	for i := range restarts {
		name := fmt.Sprintf("churn%d", i)
		ip := fmt.Sprintf("10.244.1.%d", 100+i)
		before := e.started.Load()
		e.create(pod("prod", name, ip, web)) // a sync starts on it while NB goes away and comes back
		e.eventually("a sync started on the new pod", func() error {
			if e.started.Load() == before {
				return fmt.Errorf("no sync started")
			}
			return nil
		})
		e.nb.Restart()
		want["prod/"+name] = rr("eip-prod", ip, "100.64.0.2")
		snats = append(snats, sn("node1", "172.18.0.33", ip, "eip-prod"))
	}
	e.nbc = e.nb.Client(t)
	e.expectRows(fmt.Sprintf("after %d NB restarts during syncs", restarts), want, snats)
}
