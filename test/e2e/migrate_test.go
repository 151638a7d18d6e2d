package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
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
	testMigrateFromUpstream(t, cluster.LayoutCentralized)
}

// TestMigrateFromUpstreamInterconnect is TestMigrateFromUpstream in the interconnect layout (one zone per node,
// shared gateway mode, IPv4), with docs/migration.md's steps for it: each zone's NB holds the rows upstream's zone
// controller writes there (the pod's zone node1 its reroute to the holder node2's transit switch IP, the holder's
// zone node2 the SNAT, every zone the no-reroute policies, address sets and reply-traffic mark), and none of ours.
// Before ours' zone controllers have run, the migration refuses and writes nothing. Then, probed throughout: our
// zone controllers start (with the node daemons: one process per node) and write their rows beside upstream's;
// `migrate --from-upstream --zone-nb-address NODE=NB ...` removes upstream's, one transaction per zone, a second run
// none; our cluster manager starts. Rollback: the cluster manager and the zone controllers stop, `--to-upstream`
// is one transaction per zone, a second run none. No request may leave with a source other than the egress IP.
func TestMigrateFromUpstreamInterconnect(t *testing.T) {
	if !slices.Contains(e2eLayouts(), cluster.LayoutInterconnect) {
		t.Skip("interconnect layout only (E2E_LAYOUTS)")
	}
	testMigrateFromUpstream(t, cluster.LayoutInterconnect)
}

func testMigrateFromUpstream(t *testing.T, layout string) {
	e := newEnvIn(t, layout, gwmode.Shared, cluster.FamilyIPv4)
	// Upstream's controller played by no one, ours installed with the feature off (migration.md steps 2 and 4):
	// nothing of ours may write NB meanwhile. The node annotations our node daemons wrote stay, as upstream's
	// ovnkube-node writes them.
	e.stopOurControllers()
	dbFiles := e.nbDBFiles()
	if dbFiles == nil {
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
	for _, z := range e.zones() {
		writeUpstreamRows(t, e.c.ZoneNBAddress(z), e.upstreamSeed(z, pod.IP, egress))
	}
	e.eventually("prod", "web1", egress) // upstream's rows carry it
	seededSets := e.upstreamAddressSetIDs()
	if n := len(e.nbOwned("Logical_Router_Policy")) + len(e.nbOwned("NAT")) + len(e.nbOwned("Address_Set")); n != 0 {
		t.Fatalf("%d rows of ours before the migration", n)
	}
	// Our rows of prod once ours serves it, by zone: the reroute and the SNAT in the one NB; the pod's zone's reroute
	// to node2's transit switch IP, and in node2's zone its reroute of the pod to its gateway router and the SNAT.
	wantOurs := map[string]int{"": 2}
	if e.interconnect() {
		wantOurs = map[string]int{"node1": 1, "node2": 2, "node3": 0}
		// migration.md step 5: the pod's zone reroutes to another zone's holder once the holder lists the IP in
		// egress-ips-snat-ready, which only ours publishes. Before ours' zone controllers ran, nothing is written.
		out, txns, err := e.tryMigrate(t, dbFiles, "--from-upstream")
		if err == nil || !strings.Contains(out+err.Error(), "UNSERVED by ours: "+pod.IP.String()) || sum(txns) != 0 {
			t.Fatalf("migrate before ours' zone controllers ran: err %v, transactions %v, want a refusal naming %s and none\n%s",
				err, txns, pod.IP, out)
		}
		t.Logf("migrate --from-upstream before ours' zone controllers ran (refused, nothing written):\n%s", out)
	}

	// Forward.
	p := startProber(e, "prod", "web1", 4, 50*time.Millisecond)
	//nolint:forbidigo // the prober's window: requests before the migration are part of the measured gap
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if e.interconnect() {
		// Step 5: our zone controllers (with the node daemons) start and write their rows beside upstream's.
		for _, n := range e.c.Nodes() {
			e.startNode(n.Name)
		}
		waitfor.True(t, 30*time.Second, 100*time.Millisecond, "our rows of prod in every zone", func() (bool, string) {
			got := e.nbRowsOfEgressIPByZone("prod")
			return maps.Equal(got, wantOurs), fmt.Sprintf("rows by zone %v, want %v", got, wantOurs)
		})
	}
	out, txns := e.migrate(t, dbFiles, "--from-upstream", "--dry-run")
	if sum(txns) != 0 || !strings.Contains(out, "dry run: nothing written") {
		t.Fatalf("dry run: transactions %v\n%s", txns, out)
	}
	out, txns = e.migrate(t, dbFiles, "--from-upstream")
	t.Logf("migrate --from-upstream:\n%s", out)
	again, second := e.migrate(t, dbFiles, "--from-upstream")
	if strings.Count(again, "nothing to do, no transaction") != len(dbFiles) {
		t.Errorf("second run:\n%s", again)
	}
	// Our master (cluster manager) starts, reads the status and finds the rows as it plans them.
	before := e.nbTransactions(t, dbFiles)
	e.startMaster("master-a", "127.0.0.1:29101")
	waitCondition(t, e, "prod", "Ready", metav1.ConditionTrue)
	masterTxns := since(before, e.nbTransactions(t, dbFiles))
	//nolint:forbidigo // the prober's window: requests after the migration are part of what is measured
	time.Sleep(time.Second)
	probes := p.finish()
	longest, lost, bad := gap(probes, start, egress)
	line := fmt.Sprintf("MIGRATE FROM UPSTREAM (%s, shared): %d requests, longest gap between requests seen with %s: %s (lost %d, other source %d); NB transactions: migration %s, second run %s, our master's start %s\n",
		layout, len(probes), eip, longest.Round(time.Millisecond), lost, bad, perZone(txns), perZone(second), perZone(masterTxns))
	checkMigration(t, "migration", line, probes, start, egress, txns, second)
	if up := e.upstreamRows(); len(up) != 0 {
		t.Errorf("upstream rows left: %v", up)
	}
	if got := e.nbRowsOfEgressIPByZone("prod"); !maps.Equal(got, wantOurs) {
		t.Errorf("rows of ours for prod by zone %v, want %v", got, wantOurs)
	}

	// Rollback.
	e.stopOurControllers()
	p = startProber(e, "prod", "web1", 4, 50*time.Millisecond)
	//nolint:forbidigo // the prober's window: requests before the rollback are part of the measured gap
	time.Sleep(500 * time.Millisecond)
	start = time.Now()
	out, txns = e.migrate(t, dbFiles, "--to-upstream")
	t.Logf("migrate --to-upstream:\n%s", out)
	_, second = e.migrate(t, dbFiles, "--to-upstream")
	//nolint:forbidigo // the prober's window: requests after the rollback are part of what is measured
	time.Sleep(time.Second)
	probes = p.finish()
	longest, lost, bad = gap(probes, start, egress)
	line = fmt.Sprintf("MIGRATE TO UPSTREAM (%s, shared): %d requests, longest gap between requests seen with %s: %s (lost %d, other source %d); NB transactions: migration %s, second run %s\n",
		layout, len(probes), eip, longest.Round(time.Millisecond), lost, bad, perZone(txns), perZone(second))
	checkMigration(t, "rollback", line, probes, start, egress, txns, second)
	if n := len(e.nbOwned("Logical_Router_Policy")) + len(e.nbOwned("NAT")) + len(e.nbOwned("Address_Set")); n != 0 {
		t.Errorf("%d rows of ours left after the rollback", n)
	}
	if up := e.upstreamRows(); len(up) == 0 {
		t.Error("no upstream-shaped rows after the rollback")
	}
	// The address sets are upstream's own again (its ids: its controller finds them).
	if got := e.upstreamAddressSetIDs(); !maps.EqualFunc(got, seededSets, slices.Equal) {
		t.Errorf("upstream's address sets after the rollback, by zone: %v; seeded: %v", got, seededSets)
	}
}

// upstreamAddressSetIDs are, by zone, the sorted k8s.ovn.org/id of upstream's egress IP address sets.
func (e *env) upstreamAddressSetIDs() map[string][]string {
	out := map[string][]string{}
	for _, z := range e.zones() {
		ids := []string{}
		for _, r := range e.nbFindIn(e.c.ZoneNBAddress(z), "Address_Set", `external_ids:"k8s.ovn.org/owner-controller"="default-network-controller"`,
			`external_ids:"k8s.ovn.org/owner-type"=EgressIP`) {
			ids = append(ids, r["k8s.ovn.org/id"])
		}
		slices.Sort(ids)
		out[z] = ids
	}
	return out
}

// stopOurControllers stops what writes our NB rows: the master (cluster manager) and, in the interconnect layout,
// the zone controllers, each in one process with its node's daemon (migration.md, step 4 and rollback step 1). In
// the centralized layout the node daemons go on.
func (e *env) stopOurControllers() {
	e.stopMaster("master-a", syscall.SIGTERM)
	if e.interconnect() {
		for _, n := range e.c.Nodes() {
			e.stopNode(n.Name, syscall.SIGTERM)
		}
	}
}

// zones are the zones of the cluster's NBs: "" for the one NB of the centralized layout, every node in the
// interconnect layout (cluster.ZoneNBAddress and NBDBFile take either).
func (e *env) zones() []string {
	if !e.interconnect() {
		return []string{""}
	}
	var out []string
	for _, n := range e.c.Nodes() {
		out = append(out, n.Name)
	}
	return out
}

// nbDBFiles are the database files of the cluster's NBs by zone, to count their transactions; nil when the NB is
// a RAFT cluster.
func (e *env) nbDBFiles() map[string]string {
	out := map[string]string{}
	for _, z := range e.zones() {
		f := e.c.NBDBFile(z)
		if f == "" {
			return nil
		}
		out[z] = f
	}
	return out
}

// nbRowsOfEgressIPByZone is nbRowsOfEgressIP in each zone's NB.
func (e *env) nbRowsOfEgressIPByZone(name string) map[string]int {
	out := map[string]int{}
	for _, z := range e.zones() {
		out[z] = 0
		for _, table := range []string{"Logical_Router_Policy", "NAT"} {
			for _, r := range e.nbFindIn(e.c.ZoneNBAddress(z), table, `external_ids:"k8s.ovn.org/owner-controller"=egressip`) {
				if r["k8s.ovn.org/name"] == name {
					out[z]++
				}
			}
		}
	}
	return out
}

// migrate runs `ovnkube egressip migrate` with args as an admin does, against the cluster's NB (or every zone's,
// --zone-nb-address), and returns its output and, by zone, the NB transactions that touched egressTables meanwhile
// (dbFiles: nbDBFiles).
func (e *env) migrate(t *testing.T, dbFiles map[string]string, args ...string) (string, map[string]int) {
	t.Helper()
	out, txns, err := e.tryMigrate(t, dbFiles, args...)
	if err != nil {
		t.Fatalf("ovnkube egressip migrate %v: %v\n%s", args, err, out)
	}
	return out, txns
}

// tryMigrate is migrate, returning the command's failure.
func (e *env) tryMigrate(t *testing.T, dbFiles map[string]string, args ...string) (string, map[string]int, error) {
	t.Helper()
	before := e.nbTransactions(t, dbFiles)
	cmdArgs := append([]string{"egressip", "migrate"}, e.explainNB()...)
	for _, a := range e.commonArgs(e.c.Kubeconfig()) {
		if a != "--egress-ip-enable" {
			cmdArgs = append(cmdArgs, a)
		}
	}
	out, err := exec.Command(ovnkubeBin, append(cmdArgs, args...)...).CombinedOutput()
	return string(out), since(before, e.nbTransactions(t, dbFiles)), err
}

// nbTransactions counts, by zone, the transactions of each NB database file that touched egressTables.
func (e *env) nbTransactions(t *testing.T, dbFiles map[string]string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for z, f := range dbFiles {
		n, err := nbserver.FileTransactions(f, egressTables...)
		if err != nil {
			t.Fatal(err)
		}
		out[z] = n
	}
	return out
}

// since is, by zone, the transactions of now that were not in before.
func since(before, now map[string]int) map[string]int {
	out := map[string]int{}
	for z, n := range now {
		out[z] = n - before[z]
	}
	return out
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// perZone prints transaction counts by zone: "1" for the one NB, "node1 1, node2 1, ..." per zone.
func perZone(m map[string]int) string {
	if n, ok := m[""]; ok && len(m) == 1 {
		return strconv.Itoa(n)
	}
	var out []string
	for _, z := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s %d", z, m[z]))
	}
	return strings.Join(out, ", ")
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

// upstreamRow is a row upstream's controller has in an NB, and the router (policies, nat) or switch (qos_rules)
// that references it; an address set has neither.
type upstreamRow struct {
	m      model.Model
	router string
	sw     string
}

// upstreamSeed are the rows upstream's controller has, in the NB of zone ("": the one NB of the centralized
// layout), for EgressIP prod serving pod prod/web1 (podIP, on node1) through node2 with egress IP egress
// (/work/shared/INTERCONNECT.md, "Egress IP rows per zone"): the pod's reroute, to node2's gateway router join IP
// (centralized) or, in the pod's zone node1, to node2's transit switch IP; the SNAT on node2's gateway router (in
// node2's zone); and in every NB the no-reroute policies with their address sets (served pods: the NB's own served
// pods) and the reply-traffic mark on the node switch (the pod's, or the zone's own).
func (e *env) upstreamSeed(zone string, podIP, egress netip.Addr) []upstreamRow {
	n2, err := e.c.Node("node2")
	if err != nil {
		e.t.Fatal(err)
	}
	var nodeIPs []string
	for _, n := range e.c.Nodes() {
		nodeIPs = append(nodeIPs, n.NodeIP.String())
	}
	served, sw := []string{}, zone
	if zone == "" || zone == "node1" {
		served, sw = []string{podIP.String()}, "node1"
	}
	cr := "ovn_cluster_router"
	// Upstream names an address set "a" and the decimal FNV-64a hash of its k8s.ovn.org/id.
	rows := []upstreamRow{
		{m: &nbdb.AddressSet{UUID: "served", Name: "a8519615025667110816", Addresses: served,
			ExternalIDs: upstreamExt("k8s.ovn.org/name", "egressip-served-pods", "ip-family", "v4", "network", "default",
				"k8s.ovn.org/id", "default-network-controller:EgressIP:egressip-served-pods:v4:default")}},
		{m: &nbdb.AddressSet{UUID: "nodeips", Name: "a712973235162149816", Addresses: nodeIPs,
			ExternalIDs: upstreamExt("k8s.ovn.org/name", "node-ips", "ip-family", "v4", "network", "default",
				"k8s.ovn.org/id", "default-network-controller:EgressIP:node-ips:v4:default")}},
		{m: noReroute("pod2pod", "EIP-No-Reroute-Pod-To-Pod", fmt.Sprintf("ip4.src == %s && ip4.dst == %s", cluster.ClusterCIDR, cluster.ClusterCIDR)), router: cr},
		{m: noReroute("pod2join", "EIP-No-Reroute-Pod-To-Join", fmt.Sprintf("ip4.src == %s && ip4.dst == %s", cluster.ClusterCIDR, cluster.JoinCIDR)), router: cr},
		{m: noReroute("pod2node", "EIP-No-Reroute-Pod-To-Node", "ip4.src == $a8519615025667110816 && ip4.dst == $a712973235162149816"), router: cr},
		{m: noReroute("reply", "EIP-No-Reroute-reply-traffic", "pkt.mark == 42"), router: cr},
		{m: &nbdb.QoS{UUID: "mark", Priority: 103, Direction: "from-lport", Action: map[string]int{"dscp": 42}, // upstream marks (mark=42): OVN 23.03's schema allows dscp only,
			Match:       fmt.Sprintf("inport == \"k8s-%s\" && ct.trk && ct.rpl", sw),
			ExternalIDs: upstreamExt("k8s.ovn.org/name", "EgressIP-Mark-Reply-Traffic", "ip-family", "ip4", "network", "default")}, sw: sw},
	}
	reroute := func(nexthop netip.Addr) upstreamRow {
		return upstreamRow{m: &nbdb.LogicalRouterPolicy{UUID: "reroute", Priority: 100, Match: "ip4.src == " + podIP.String(), Action: "reroute",
			Nexthops: []string{nexthop.String()}, ExternalIDs: upstreamExt("priority", "100", "k8s.ovn.org/name", "prod_prod/web1",
				"ip-family", "ip4", "network", "default", "k8s.ovn.org/id", "default-network-controller:EgressIP:100:prod_prod/web1:ip4:default")}, router: cr}
	}
	port := "k8s-node2"
	snat := upstreamRow{m: &nbdb.NAT{UUID: "snat", Type: "snat", ExternalIP: egress.String(), LogicalIP: podIP.String(), LogicalPort: &port,
		ExternalIDs: upstreamExt("k8s.ovn.org/name", "prod_prod/web1", "ip-family", "ip4",
			"k8s.ovn.org/id", "default-network-controller:EgressIP:prod_prod/web1:ip4")}, router: "GR_node2"}
	switch zone {
	case "":
		rows = append(rows, reroute(n2.JoinIP), snat)
	case "node1":
		rows = append(rows, reroute(n2.TransitIP))
	case "node2":
		rows = append(rows, snat)
	}
	return rows
}

// writeUpstreamRows makes the NB at address hold what a cluster that ran upstream's egress IP holds, in one
// transaction: it writes rows, and removes every row of ours (the shared rows our controllers wrote when the
// harness started them: a cluster that never ran ovn-egressip has none).
func writeUpstreamRows(t *testing.T, address string, rows []upstreamRow) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dbm, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	c, err := nbserver.NewClient(address, dbm)
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
	add := func(o []ovsdb.Operation, err error) {
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
	}
	mutate := func(m model.Model, field any, mutator ovsdb.Mutator, uuids []string) {
		add(c.Where(m).Mutate(m, model.Mutation{Field: field, Mutator: mutator, Value: uuids}))
	}
	var routers []nbdb.LogicalRouter
	var switches []nbdb.LogicalSwitch
	if err := c.List(ctx, &routers); err != nil {
		t.Fatal(err)
	}
	if err := c.List(ctx, &switches); err != nil {
		t.Fatal(err)
	}
	router := func(name string) *nbdb.LogicalRouter {
		for i := range routers {
			if routers[i].Name == name {
				return &routers[i]
			}
		}
		t.Fatalf("NB %s topology: no router %s", address, name)
		return nil
	}
	// Ours out.
	ours := func(ext map[string]string) bool { return ext["k8s.ovn.org/owner-controller"] == "egressip" }
	var pols []nbdb.LogicalRouterPolicy
	var nats []nbdb.NAT
	var sets []nbdb.AddressSet
	for _, err := range []error{
		c.WhereCache(func(r *nbdb.LogicalRouterPolicy) bool { return ours(r.ExternalIDs) }).List(ctx, &pols),
		c.WhereCache(func(r *nbdb.NAT) bool { return ours(r.ExternalIDs) }).List(ctx, &nats),
		c.WhereCache(func(r *nbdb.AddressSet) bool { return ours(r.ExternalIDs) }).List(ctx, &sets),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	oursUUID := map[string]bool{}
	for _, r := range pols {
		oursUUID[r.UUID] = true
	}
	for _, r := range nats {
		oursUUID[r.UUID] = true
	}
	for i := range routers {
		r := &routers[i]
		if del := slices.DeleteFunc(slices.Clone(r.Policies), func(u string) bool { return !oursUUID[u] }); len(del) > 0 {
			mutate(r, &r.Policies, ovsdb.MutateOperationDelete, del)
		}
		if del := slices.DeleteFunc(slices.Clone(r.Nat), func(u string) bool { return !oursUUID[u] }); len(del) > 0 {
			mutate(r, &r.Nat, ovsdb.MutateOperationDelete, del)
		}
	}
	for i := range sets {
		add(c.Where(&sets[i]).Delete())
	}
	// Upstream's in.
	for _, r := range rows {
		add(c.Create(r.m))
		uuid := nbserver.UUIDOf(r.m)
		switch {
		case r.router != "":
			lr := router(r.router)
			field := any(&lr.Policies)
			if _, ok := r.m.(*nbdb.NAT); ok {
				field = &lr.Nat
			}
			mutate(lr, field, ovsdb.MutateOperationInsert, []string{uuid})
		case r.sw != "":
			i := slices.IndexFunc(switches, func(s nbdb.LogicalSwitch) bool { return s.Name == r.sw })
			if i < 0 {
				t.Fatalf("NB %s topology: no switch %s", address, r.sw)
			}
			mutate(&switches[i], &switches[i].QOSRules, ovsdb.MutateOperationInsert, []string{uuid})
		}
	}
	res, err := c.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		t.Fatalf("NB %s: write upstream's rows: %v", address, err)
	}
}

func noReroute(uuid, name, match string) *nbdb.LogicalRouterPolicy {
	return &nbdb.LogicalRouterPolicy{UUID: uuid, Priority: 102, Match: match, Action: "allow",
		ExternalIDs: upstreamExt("priority", "102", "k8s.ovn.org/name", name, "ip-family", "ip4", "network", "default",
			"k8s.ovn.org/id", "default-network-controller:EgressIP:102:"+name+":ip4:default")}
}

// checkMigration prints and records line (what a migration run measured), and fails t when a request since start
// left with a source other than egress or was lost, or when the run (what) took other than one transaction in each
// NB (txns, by zone) or its second run any.
func checkMigration(t *testing.T, what, line string, probes []probe, start time.Time, egress netip.Addr, txns, second map[string]int) {
	t.Helper()
	fmt.Print(line)
	recordResult(t, line)
	if _, lost, bad := gap(probes, start, egress); bad > 0 || lost > 0 {
		t.Errorf("%d requests left with another source (%s), %d lost", bad, otherSources(probes, start, egress), lost)
	}
	for z, n := range txns {
		if n != 1 || second[z] != 0 {
			t.Errorf("%s: NB %q: %d transactions, second run %d; want 1 and 0", what, z, n, second[z])
		}
	}
}
