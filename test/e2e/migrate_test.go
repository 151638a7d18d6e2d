package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// egressTables are the NB tables egress IP rows live in, or that reference them: the transactions that touch them
// are the migration's (ovn-northd writes NB_Global only; no pod is created meanwhile).
var egressTables = []string{"Logical_Router_Policy", "NAT", "Address_Set", "QoS", "Logical_Router", "Logical_Switch"}

// TestMigrateFromUpstream takes a running EgressIP from upstream OVN-Kubernetes' rows to ours and back, with
// `ovnkube egressip migrate`, while a served pod sends a request every 50 ms (shared gateway mode, centralized
// layout). The sequence is the one docs/migration.md gives: upstream's controller is gone (its rows stay and carry
// the traffic), the status is upstream's, ours runs its node daemons only; the migration replaces upstream's rows
// with ours in one NB transaction; then our master starts and finds its rows in place. Rollback: our master stops,
// `--to-upstream` writes upstream-shaped rows and deletes ours in one transaction. No request may leave with a source
// other than the egress IP, and each migration is 1 transaction (counted in the NB database file), a second run 0.
func TestMigrateFromUpstream(t *testing.T) {
	if !slices.Contains(e2eLayouts(), cluster.LayoutCentralized) {
		t.Skip("centralized layout only (E2E_LAYOUTS)")
	}
	e := newEnvIn(t, cluster.LayoutCentralized, gwmode.Shared, cluster.FamilyIPv4)
	// Upstream's controller played by no one: our master must not write meanwhile.
	e.stopMaster("master-a", syscall.SIGTERM)
	dbFile := e.c.NBDBFile("")
	if dbFile == "" {
		t.Skip("the NB is a RAFT cluster: its transactions are not counted here")
	}
	eip := eipA[4]
	egress := netip.MustParseAddr(eip)
	pod := e.prodWithWeb1()
	e.labelAssignable("node2", true)
	e.labelAssignable("node3", true)
	e.applyEgressIP("prod", []string{eip}, map[string]string{"env": "prod"}, web)
	// The status upstream's cluster manager wrote.
	obj := e.getEgressIP("prod")
	obj.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "node2", EgressIP: eip}}
	if _, err := e.eip.K8sV1().EgressIPs().UpdateStatus(context.Background(), obj, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("write upstream's status: %v", err)
	}
	seedUpstreamRows(t, e, pod.IP, egress)
	e.eventually("prod", "web1", egress) // upstream's rows carry it
	if n := e.nbRowsOfEgressIP("prod"); n != 0 {
		t.Fatalf("%d rows of ours before the migration", n)
	}

	// Forward.
	p := startProber(e, "prod", "web1", 4, 50*time.Millisecond)
	//nolint:forbidigo // the prober's window: requests before the migration are part of the measured gap
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	out, txns := e.migrate(t, dbFile, "--from-upstream", "--dry-run")
	if txns != 0 || !strings.Contains(out, "dry run: nothing written") {
		t.Fatalf("dry run: %d transactions\n%s", txns, out)
	}
	out, txns = e.migrate(t, dbFile, "--from-upstream")
	t.Logf("migrate --from-upstream:\n%s", out)
	again, second := e.migrate(t, dbFile, "--from-upstream")
	if !strings.Contains(again, "nothing to do, no transaction") {
		t.Errorf("second run:\n%s", again)
	}
	// Our master starts, reads the status and finds its rows as it plans them.
	before := nbTransactions(t, dbFile)
	e.startMaster("master-a", "127.0.0.1:29101")
	waitCondition(t, e, "prod", "Ready", metav1.ConditionTrue)
	masterTxns := nbTransactions(t, dbFile) - before
	//nolint:forbidigo // the prober's window: requests after the migration are part of what is measured
	time.Sleep(time.Second)
	probes := p.finish()
	longest, lost, bad := gap(probes, start, egress)
	line := fmt.Sprintf("MIGRATE FROM UPSTREAM (centralized, shared): %d requests, longest gap between requests seen with %s: %s (lost %d, other source %d); NB transactions: migration %d, second run %d, our master's start %d\n",
		len(probes), eip, longest.Round(time.Millisecond), lost, bad, txns, second, masterTxns)
	checkMigration(t, "migration", line, probes, start, egress, txns, second)
	if up := e.upstreamRows(); len(up) != 0 {
		t.Errorf("upstream rows left: %v", up)
	}
	if n := e.nbRowsOfEgressIP("prod"); n != 2 {
		t.Errorf("%d rows of ours for prod (reroute and SNAT), want 2", n)
	}

	// Rollback.
	e.stopMaster("master-a", syscall.SIGTERM)
	p = startProber(e, "prod", "web1", 4, 50*time.Millisecond)
	//nolint:forbidigo // the prober's window: requests before the rollback are part of the measured gap
	time.Sleep(500 * time.Millisecond)
	start = time.Now()
	out, txns = e.migrate(t, dbFile, "--to-upstream")
	t.Logf("migrate --to-upstream:\n%s", out)
	_, second = e.migrate(t, dbFile, "--to-upstream")
	//nolint:forbidigo // the prober's window: requests after the rollback are part of what is measured
	time.Sleep(time.Second)
	probes = p.finish()
	longest, lost, bad = gap(probes, start, egress)
	line = fmt.Sprintf("MIGRATE TO UPSTREAM (centralized, shared): %d requests, longest gap between requests seen with %s: %s (lost %d, other source %d); NB transactions: migration %d, second run %d\n",
		len(probes), eip, longest.Round(time.Millisecond), lost, bad, txns, second)
	checkMigration(t, "rollback", line, probes, start, egress, txns, second)
	if n := len(e.nbOwned("Logical_Router_Policy")) + len(e.nbOwned("NAT")) + len(e.nbOwned("Address_Set")); n != 0 {
		t.Errorf("%d rows of ours left after the rollback", n)
	}
	if up := e.upstreamRows(); len(up) == 0 {
		t.Error("no upstream-shaped rows after the rollback")
	}
}

// migrate runs `ovnkube egressip migrate` with args as an admin does, against the cluster's NB, and returns its
// output and the NB transactions that touched egressTables meanwhile.
func (e *env) migrate(t *testing.T, dbFile string, args ...string) (string, int) {
	t.Helper()
	before := nbTransactions(t, dbFile)
	cmdArgs := []string{"egressip", "migrate", "--nb-address", e.c.NBAddress()}
	for _, a := range e.commonArgs(e.c.Kubeconfig()) {
		if a != "--egress-ip-enable" {
			cmdArgs = append(cmdArgs, a)
		}
	}
	out, err := exec.Command(ovnkubeBin, append(cmdArgs, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ovnkube egressip migrate %v: %v\n%s", args, err, out)
	}
	return string(out), nbTransactions(t, dbFile) - before
}

func nbTransactions(t *testing.T, dbFile string) int {
	t.Helper()
	n, err := nbserver.FileTransactions(dbFile, egressTables...)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// upstreamRows lists the external_ids of upstream's egress IP rows in NB.
func (e *env) upstreamRows() []map[string]string {
	var out []map[string]string
	for _, table := range []string{"Logical_Router_Policy", "NAT", "QoS", "Address_Set"} {
		out = append(out, e.nbFind(table, `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`,
			`external_ids:"k8s.ovn.org/owner-type"=EgressIP`)...)
	}
	return out
}

// waitCondition waits until EgressIP name has condition typ with status want.
func waitCondition(t *testing.T, e *env, name, typ string, want metav1.ConditionStatus) {
	t.Helper()
	waitfor.True(t, 30*time.Second, 100*time.Millisecond, fmt.Sprintf("EgressIP %s: condition %s %s", name, typ, want), func() (bool, string) {
		obj := e.getEgressIP(name)
		for _, c := range obj.Status.Conditions {
			if c.Type == typ && c.Status == want {
				return true, ""
			}
		}
		return false, fmt.Sprintf("conditions %+v", obj.Status.Conditions)
	})
}

// upstreamExt are the external_ids of an upstream egress IP row (the shared facts' "Upstream's own egress IP
// rows"), written out here rather than through the code under test.
func upstreamExt(kv ...string) map[string]string {
	m := map[string]string{"k8s.ovn.org/owner-controller": "default-network-controller", "k8s.ovn.org/owner-type": "EgressIP"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// seedUpstreamRows writes, in one transaction, the rows upstream's controller has for EgressIP prod serving pod
// prod/web1 (podIP) through node2 with egress IP egress: the reroute to node2's gateway router, the SNAT on it,
// the no-reroute policies with their address sets, and the reply-traffic mark on the pod's node switch.
func seedUpstreamRows(t *testing.T, e *env, podIP, egress netip.Addr) {
	t.Helper()
	n2, err := e.c.Node("node2")
	if err != nil {
		t.Fatal(err)
	}
	var nodeIPs []string
	for _, n := range e.c.Nodes() {
		nodeIPs = append(nodeIPs, n.NodeIP.String())
	}
	port := "k8s-node2"
	rows := []model.Model{
		&nbdb.AddressSet{UUID: "served", Name: "a4548040316634674295", Addresses: []string{podIP.String()},
			ExternalIDs: upstreamExt("k8s.ovn.org/name", "egressip-served-pods", "ip-family", "v4", "network", "default",
				"k8s.ovn.org/id", "default-network-controller:EgressIP:egressip-served-pods:v4:default")},
		&nbdb.AddressSet{UUID: "nodeips", Name: "a712973235162149816", Addresses: nodeIPs,
			ExternalIDs: upstreamExt("k8s.ovn.org/name", "node-ips", "ip-family", "v4", "network", "default",
				"k8s.ovn.org/id", "default-network-controller:EgressIP:node-ips:v4:default")},
		&nbdb.LogicalRouterPolicy{UUID: "reroute", Priority: 100, Match: "ip4.src == " + podIP.String(), Action: "reroute",
			Nexthops: []string{n2.JoinIP.String()}, ExternalIDs: upstreamExt("priority", "100", "k8s.ovn.org/name", "prod_prod/web1",
				"ip-family", "ip4", "network", "default", "k8s.ovn.org/id", "default-network-controller:EgressIP:100:prod_prod/web1:ip4:default")},
		noReroute("pod2pod", "EIP-No-Reroute-Pod-To-Pod", fmt.Sprintf("ip4.src == %s && ip4.dst == %s", cluster.ClusterCIDR, cluster.ClusterCIDR)),
		noReroute("pod2join", "EIP-No-Reroute-Pod-To-Join", fmt.Sprintf("ip4.src == %s && ip4.dst == %s", cluster.ClusterCIDR, cluster.JoinCIDR)),
		noReroute("pod2node", "EIP-No-Reroute-Pod-To-Node", "ip4.src == $a4548040316634674295 && ip4.dst == $a712973235162149816"),
		noReroute("reply", "EIP-No-Reroute-reply-traffic", "pkt.mark == 42"),
		&nbdb.NAT{UUID: "snat", Type: "snat", ExternalIP: egress.String(), LogicalIP: podIP.String(), LogicalPort: &port,
			ExternalIDs: upstreamExt("k8s.ovn.org/name", "prod_prod/web1", "ip-family", "ip4",
				"k8s.ovn.org/id", "default-network-controller:EgressIP:prod_prod/web1:ip4")},
		&nbdb.QoS{UUID: "mark", Priority: 103, Direction: "from-lport", Action: map[string]int{"dscp": 42}, // upstream marks (mark=42): OVN 23.03's schema allows dscp only,
			Match:       "inport == \"k8s-node1\" && ct.trk && ct.rpl",
			ExternalIDs: upstreamExt("k8s.ovn.org/name", "EgressIP-Mark-Reply-Traffic", "ip-family", "ip4", "network", "default")},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbm, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nbserver.NewClient(e.c.NBAddress(), dbm)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.MonitorAll(ctx); err != nil {
		t.Fatal(err)
	}
	var ops []ovsdb.Operation
	for _, m := range rows {
		o, err := c.Create(m)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
	}
	ref := func(m model.Model, field any, uuids ...string) {
		o, err := c.Where(m).Mutate(m, model.Mutation{Field: field, Mutator: ovsdb.MutateOperationInsert, Value: uuids})
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
	}
	router := func(name string) *nbdb.LogicalRouter {
		var rs []nbdb.LogicalRouter
		if err := c.WhereCache(func(r *nbdb.LogicalRouter) bool { return r.Name == name }).List(ctx, &rs); err != nil || len(rs) != 1 {
			t.Fatalf("NB topology: router %s: %v %v", name, rs, err)
		}
		return &rs[0]
	}
	var sws []nbdb.LogicalSwitch
	if err := c.WhereCache(func(s *nbdb.LogicalSwitch) bool { return s.Name == "node1" }).List(ctx, &sws); err != nil || len(sws) != 1 {
		t.Fatalf("NB topology: switch node1: %v %v", sws, err)
	}
	cr, gr, sw := router("ovn_cluster_router"), router("GR_node2"), &sws[0]
	ref(cr, &cr.Policies, "reroute", "pod2pod", "pod2join", "pod2node", "reply")
	ref(gr, &gr.Nat, "snat")
	ref(sw, &sw.QOSRules, "mark")
	res, err := c.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		t.Fatalf("seed upstream's rows: %v", err)
	}
}

func noReroute(uuid, name, match string) *nbdb.LogicalRouterPolicy {
	return &nbdb.LogicalRouterPolicy{UUID: uuid, Priority: 102, Match: match, Action: "allow",
		ExternalIDs: upstreamExt("priority", "102", "k8s.ovn.org/name", name, "ip-family", "ip4", "network", "default",
			"k8s.ovn.org/id", "default-network-controller:EgressIP:102:"+name+":ip4:default")}
}

// checkMigration prints and records line (what a migration run measured), and fails t when a request since start
// left with a source other than egress or was lost, or when the run (what) took other than one NB transaction or its
// second run any.
func checkMigration(t *testing.T, what, line string, probes []probe, start time.Time, egress netip.Addr, txns, second int) {
	t.Helper()
	fmt.Print(line)
	recordResult(t, line)
	if _, lost, bad := gap(probes, start, egress); bad > 0 || lost > 0 {
		t.Errorf("%d requests left with another source (%s), %d lost", bad, otherSources(probes, start, egress), lost)
	}
	if txns != 1 || second != 0 {
		t.Errorf("%s: %d transactions, second run %d; want 1 and 0", what, txns, second)
	}
}
