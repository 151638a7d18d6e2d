package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

func TestZoneTopology(t *testing.T) {
	var nodes []NodeAddrs
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, addrsMust(t, i, FamilyDual))
	}
	rows := buildZoneTopology(nodes, nodes[1], gwmode.Shared)
	var ts *nbdb.LogicalSwitch
	lsps := map[string]*nbdb.LogicalSwitchPort{}
	switches := map[string]bool{}
	routes := map[string]string{}
	var lrps []string
	for _, r := range rows {
		switch v := r.(type) {
		case *nbdb.LogicalSwitch:
			switches[v.Name] = true
			if v.Name == TransitSwitch {
				ts = v
			}
		case *nbdb.LogicalSwitchPort:
			lsps[v.Name] = v
		case *nbdb.LogicalRouterStaticRoute:
			routes[v.IPPrefix] = v.Nexthop
		case *nbdb.LogicalRouterPort:
			lrps = append(lrps, v.Name+"="+strings.Join(v.Networks, ","))
		case *nbdb.LogicalRouter:
			if strings.HasPrefix(v.Name, "GR_") && (v.Name != "GR_node2" || v.Options["chassis"] != "chassis-node2") {
				t.Errorf("zone node2 has router %s options %v", v.Name, v.Options)
			}
		}
	}
	if ts == nil || ts.OtherConfig["interconn-ts"] != TransitSwitch || ts.OtherConfig["requested-tnl-key"] != "16711683" {
		t.Fatalf("transit switch = %+v", ts)
	}
	for _, sw := range []string{"node1", "node3", hostPortSwitch, "ext_node1"} {
		if switches[sw] {
			t.Errorf("zone node2 has switch %s", sw)
		}
	}
	if !switches["node2"] || !switches["ext_node2"] || !switches[JoinSwitch] {
		t.Errorf("zone node2 switches %v", switches)
	}
	if p := lsps["tstor-node2"]; p == nil || p.Type != "router" || p.Options["router-port"] != "rtots-node2" || p.Options["requested-tnl-key"] != "3" {
		t.Errorf("tstor-node2 = %+v", p)
	}
	if p := lsps["tstor-node3"]; p == nil || p.Type != "remote" || p.Options["requested-tnl-key"] != "4" ||
		p.Options["requested-chassis"] != "chassis-node3" || p.Addresses[0] != "0a:58:64:58:00:04 100.88.0.4/16 fd97::4/64" {
		t.Errorf("tstor-node3 = %+v", p)
	}
	if !strings.Contains(strings.Join(lrps, " "), "rtots-node2=100.88.0.3/16,fd97::3/64") {
		t.Errorf("router ports %v", lrps)
	}
	for prefix, nh := range map[string]string{"10.244.1.0/24": "100.88.0.2", "100.64.0.2/32": "100.88.0.2",
		"10.244.3.0/24": "100.88.0.4", "fd98::4/128": "fd97::4", "10.244.0.0/24": "100.88.0.2", "fd00:10:244:3::/64": "fd97::4",
		"10.244.2.0/24": "100.64.0.3", "10.244.0.0/16": "100.64.0.3"} {
		if routes[prefix] != nh {
			t.Errorf("route %s -> %q, want %s", prefix, routes[prefix], nh)
		}
	}
	n := nodeObjectIn(nodes[0], LayoutInterconnect)
	for k, want := range map[string]string{annNodeID: "2", annTransitIfAddr: `{"ipv4":"100.88.0.2/16","ipv6":"fd97::2/64"}`,
		annChassisID: "chassis-node1", annEncapIPs: `["100.89.0.2"]`} {
		if n.Annotations[k] != want {
			t.Errorf("%s = %q, want %q", k, n.Annotations[k], want)
		}
	}
	if c := nodeObjectIn(nodes[0], LayoutCentralized); c.Annotations[annChassisID] != Chassis || c.Annotations[annNodeID] != "2" {
		t.Errorf("centralized annotations %v", c.Annotations)
	}
}

// TestInterconnectCluster brings the interconnect layout up (one OVN zone per node) and checks with real packets:
// pod to pod across zones over the transit switch (Geneve, encapsulated and decapsulated by the userspace
// datapath), each pod's default egress through its own GR, and a hand-written egress IP path across zones (shared
// gateway mode: the holder's GR SNATs; local gateway mode: the holder's host SNATs). Root only.
func TestInterconnectCluster(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local cluster needs root (network namespaces, OVS, iptables)")
	}
	// about 10 s each
	combos := []struct {
		mode   gwmode.Mode
		family string
	}{{gwmode.Shared, FamilyIPv4}, {gwmode.Local, FamilyIPv4}, {gwmode.Shared, FamilyDual}}
	for _, tc := range combos {
		t.Run(string(tc.mode)+"/"+tc.family, func(t *testing.T) { testInterconnect(t, tc.mode, tc.family) })
	}
}

func testInterconnect(t *testing.T, mode gwmode.Mode, family string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, cfg := upInTemp(ctx, t, "oeip-ic-", Config{Nodes: 3, GatewayMode: mode, IPFamily: family, Layout: LayoutInterconnect, Logf: t.Logf})
	state := cfg.StateDir
	// Up again is a no-op on a healthy cluster of the same config (every zone's daemons run).
	checkUpAgainKeeps(ctx, t, cfg, c.p.pidfile(zonePidName("node3", "ovn-controller")), "zone node3's ovn-controller")
	if c.Layout() != LayoutInterconnect || c.NBAddress() != "" || c.ZoneNBAddress("node2") != "unix:"+filepath.Join(c.StateDir(), "run", "node2", "ovnnb_db.sock") {
		t.Errorf("layout %q NBAddress %q ZoneNBAddress(node2) %q", c.Layout(), c.NBAddress(), c.ZoneNBAddress("node2"))
	}
	node, err := c.Client().CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
	if err != nil || node.Annotations[annNodeID] != "3" || node.Annotations[annChassisID] != "chassis-node2" {
		t.Errorf("node2 annotations %v (%v)", node.Annotations, err)
	}
	// Each zone's NB has only its own node; the TCP listener answers.
	out, err := run(ctx, "ovn-nbctl", "--db="+c.ZoneNBTCPAddress("node1"), "--bare", "--columns=name", "list", "logical_switch")
	if err != nil || strings.Contains(out, "node2") || !strings.Contains(out, "node1") || !strings.Contains(out, TransitSwitch) {
		t.Errorf("zone node1 switches: %q (%v)", out, err)
	}

	a, err := c.CreatePod(ctx, PodSpec{Namespace: "prod", Name: "a", Node: "node1"})
	if err != nil {
		t.Fatalf("CreatePod a: %v", err)
	}
	b, err := c.CreatePod(ctx, PodSpec{Namespace: "prod", Name: "b", Node: "node2"})
	if err != nil {
		t.Fatalf("CreatePod b: %v", err)
	}
	if err := c.WaitDataPath(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	// (1) pod to pod across zones: over the transit switch, Geneve-encapsulated between chassis-node1 and -node2.
	for i := range c.Families() {
		if out, err := c.Exec(ctx, "prod", "a", "ping", "-c3", "-i0.2", "-W2", b.IPs[i].String()); err != nil {
			t.Errorf("pod a (node1) -> pod b (node2) %s: %v: %s", b.IPs[i], err, out)
		} else {
			t.Logf("a -> b %s: %s", b.IPs[i], lastLine(out))
		}
	}
	// node1's own ovs-vswitchd encapsulated the request (tnl_push) and decapsulated the reply (tnl_pop).
	flows, err := run(ctx, ovs("ovs-appctl"), "-t", c.ZoneVswitchdCtl("node1"), "dpctl/dump-flows")
	if err != nil {
		t.Fatal(err)
	}
	push, pop := tunnelFlows(flows)
	if push == "" || pop == "" {
		t.Errorf("no Geneve tnl_push and tunnel-receive datapath flows with packets in chassis node1 after pod-to-pod:\n%s", flows)
	} else {
		t.Logf("datapath of chassis node1: %s\ndatapath of chassis node1: %s", push, pop)
	}
	for _, n := range []string{"node1", "node2"} {
		tunnels, err := zoneVsctl(ctx, c.p, n, "--bare", "--columns=name,options", "find", "interface", "type=geneve")
		t.Logf("chassis %s Geneve tunnel ports (%v):\n%s", n, err, tunnels)
	}
	// ovs-vswitchd of chassis node1 crashes: its monitor restarts it; its bridges come back from its database, and
	// the tunnel neighbour is resolved again (ARP).
	if mode == gwmode.Shared && family == FamilyIPv4 {
		pid, err := readPid(c.ZoneVswitchdPidfile("node1"))
		if err != nil {
			t.Fatal(err)
		}
		_ = syscall.Kill(pid, syscall.SIGABRT) // a crash: its monitor restarts it
		t1 := time.Now()
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		err = poll(pctx, 200*time.Millisecond, func() (bool, error) {
			_, err := c.Exec(pctx, "prod", "a", "ping", "-c1", "-W1", b.IP.String())
			return err == nil, nil
		})
		pcancel()
		if err != nil || time.Since(t1) > 20*time.Second {
			t.Errorf("pod a -> pod b after chassis node1's ovs-vswitchd was aborted: %v after %.1fs", err, time.Since(t1).Seconds())
		} else {
			t.Logf("pod a -> pod b again %.1fs after chassis node1's ovs-vswitchd (pid %d) was aborted", time.Since(t1).Seconds(), pid)
		}
	}
	// The root namespace (the master's health checks) reaches every management port across the zones.
	for _, n := range c.Nodes() {
		if out, err := run(ctx, "ping", "-c1", "-W2", n.MgmtIP.String()); err != nil {
			t.Errorf("root ns -> %s management IP %s: %v: %s", n.Name, n.MgmtIP, err, out)
		}
	}

	// (2) default egress (no egress IP): each pod through its own node's GR (shared) or host (local).
	for _, p := range []*Pod{a, b} {
		for _, fam := range c.Families() {
			want, err := c.EgressSourceFamily(p.Node, fam)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.RequestFamily(ctx, p.Namespace, p.Name, fam, "tcp", 3*time.Second)
			if err != nil || got != want {
				t.Errorf("pod %s (%s) IPv%d default egress: echo saw %s (%v), want %s", p.Name, p.Node, fam, got, err, want)
			} else {
				t.Logf("pod %s (%s) IPv%d default egress: echo saw %s", p.Name, p.Node, fam, got)
			}
		}
	}

	// Each chassis has its own conntrack, as a real node: in shared gateway mode pod b's egress is SNATed by GR_node2
	// (chassis node2), and only chassis node2's datapath holds that connection.
	if mode == gwmode.Shared {
		ct1, err1 := run(ctx, ovs("ovs-appctl"), "-t", c.ZoneVswitchdCtl("node1"), "dpctl/dump-conntrack")
		ct2, err2 := run(ctx, ovs("ovs-appctl"), "-t", c.ZoneVswitchdCtl("node2"), "dpctl/dump-conntrack")
		if err1 != nil || err2 != nil {
			t.Fatalf("dump-conntrack: %v %v", err1, err2)
		}
		bSrc := "src=" + b.IP.String() + ","
		if !strings.Contains(ct2, bSrc) || strings.Contains(ct1, bSrc) {
			t.Errorf("pod b's (node2) egress connections in chassis node2's conntrack: %v, in chassis node1's: %v (want only node2's)\nnode1:\n%s\nnode2:\n%s",
				strings.Contains(ct2, bSrc), strings.Contains(ct1, bSrc), ct1, ct2)
		}
	}

	// (3) a hand-written egress IP 172.18.0.50 for pod a (node1), held by node2.
	eip := netip.MustParseAddr("172.18.0.50")
	n2, err := c.Node("node2")
	if err != nil {
		t.Fatal(err)
	}
	undo, err := handEgressIP(ctx, c, a.IP, n2, eip)
	if err != nil {
		t.Fatalf("egress IP rows: %v", err)
	}
	if err := c.WaitDataPath(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := c.Request(ctx, "prod", "a", "tcp", 3*time.Second)
	if err != nil || got != eip {
		t.Errorf("pod a with egress IP held by node2 (%s mode): echo saw %s (%v), want %s", mode, got, err, eip)
	} else {
		t.Logf("pod a (node1) with egress IP on node2 (%s mode): echo saw %s", mode, got)
	}
	if got, err := c.Request(ctx, "prod", "a", "udp", 3*time.Second); err != nil || got != eip {
		t.Errorf("pod a udp with egress IP: echo saw %s (%v), want %s", got, err, eip)
	}
	if err := undo(ctx); err != nil {
		t.Errorf("removing the egress IP rows: %v", err)
	}
	if err := c.WaitDataPath(ctx, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	want, err := c.EgressSource("node1")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Request(ctx, "prod", "a", "tcp", 3*time.Second); err != nil || got != want {
		t.Errorf("pod a after the egress IP rows are gone: echo saw %s (%v), want %s", got, err, want)
	}

	// (4) zone node2's NB and SB (and northd) killed and started again: the rows are back from disk, the data path
	// follows (northd and ovn-controller reconnect), and a zone's databases stay the zone's.
	if mode == gwmode.Shared && family == FamilyIPv4 {
		if err := c.StopZoneDatabases(ctx, "node2", true); err != nil {
			t.Fatalf("StopZoneDatabases: %v", err)
		}
		if _, err := run(ctx, "ovn-nbctl", "--db="+c.ZoneNBAddress("node2"), "--timeout=2", "ls-list"); err == nil {
			t.Error("zone node2's NB answers after StopZoneDatabases")
		}
		if err := c.StartZoneDatabases(ctx, "node2", true); err != nil {
			t.Fatalf("StartZoneDatabases: %v", err)
		}
		t1 := time.Now()
		out, err := run(ctx, "ovn-nbctl", "--db="+c.ZoneNBAddress("node2"), "--timeout=10", "--bare", "--columns=name", "find",
			"logical_switch_port", "name="+b.LSP)
		if err != nil || strings.TrimSpace(out) != b.LSP {
			t.Errorf("zone node2's NB after the restart: pod b's port %q: %q (%v)", b.LSP, out, err)
		}
		if err := c.WaitDataPath(ctx, 30*time.Second); err != nil {
			t.Errorf("data path after zone node2's databases restarted: %v", err)
		}
		pctx, pcancel := context.WithTimeout(ctx, 20*time.Second)
		err = poll(pctx, 200*time.Millisecond, func() (bool, error) {
			_, err := c.Exec(pctx, "prod", "a", "ping", "-c1", "-W1", b.IP.String())
			return err == nil, nil
		})
		pcancel()
		if err != nil {
			t.Errorf("pod a -> pod b after zone node2's databases restarted: %v", err)
		} else {
			t.Logf("zone node2's NB, SB and northd restarted: data path in sync and pod a -> pod b again %.1fs later", time.Since(t1).Seconds())
		}
		if err := c.StopZoneDatabases(ctx, "node2", false); err != nil {
			t.Fatal(err)
		}
		if err := c.StartZoneDatabases(ctx, "node2", false); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitDataPath(ctx, 30*time.Second); err != nil {
			t.Errorf("data path after zone node2's NB and SB (not northd) restarted: %v", err)
		}
	}

	if err := c.DeletePod(ctx, "prod", "b"); err != nil {
		t.Errorf("DeletePod: %v", err)
	}
	t0 := time.Now()
	if err := Down(ctx, state); err != nil {
		t.Fatalf("Down: %v", err)
	}
	t.Logf("cluster down in %.1fs", time.Since(t0).Seconds())
	if out, err := run(ctx, "sh", "-c", "pgrep -a -x 'ovsdb-server|ovn-northd|ovn-controller|ovs-vswitchd' || true"); err != nil || strings.Contains(out, state) {
		t.Errorf("daemons of the cluster left (%v):\n%s", err, out)
	}
	taps, err := interconnectTaps()
	if err != nil {
		t.Error(err)
	}
	checkNothingLeft(t, state, taps...)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// tunnelFlows returns a datapath flow that Geneve-encapsulates (tnl_push, and tnl_pop at the receiving endpoint)
// and one that matches the decapsulated packet's tunnel metadata, each with packets.
func tunnelFlows(dump string) (push, pop string) {
	for _, l := range strings.Split(dump, "\n") {
		if strings.Contains(l, "packets:0,") {
			continue
		}
		if push == "" && strings.Contains(l, "tnl_push(") && strings.Contains(l, "geneve(") {
			push = l
		}
		if pop == "" && strings.Contains(l, "tunnel(") && strings.Contains(l, "geneve(") {
			pop = l // the decapsulated packet, taken by the receiving chassis' tunnel port
		}
	}
	return push, pop
}

// handEgressIP writes what an egress IP controller writes for pod IP podIP (zone node1) held by holder (another
// zone), with the harness' NB client: in the pod's zone a priority-100 reroute to the holder's transit IP; in the
// holder's zone a priority-100 reroute to its GR join IP and an SNAT on its GR (shared gateway mode), or a reroute
// to its management port IP and an iptables SNAT in its host (local gateway mode). It returns the undo.
func handEgressIP(ctx context.Context, c *Cluster, podIP netip.Addr, holder NodeAddrs, eip netip.Addr) (func(context.Context) error, error) {
	match := fmt.Sprintf("ip4.src == %s", podIP)
	ids := harnessIDs("test", "interconnect-egressip")
	nb1, err := c.nbConnFor(ctx, "node1")
	if err != nil {
		return nil, err
	}
	nbH, err := c.nbConnFor(ctx, holder.Name)
	if err != nil {
		return nil, err
	}
	var undo []func(context.Context) error
	undoAll := func(ctx context.Context) error {
		var errs []string
		for i := len(undo) - 1; i >= 0; i-- {
			if err := undo[i](ctx); err != nil {
				errs = append(errs, err.Error())
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "; "))
		}
		return nil
	}
	add := func(nb *nbConn, router string, row model.Model) error {
		u, err := insertOnRouter(ctx, nb, router, row)
		if err != nil {
			return err
		}
		undo = append(undo, func(ctx context.Context) error { return deleteFromRouter(ctx, nb, router, row, u) })
		return nil
	}
	if err := add(nb1, ClusterRouter, &nbdb.LogicalRouterPolicy{UUID: "u_pol1", Priority: 100, Match: match,
		Action: nbdb.LogicalRouterPolicyActionReroute, Nexthops: []string{holder.TransitIP.String()}, ExternalIDs: ids}); err != nil {
		return nil, err
	}
	nh := holder.JoinIP
	if c.GatewayMode() == gwmode.Local {
		nh = holder.MgmtIP
	}
	if err := add(nbH, ClusterRouter, &nbdb.LogicalRouterPolicy{UUID: "u_pol2", Priority: 100, Match: match,
		Action: nbdb.LogicalRouterPolicyActionReroute, Nexthops: []string{nh.String()}, ExternalIDs: ids}); err != nil {
		return nil, errors.Join(err, undoAll(ctx))
	}
	if c.GatewayMode() == gwmode.Shared {
		lp := MgmtPort(holder.Name)
		if err := add(nbH, GatewayRouter(holder.Name), &nbdb.NAT{UUID: "u_nat", Type: nbdb.NATTypeSNAT, ExternalIP: eip.String(),
			LogicalIP: podIP.String(), LogicalPort: &lp, ExternalIDs: ids}); err != nil {
			return nil, errors.Join(err, undoAll(ctx))
		}
		return undoAll, nil
	}
	// local gateway mode: the holder's host owns the egress IP and SNATs the pod's traffic to it (before the
	// harness' MASQUERADE)
	ns := NodeNetnsName(holder.Name)
	snat := fmt.Sprintf("POSTROUTING -s %s/32 -o eth0 -m comment --comment %s-test -j SNAT --to-source %s", podIP, HarnessKey, eip)
	if err := inNetns(ctx, ns, fmt.Sprintf("ip addr add %s/32 dev eth0\niptables -t nat -I %s", eip, snat)); err != nil {
		return nil, errors.Join(err, undoAll(ctx))
	}
	undo = append(undo, func(ctx context.Context) error {
		return inNetns(ctx, ns, fmt.Sprintf("iptables -t nat -D %s\nip addr del %s/32 dev eth0", snat, eip))
	})
	return undoAll, nil
}

// insertOnRouter inserts row (a Logical_Router_Policy or a NAT with a named UUID) and adds it to router's policies
// or NAT in one transaction; it returns the row's UUID.
func insertOnRouter(ctx context.Context, nb *nbConn, router string, row model.Model) (string, error) {
	ops, err := nb.c.Create(row)
	if err != nil {
		return "", err
	}
	lr := &nbdb.LogicalRouter{}
	mut, err := nb.c.WhereAll(lr, model.Condition{Field: &lr.Name, Function: ovsdb.ConditionEqual, Value: router}).
		Mutate(lr, model.Mutation{Field: routerColumn(lr, row), Mutator: ovsdb.MutateOperationInsert, Value: []string{nbserver.UUIDOf(row)}})
	if err != nil {
		return "", err
	}
	ops = append(ops, mut...)
	res, err := nb.c.Transact(ctx, ops...)
	if err != nil {
		return "", err
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return "", err
	}
	if len(res) < 2 || res[1].Count != 1 {
		return "", fmt.Errorf("router %s not found", router)
	}
	return res[0].UUID.GoUUID, nil
}

// deleteFromRouter removes the row with uuid from router (the database garbage-collects it).
func deleteFromRouter(ctx context.Context, nb *nbConn, router string, row model.Model, uuid string) error {
	lr := &nbdb.LogicalRouter{}
	ops, err := nb.c.WhereAll(lr, model.Condition{Field: &lr.Name, Function: ovsdb.ConditionEqual, Value: router}).
		Mutate(lr, model.Mutation{Field: routerColumn(lr, row), Mutator: ovsdb.MutateOperationDelete, Value: []string{uuid}})
	if err != nil {
		return err
	}
	return nb.transact(ctx, ops)
}

func routerColumn(lr *nbdb.LogicalRouter, row model.Model) any {
	if _, ok := row.(*nbdb.NAT); ok {
		return &lr.Nat
	}
	return &lr.Policies
}
