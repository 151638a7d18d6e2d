package master

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// explainInput reads the env's API objects and NB as `ovnkube egressip explain` does.
func (e *env) explainInput() ExplainInput {
	e.t.Helper()
	ctx := context.Background()
	in := ExplainInput{Mode: e.mode, ClusterSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		JoinSubnets: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")}}
	eips, err := e.eip.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range eips.Items {
		in.EgressIPs = append(in.EgressIPs, &eips.Items[i])
	}
	nodes, err := e.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	nss, err := e.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range nss.Items {
		in.Namespaces = append(in.Namespaces, &nss.Items[i])
	}
	pods, err := e.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range pods.Items {
		in.Pods = append(in.Pods, &pods.Items[i])
	}
	cur, err := nbstate.ReadCurrent(ctx, e.nbc)
	if err != nil {
		e.t.Fatal(err)
	}
	in.NB = &cur
	in.GatewaySNAT = map[string][]NATRow{"GR_node1": {{ExternalIP: "172.18.0.21", LogicalIP: "10.244.0.0/16"}}}
	return in
}

// TestExplain: explain computes, with the master's code, the holder or the reason
// per IP and per labelled node, the pods served and those served by another
// EgressIP, the NB rows (and a row removed behind the master's back), and a
// pod's source.
func TestExplain(t *testing.T) {
	e := cluster(t, nbserver.Start, gwmode.Shared)
	e.create(egressIP("first", 0, []string{"172.18.0.33", "172.18.0.55", "172.18.0.66"}, prodNS, map[string]string{"app": "web"}))
	e.create(egressIP("second", 1, []string{"172.18.0.44"}, prodNS, nil))
	e.expectStatus("first", "172.18.0.33@node1", "172.18.0.55@node2")
	e.expectStatus("second", "172.18.0.44@node1")
	e.expectCondition("first", conditions.TypeReady, metav1.ConditionFalse, conditions.ReasonNotAssigned)
	e.settle()
	e.stop() // nothing repairs NB from now on
	e.eventually("the test's NB view has the rows", func() error {
		if got := e.reroutes(); len(got) != 3 {
			return fmt.Errorf("reroutes %v", got)
		}
		return nil
	})

	r, err := ExplainEgressIP(e.explainInput(), "first")
	if err != nil {
		t.Fatal(err)
	}
	if r.IPs[0].Holder != "node1" || r.IPs[1].Holder != "node2" || r.IPs[2].Reason != "NoCapacity" {
		t.Errorf("IPs %+v, want 172.18.0.33 on node1, 172.18.0.55 on node2, 172.18.0.66 NoCapacity", r.IPs)
	}
	verdicts := map[string]string{}
	for _, n := range r.IPs[2].Nodes {
		verdicts[n.Node] = n.Verdict
	}
	if len(verdicts) != 2 || verdicts["node1"] != "HoldsAnotherIPOfThisEgressIP (172.18.0.33)" || verdicts["node2"] != "HoldsAnotherIPOfThisEgressIP (172.18.0.55)" {
		t.Errorf("node verdicts for 172.18.0.66 (labelled nodes only): %v", verdicts)
	}
	if v := r.IPs[0].Nodes; len(v) != 2 || v[0].Verdict != "Holder" {
		t.Errorf("node verdicts for 172.18.0.33: %v", v)
	}
	if len(r.Served) != 2 || r.NB == nil || len(r.NB.Missing)+len(r.NB.Extra) != 0 || len(r.NB.Present) == 0 {
		t.Errorf("served %+v, NB %+v: want 2 pods and every row present", r.Served, r.NB)
	}
	second, err := ExplainEgressIP(e.explainInput(), "second")
	if err != nil {
		t.Fatal(err)
	}
	if len(second.ServedOther) != 2 || second.ServedOther[0].ServedBy != "first" {
		t.Errorf("second: selected but served by another: %+v", second.ServedOther)
	}
	p, err := ExplainPod(e.explainInput(), "prod", "db")
	if err != nil {
		t.Fatal(err)
	}
	if p.ServedBy != "second" || len(p.Sources) != 1 || p.Sources[0] != "172.18.0.44" {
		t.Errorf("prod/db: %+v, want served by second, source 172.18.0.44", p)
	}

	// A reroute row removed behind the master's back.
	var pols []nbdb.LogicalRouterPolicy
	if err := e.nbc.WhereCache(func(p *nbdb.LogicalRouterPolicy) bool {
		return p.ExternalIDs[nbstate.PodKey] == "prod/web1" && p.ExternalIDs[nbstate.NameKey] == "first"
	}).List(context.Background(), &pols); err != nil || len(pols) != 1 {
		t.Fatalf("reroute row of prod/web1: %v %v", pols, err)
	}
	var routers []nbdb.LogicalRouter
	if err := e.nbc.WhereCache(func(r *nbdb.LogicalRouter) bool { return r.Name == nbstate.ClusterRouter }).List(context.Background(), &routers); err != nil || len(routers) != 1 {
		t.Fatalf("ovn_cluster_router: %v %v", routers, err)
	}
	cr := &routers[0]
	ops, err := e.nbc.Where(cr).Mutate(cr, model.Mutation{Field: &cr.Policies, Mutator: ovsdb.MutateOperationDelete, Value: []string{pols[0].UUID}})
	if err != nil {
		t.Fatal(err)
	}
	e.transact(ops...)
	r, err = ExplainEgressIP(e.explainInput(), "first")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.NB.Missing) != 1 || !strings.Contains(r.NB.Missing[0], "10.244.1.5") || r.Computed.Reason != conditions.ReasonNotAssigned {
		t.Errorf("after removing a row: missing %v, computed Ready %+v", r.NB.Missing, r.Computed)
	}
	in := e.explainInput()
	for _, p := range in.Pods {
		if p.Name == "web1" {
			p.Spec.NodeName = "node1" // the harness' pods are not scheduled
		}
	}
	p, err = ExplainPod(in, "prod", "web1")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sources) != 1 || p.Sources[0] != "172.18.0.21" || !strings.Contains(p.Why, "NB lacks") {
		t.Errorf("prod/web1 without its reroute row: %+v, want it to leave with GR_node1's 172.18.0.21", p)
	}
}

// TestExplainLinger (local gateway mode): the IP moved to a node that is not
// ready yet, and its old holder publishes that it still SNATs it until a time.
// Explain says the pod leaves with the released IP through that node, in its
// release linger, and until when, as the master's rows reroute; at a time past
// that end it no longer counts on the linger.
func TestExplainLinger(t *testing.T) {
	e := cluster(t, nbserver.Start, gwmode.Local)
	e.updateNode("node2", ready())
	e.updateNode("node1", ready("172.18.0.33"))
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	e.expectStatus("eip-prod", "172.18.0.33@node1")
	viaNode1 := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2")}
	e.expectRows("on node1", viaNode1, nil)

	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	e.updateNode("node1", unlabelAssignable)
	e.updateNode("node1", ready())
	e.updateNode("node1", lingering(map[string]time.Time{"172.18.0.33": until}))
	e.expectStatus("eip-prod", "172.18.0.33@node2")
	e.settle()
	e.expectRows("node2 not ready: via node1 while it lingers", viaNode1, nil)

	in := e.explainInput()
	for _, p := range in.Pods {
		p.Spec.NodeName = "node3" // the harness' pods are not scheduled
	}
	end := until.Format(time.RFC3339Nano)
	p, err := ExplainPod(in, "prod", "web1")
	if err != nil {
		t.Fatal(err)
	}
	want := []LingerReport{{Node: "node1", IP: "172.18.0.33", Until: end}}
	if !slices.Equal(p.Lingering, want) || !slices.Equal(p.Sources, []string{"172.18.0.33"}) {
		t.Errorf("prod/web1 during node1's linger: lingering %+v sources %v, want %+v and 172.18.0.33", p.Lingering, p.Sources, want)
	}
	if !slices.Contains(p.Via, "172.18.0.33@node1 (lingering until "+end+")") {
		t.Errorf("via %v: want 172.18.0.33@node1 lingering until %s", p.Via, end)
	}
	if !strings.Contains(p.Why, "release linger") || !strings.Contains(p.Why, "until "+end) || strings.Contains(p.Why, "NB lacks") {
		t.Errorf("why %q: want node1's release linger until %s, and the NB rows as desired", p.Why, end)
	}
	r, err := ExplainEgressIP(in, "eip-prod")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(r.Notes, func(n string) bool {
		return strings.Contains(n, "node node1 still SNATs 172.18.0.33") && strings.Contains(n, end)
	}) {
		t.Errorf("EgressIP notes %q: want node1's linger until %s", r.Notes, end)
	}
	if r.NB == nil || len(r.NB.Missing)+len(r.NB.Extra) != 0 {
		t.Errorf("NB %+v: the rows the master wrote during the linger are the ones explain computes", r.NB)
	}

	in.Now = until.Add(time.Second)
	p, err = ExplainPod(in, "prod", "web1")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Lingering) != 0 || slices.Contains(p.Sources, "172.18.0.33") || strings.Contains(p.Why, "release linger") {
		t.Errorf("prod/web1 past the end node1 published: %+v, want no linger and not 172.18.0.33", p)
	}
}

// TestPlannedRowsAreTheMasters: the rows PlannedRows computes from the API (what `ovnkube egressip migrate` writes)
// are the rows the master wrote, and no EgressIP drifts from its status.
func TestPlannedRowsAreTheMasters(t *testing.T) {
	e := cluster(t, nbserver.StartInMemory, gwmode.Shared)
	e.create(egressIP("first", 0, []string{"172.18.0.33", "172.18.0.55"}, prodNS, map[string]string{"app": "web"}))
	e.create(egressIP("second", 1, []string{"172.18.0.44"}, prodNS, nil))
	e.expectStatus("first", "172.18.0.33@node1", "172.18.0.55@node2")
	e.settle()
	e.stop()
	// The test's NB view follows the master's last commit asynchronously.
	e.eventually("the planned rows are the master's", func() error {
		in := e.explainInput()
		rows, drift, err := PlannedRows(in, nil)
		if err != nil {
			return err
		}
		if len(drift) != 0 {
			return fmt.Errorf("drift %v", drift)
		}
		if len(rows[""].Policies) == 0 {
			return fmt.Errorf("no rows planned")
		}
		if plan := nbstate.Diff(rows[""], *in.NB); len(plan.Changes) != 0 || len(plan.Skipped) != 0 {
			return fmt.Errorf("planned rows differ from the master's: %d changes, skipped %v", len(plan.Changes), plan.Skipped)
		}
		return nil
	})
}
