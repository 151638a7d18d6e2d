package migrate

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// Upstream's rows, written out as the shared facts give them (not through this
// package's Upstream* functions): EgressIP prod serves pod prod/web1 10.244.1.5
// through node2 (join 100.64.0.3), egress IP 172.18.0.33.
func upstreamExt(kv ...string) map[string]string {
	m := map[string]string{"k8s.ovn.org/owner-controller": "default-network-controller", "k8s.ovn.org/owner-type": "EgressIP"}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

var (
	upReroute = &nbdb.LogicalRouterPolicy{UUID: "upreroute", Priority: 100, Match: "ip4.src == 10.244.1.5", Action: "reroute",
		Nexthops: []string{"100.64.0.3"}, ExternalIDs: upstreamExt("priority", "100", "k8s.ovn.org/name", "prod_prod/web1",
			"ip-family", "ip4", "network", "default", "k8s.ovn.org/id", "default-network-controller:EgressIP:100:prod_prod/web1:ip4:default")}
	upSNAT = &nbdb.NAT{UUID: "upsnat", Type: "snat", ExternalIP: "172.18.0.33", LogicalIP: "10.244.1.5", LogicalPort: ptr("k8s-node2"),
		ExternalIDs: upstreamExt("k8s.ovn.org/name", "prod_prod/web1", "ip-family", "ip4",
			"k8s.ovn.org/id", "default-network-controller:EgressIP:prod_prod/web1:ip4")}
	upPodToPod = &nbdb.LogicalRouterPolicy{UUID: "uppodtopod", Priority: 102, Action: "allow",
		Match:       "ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16",
		ExternalIDs: upstreamExt("priority", "102", "k8s.ovn.org/name", "EIP-No-Reroute-Pod-To-Pod", "ip-family", "ip4", "network", "default")}
	upPodToNode = &nbdb.LogicalRouterPolicy{UUID: "uppodtonode", Priority: 102, Action: "allow",
		Match:       "(ip4.src == $a111 || ip4.src == $a333) && ip4.dst == $a222",
		ExternalIDs: upstreamExt("priority", "102", "k8s.ovn.org/name", "EIP-No-Reroute-Pod-To-Node", "ip-family", "ip4", "network", "default")}
	// Upstream marks (action mark=42); the NB schema here (OVN 23.03) allows dscp only.
	upQoS = &nbdb.QoS{UUID: "upqos", Priority: 103, Direction: "from-lport", Match: "ip4.src == 10.244.1.0/24 && ct.rpl",
		Action: map[string]int{"dscp": 42}, ExternalIDs: upstreamExt("k8s.ovn.org/name", "EgressIP-Mark-Reply-Traffic")}
	upServed  = &nbdb.AddressSet{UUID: "upserved", Name: "a111", Addresses: []string{"10.244.1.5"}, ExternalIDs: upstreamExt("k8s.ovn.org/name", "egressip-served-pods", "network", "default")}
	upNodeIPs = &nbdb.AddressSet{UUID: "upnodeips", Name: "a222", Addresses: []string{"172.18.0.11", "172.18.0.12"}, ExternalIDs: upstreamExt("k8s.ovn.org/name", "node-ips", "network", "default")}
	// An upstream egress IP set that an egress service policy (not of owner type EgressIP) also uses.
	upSvcSet  = &nbdb.AddressSet{UUID: "upsvcset", Name: "a333", Addresses: []string{"10.244.1.9"}, ExternalIDs: upstreamExt("k8s.ovn.org/name", "egresssvc-served-pods", "network", "default")}
	svcPolicy = &nbdb.LogicalRouterPolicy{UUID: "svcpolicy", Priority: 101, Action: "allow", Match: "ip4.src == $a333 && ip4.dst == 10.96.0.0/16",
		ExternalIDs: map[string]string{"k8s.ovn.org/owner-controller": "default-network-controller", "k8s.ovn.org/owner-type": "EgressService"}}
	// Rows of others in the same tables.
	harnessNAT = &nbdb.NAT{UUID: "harnessnat", Type: "snat", ExternalIP: "172.18.0.22", LogicalIP: "10.244.0.0/16", ExternalIDs: map[string]string{"harness": "true"}}
)

func ptr(s string) *string { return &s }

// upstreamCluster is an NB with the topology and upstream's rows for prod, a client of it and what Read reads there
// once the client's cache holds those rows.
func upstreamCluster(t *testing.T, start func(testing.TB) *nbserver.Server) (*nbserver.Server, client.Client, Snapshot) {
	t.Helper()
	s := start(t)
	c := s.Client(t)
	nbserver.Seed(t, c, upReroute, upSNAT, upPodToPod, upPodToNode, upQoS, upServed, upNodeIPs, upSvcSet, svcPolicy, harnessNAT,
		&nbdb.LogicalRouter{UUID: "cr", Name: nbstate.ClusterRouter, Policies: []string{"upreroute", "uppodtopod", "uppodtonode", "svcpolicy"}},
		&nbdb.LogicalRouter{UUID: "gr2", Name: "GR_node2", Nat: []string{"upsnat", "harnessnat"}},
		&nbdb.LogicalRouter{UUID: "gr3", Name: "GR_node3"},
		&nbdb.LogicalSwitch{UUID: "sw1", Name: "node1", QOSRules: []string{"upqos"}})
	snap := waitCache(t, c, func(s Snapshot) bool { return len(s.AddressSets) == 3 && len(s.Routers) == 3 })
	return s, c, snap
}

// servers are the NB servers the tests run against: libovsdb's in-memory one and a real ovsdb-server.
var servers = []struct {
	name  string
	start func(testing.TB) *nbserver.Server
}{{"inmemory", nbserver.StartInMemory}, {"ovsdb-server", nbserver.Start}}

// onServers runs f against each of servers.
func onServers(t *testing.T, f func(t *testing.T, start func(testing.TB) *nbserver.Server)) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) { f(t, srv.start) })
	}
}

// waitCache waits until the client's cache shows ok (the server's update after a
// transaction reaches the cache asynchronously).
func waitCache(t *testing.T, c client.Client, ok func(Snapshot) bool) Snapshot {
	t.Helper()
	var s Snapshot
	waitfor.True(t, 5*time.Second, 5*time.Millisecond, "the client's cache matches", func() (bool, string) {
		var err error
		s, err = Read(context.Background(), c)
		return err == nil && ok(s), fmt.Sprintf("last read error %v", err)
	})
	return s
}

// desiredProd is ours for EgressIP prod (172.18.0.33 on node2) serving pods, composed from nbstate's pieces as the
// master's plan composes them: the shared rows with the served-pods address set, and each pod's rows under the
// EgressIP's routes.
func desiredProd(pods ...nbstate.Pod) nbstate.State {
	in := nbstate.Input{Mode: gwmode.Shared,
		ClusterSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		JoinSubnets:    []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")},
		Nodes: map[string]nbstate.Node{
			"node1": {Name: "node1", JoinIPs: []netip.Addr{netip.MustParseAddr("100.64.0.2")}, Addresses: []netip.Addr{netip.MustParseAddr("172.18.0.11")}},
			"node2": {Name: "node2", JoinIPs: []netip.Addr{netip.MustParseAddr("100.64.0.3")}, Addresses: []netip.Addr{netip.MustParseAddr("172.18.0.12")}},
		},
	}
	e := nbstate.EgressIP{Name: "prod", Assigned: []nbstate.Assignment{{Node: "node2", IP: netip.MustParseAddr("172.18.0.33")}}}
	st, routes, served := nbstate.ClusterRows(in), nbstate.Routes(in, e), []string{}
	for _, p := range pods {
		rows, ips := nbstate.PodRows(in.Mode, "", e.Name, routes, p, func(netip.Addr) bool { return true })
		maps.Copy(st.Policies, rows.Policies)
		maps.Copy(st.NATs, rows.NATs)
		for _, ip := range ips {
			served = append(served, ip.String())
		}
	}
	slices.Sort(served)
	st.AddressSets[nbstate.ServedPodsKey(nbstate.FamilyIPv4)] = nbstate.ServedPodsRow(nbstate.FamilyIPv4, served)
	return st
}

var web1 = nbstate.Pod{Namespace: "prod", Name: "web1", IPs: []netip.Addr{netip.MustParseAddr("10.244.1.5")}, Node: "node1"}

// allRows dumps every row of the tables egress IP rows live in, with its parent.
func allRows(t *testing.T, c client.Client) []string {
	t.Helper()
	s, err := Read(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	parents := parentIndex(s)
	var out []string
	for u, p := range s.Policies {
		out = append(out, "policy "+names(parents[u])+" "+p.Match+" "+strings.Join(p.Nexthops, ",")+" "+extString(p.ExternalIDs))
	}
	for u, n := range s.NATs {
		out = append(out, "nat "+names(parents[u])+" "+n.LogicalIP+"->"+n.ExternalIP+" "+extString(n.ExternalIDs))
	}
	for u, q := range s.QoS {
		out = append(out, "qos "+names(parents[u])+" "+q.Match+" "+extString(q.ExternalIDs))
	}
	for _, a := range s.AddressSets {
		out = append(out, "set "+a.Name+" "+strings.Join(a.Addresses, ",")+" "+extString(a.ExternalIDs))
	}
	sort.Strings(out)
	return out
}

func extString(m map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		kv = append(kv, k+"="+m[k])
	}
	return strings.Join(kv, ",")
}

// commitOnce commits plan and fails t unless it wrote, in exactly one NB transaction.
func commitOnce(ctx context.Context, t *testing.T, s *nbserver.Server, c client.Client, plan Plan) {
	t.Helper()
	before := s.Transactions()
	if ok, err := Commit(ctx, c, plan); err != nil || !ok {
		t.Fatalf("commit: %v %v\n%s", ok, err, strings.Join(plan.Lines(), "\n"))
	}
	if n := s.Transactions() - before; n != 1 {
		t.Errorf("%d transactions, want 1", n)
	}
}

func TestFromUpstreamOneTransaction(t *testing.T) { onServers(t, testFromUpstreamOneTransaction) }

func testFromUpstreamOneTransaction(t *testing.T, start func(testing.TB) *nbserver.Server) {
	s, c, snap := upstreamCluster(t, start)
	ctx := context.Background()
	desired := desiredProd(web1)
	plan := FromUpstream(snap, desired, gwmode.Shared)
	if err := plan.Refuse(false); err != nil {
		t.Fatalf("refused: %v\n%s", err, strings.Join(plan.Lines(), "\n"))
	}
	if len(plan.Notes) != 0 {
		t.Errorf("notes %v, want none (same holder, same source)", plan.Notes)
	}
	commitOnce(ctx, t, s, c, plan)
	after := waitCache(t, c, func(s Snapshot) bool { return len(s.Ours.Rows.Policies) > 0 })
	// Ours are as the master plans them: nothing left to change.
	if again := nbstate.Diff(desired, after.Ours); len(again.Changes) != 0 || len(again.Skipped) != 0 {
		t.Errorf("after migration, ours differ from desired: %+v", again)
	}
	// Upstream's are gone, but the set the egress service policy uses; others' rows stay.
	var upstream []string
	for _, r := range allRows(t, c) {
		if strings.Contains(r, "owner-controller=default-network-controller") {
			upstream = append(upstream, r)
		}
	}
	want := []string{
		"policy ovn_cluster_router ip4.src == $a333 && ip4.dst == 10.96.0.0/16  k8s.ovn.org/owner-controller=default-network-controller,k8s.ovn.org/owner-type=EgressService",
		"set a333 10.244.1.9 k8s.ovn.org/name=egresssvc-served-pods,k8s.ovn.org/owner-controller=default-network-controller,k8s.ovn.org/owner-type=EgressIP,network=default",
	}
	if !slices.Equal(upstream, want) {
		t.Errorf("upstream rows after migration:\n%s\nwant:\n%s", strings.Join(upstream, "\n"), strings.Join(want, "\n"))
	}
	if !slices.Contains(allRows(t, c), "nat GR_node2 10.244.0.0/16->172.18.0.22 harness=true") {
		t.Errorf("the harness' NAT row is gone:\n%s", strings.Join(allRows(t, c), "\n"))
	}
	if len(plan.Kept) != 1 || !strings.Contains(plan.Kept[0], "a333") {
		t.Errorf("kept %v, want the egress service's set a333", plan.Kept)
	}

	// A second run: nothing to do, no transaction.
	second := FromUpstream(after, desired, gwmode.Shared)
	before := s.Transactions()
	if ok, err := Commit(ctx, c, second); err != nil || ok || !second.Empty() {
		t.Errorf("second run: committed %v, err %v, plan %v", ok, err, second.Lines())
	}
	if n := s.Transactions() - before; n != 0 {
		t.Errorf("second run: %d transactions, want 0", n)
	}
}

func TestFromUpstreamRefusesUnserved(t *testing.T) { onServers(t, testFromUpstreamRefusesUnserved) }

func testFromUpstreamRefusesUnserved(t *testing.T, start func(testing.TB) *nbserver.Server) {
	s, _, snap := upstreamCluster(t, start)
	// Ours serves no pod (say, its selector matches none): upstream serves web1.
	plan := FromUpstream(snap, desiredProd(), gwmode.Shared)
	err := plan.Refuse(false)
	if err == nil || !strings.Contains(err.Error(), "10.244.1.5") {
		t.Fatalf("refusal %v, want one naming 10.244.1.5; unserved %v", err, plan.Unserved)
	}
	if plan.Refuse(true) != nil {
		t.Error("--allow-unserved still refuses")
	}
	if s.Transactions() != 1 { // the seed
		t.Errorf("%d transactions, want only the seed's", s.Transactions())
	}
	// A missing gateway router: ours cannot write the SNAT upstream has there.
	noGR := snap
	noGR.Ours.Routers = maps.Clone(snap.Ours.Routers)
	delete(noGR.Ours.Routers, "GR_node2")
	plan = FromUpstream(noGR, desiredProd(web1), gwmode.Shared)
	if err := plan.Refuse(false); err == nil || !strings.Contains(err.Error(), "SNAT to 172.18.0.33") {
		t.Errorf("refusal %v, want the SNAT ours cannot write; notes %v", err, plan.Notes)
	}
}

func TestToUpstreamAndBack(t *testing.T) { onServers(t, testToUpstreamAndBack) }

func testToUpstreamAndBack(t *testing.T, start func(testing.TB) *nbserver.Server) {
	s, c, snap := upstreamCluster(t, start)
	ctx := context.Background()
	desired := desiredProd(web1)
	if _, err := Commit(ctx, c, FromUpstream(snap, desired, gwmode.Shared)); err != nil {
		t.Fatal(err)
	}
	snap = waitCache(t, c, func(s Snapshot) bool { return len(s.Ours.Rows.Policies) > 0 })

	back := ToUpstream(snap)
	commitOnce(ctx, t, s, c, back)
	snap = waitCache(t, c, func(s Snapshot) bool { return len(s.Ours.Rows.Policies) == 0 })
	if snap.Ours.Rows.Len() != 0 {
		t.Errorf("rows of ours left: %v", nbstate.Dump(snap.Ours.Rows))
	}
	rows := allRows(t, c)
	// The reroute and the SNAT are exactly as upstream writes them.
	for _, want := range []string{
		"policy ovn_cluster_router ip4.src == 10.244.1.5 100.64.0.3 " + extString(upReroute.ExternalIDs),
		"nat GR_node2 10.244.1.5->172.18.0.33 " + extString(upSNAT.ExternalIDs),
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("missing %s in\n%s", want, strings.Join(rows, "\n"))
		}
	}
	var logicalPort string
	for _, n := range snap.NATs {
		if IsUpstream(n.ExternalIDs) && n.LogicalPort != nil {
			logicalPort = *n.LogicalPort
		}
	}
	if logicalPort != "k8s-node2" {
		t.Errorf("upstream SNAT logical_port %q, want k8s-node2", logicalPort)
	}
	// The pod-to-node no-reroute names the upstream-shaped sets, which exist.
	for _, p := range snap.Policies {
		if p.ExternalIDs[UpstreamNameKey] != UpstreamNoReroutePodToNode {
			continue
		}
		served := UpstreamAddressSet(UpstreamServedPods, "ip4", nil).Name
		nodeIPs := UpstreamAddressSet(UpstreamNodeIPs, "ip4", nil).Name
		if p.Match != "ip4.src == $"+served+" && ip4.dst == $"+nodeIPs {
			t.Errorf("pod-to-node match %q", p.Match)
		}
		for _, name := range []string{served, nodeIPs} {
			if referencing([]string{p.Match}, name) == "" || !slices.ContainsFunc(snap.AddressSets, func(a *nbdb.AddressSet) bool { return a.Name == name }) {
				t.Errorf("address set %s not created", name)
			}
		}
	}

	// A second run: nothing of ours left, no transaction.
	before := s.Transactions()
	if ok, err := Commit(ctx, c, ToUpstream(snap)); ok || err != nil {
		t.Errorf("second run: %v %v", ok, err)
	}
	// And forward again: the rows ToUpstream wrote are found as upstream's and replaced.
	fwd := FromUpstream(snap, desired, gwmode.Shared)
	if err := fwd.Refuse(false); err != nil || len(fwd.Notes) != 0 {
		t.Fatalf("forward again: %v, notes %v", err, fwd.Notes)
	}
	if _, err := Commit(ctx, c, fwd); err != nil {
		t.Fatal(err)
	}
	if n := s.Transactions() - before; n != 1 {
		t.Errorf("%d transactions back and forth again, want 1", n)
	}
	snap = waitCache(t, c, func(s Snapshot) bool { return len(s.Ours.Rows.Policies) > 0 })
	if again := nbstate.Diff(desired, snap.Ours); len(again.Changes) != 0 {
		t.Errorf("ours after the round trip differ from desired: %d changes", len(again.Changes))
	}
}

// TestUpstreamAddressSetShape: the address sets --to-upstream writes carry the id upstream gives its egress IP
// address sets, its keys in upstream's order (name, ip-family, network), and upstream's row name for that id ("a"
// and the decimal FNV-64a hash of the id), so that upstream's controller finds them as its own. Written out here,
// not computed with the code under test.
func TestUpstreamAddressSetShape(t *testing.T) {
	for _, tc := range []struct{ name, fam, id, row string }{
		{UpstreamServedPods, "ip4", "default-network-controller:EgressIP:egressip-served-pods:v4:default", "a8519615025667110816"},
		{UpstreamNodeIPs, "ip4", "default-network-controller:EgressIP:node-ips:v4:default", "a712973235162149816"},
	} {
		as := UpstreamAddressSet(tc.name, tc.fam, nil)
		if got := as.ExternalIDs[UpstreamIDKey]; got != tc.id {
			t.Errorf("%s %s: k8s.ovn.org/id %q, want upstream's %q", tc.name, tc.fam, got, tc.id)
		}
		if as.Name != tc.row {
			t.Errorf("%s %s: name %s, want upstream's %s", tc.name, tc.fam, as.Name, tc.row)
		}
		want := upstreamExt("k8s.ovn.org/name", tc.name, "ip-family", "v4", "network", "default", "k8s.ovn.org/id", tc.id)
		if !maps.Equal(as.ExternalIDs, want) {
			t.Errorf("%s %s: external_ids %v, want %v", tc.name, tc.fam, as.ExternalIDs, want)
		}
	}
}

func TestReferencing(t *testing.T) {
	for _, tc := range []struct {
		match, name string
		want        bool
	}{
		{"ip4.src == $a1 && ip4.dst == $a2", "a1", true},
		{"ip4.src == $a12", "a1", false},
		{"ip4.src == $a1_v4", "a1", false},
		{"(ip4.src == $a12 || ip4.src == $a1)", "a1", true},
		{"ip4.src == a1", "a1", false},
	} {
		if got := referencing([]string{tc.match}, tc.name) != ""; got != tc.want {
			t.Errorf("referencing(%q, %q) = %v, want %v", tc.match, tc.name, got, tc.want)
		}
	}
}
