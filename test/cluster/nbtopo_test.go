package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

func testNodes(t *testing.T, n int) []NodeAddrs {
	t.Helper()
	var out []NodeAddrs
	for i := 1; i <= n; i++ {
		a, err := AddrsFor(i)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

func TestBuildTopologyPerMode(t *testing.T) {
	for _, tc := range []struct {
		mode         gwmode.Mode
		node2Nexthop string
	}{
		{gwmode.Shared, "100.64.0.3"}, // GR_node2's join IP
		{gwmode.Local, "10.244.2.2"},  // node2's management port
	} {
		rows := buildTopology(testNodes(t, 3), tc.mode)
		var egress *nbdb.LogicalRouterStaticRoute
		var gr2 *nbdb.LogicalRouter
		var natIPs []string
		for _, r := range rows {
			switch x := r.(type) {
			case *nbdb.LogicalRouterStaticRoute:
				if x.IPPrefix == "10.244.2.0/24" {
					egress = x
				}
			case *nbdb.LogicalRouter:
				if x.Name == "GR_node2" {
					gr2 = x
				}
			case *nbdb.NAT:
				natIPs = append(natIPs, x.ExternalIP+"<-"+x.LogicalIP)
			}
			if ids := nbserver.ExternalIDsOf(r); ids[HarnessKey] != "true" {
				t.Errorf("%s: row %T %+v is not tagged %s=true", tc.mode, r, r, HarnessKey)
			}
		}
		if egress == nil || egress.Policy == nil || *egress.Policy != nbdb.LogicalRouterStaticRoutePolicySrcIP ||
			egress.Nexthop != tc.node2Nexthop {
			t.Errorf("%s: node2 egress route = %+v, want src-ip via %s", tc.mode, egress, tc.node2Nexthop)
		}
		if gr2 == nil || gr2.Options["chassis"] != Chassis {
			t.Errorf("%s: GR_node2 = %+v, want options:chassis=%s", tc.mode, gr2, Chassis)
		}
		want := []string{"172.18.0.21<-10.244.0.0/16", "172.18.0.22<-10.244.0.0/16", "172.18.0.23<-10.244.0.0/16"}
		if len(natIPs) != len(want) {
			t.Errorf("%s: NAT rows %v, want %v", tc.mode, natIPs, want)
		}
	}
}

// The topology is accepted by a real NB ovsdb-server in one transaction (schema, references, constraints), and pod
// ports are allocated, added and removed through the same connection.
func TestTopologyAndPodPortsOnRealNB(t *testing.T) {
	srv := nbserver.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nb, err := dialNB(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nb.close()
	nodes := testNodes(t, 20)
	if err := nb.createRows(ctx, buildTopology(nodes, gwmode.Shared)); err != nil {
		t.Fatalf("insert topology: %v", err)
	}
	// wait until the monitor has the rows
	var sw *nbdb.LogicalSwitch
	if err := poll(ctx, 10*time.Millisecond, func() (bool, error) {
		sw, err = nb.switchByName("node12")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("switch node12 never showed up: %v", err)
	}
	if len(sw.Ports) != 2 {
		t.Fatalf("switch node12 has %d ports, want stor + management port", len(sw.Ports))
	}
	used, err := nb.usedIPs(sw)
	if err != nil {
		t.Fatal(err)
	}
	if !used[nodes[11].MgmtIP] || len(used) != 1 {
		t.Fatalf("used IPs of node12 = %v, want only the management IP %s", used, nodes[11].MgmtIP)
	}
	lsp := &nbdb.LogicalSwitchPort{Name: "ns_pod", Addresses: []string{"0a:58:0a:f4:0c:03 10.244.12.3"},
		ExternalIDs: harnessIDs("node", "node12")}
	if err := nb.addPort(ctx, sw, lsp); err != nil {
		t.Fatalf("add pod port: %v", err)
	}
	if err := poll(ctx, 10*time.Millisecond, func() (bool, error) {
		_, ok, err := nb.portByName("ns_pod")
		return ok, err
	}); err != nil {
		t.Fatalf("pod port never showed up: %v", err)
	}
	if sw, err = nb.switchByName("node12"); err != nil {
		t.Fatal(err)
	}
	if got, err := nb.usedIPs(sw); err != nil || !got[netipMust("10.244.12.3")] {
		t.Errorf("used IPs after add = %v (%v), want 10.244.12.3 in it", got, err)
	}
	if err := nb.deletePort(ctx, "node12", "ns_pod"); err != nil {
		t.Fatalf("delete pod port: %v", err)
	}
	if err := poll(ctx, 10*time.Millisecond, func() (bool, error) {
		_, ok, err := nb.portByName("ns_pod")
		if err != nil {
			return false, err
		}
		return !ok, nil
	}); err != nil {
		t.Errorf("pod port still there after delete: %v", err)
	}
}

// In a dual-stack cluster every router port carries a network of each family, and the routes, SNAT rows and src-ip
// egress routes exist once per family; IPv6-only clusters have the IPv6 ones only.
func TestBuildTopologyPerFamily(t *testing.T) {
	for _, tc := range []struct {
		family                 string
		rtos2                  []string
		nats, routesOfGR2, crs int
	}{
		{FamilyDual, []string{"10.244.2.1/24", "fd00:10:244:2::1/64"}, 6, 4, 3 * 2},
		{FamilyIPv6, []string{"fd00:10:244:2::1/64"}, 3, 2, 3},
	} {
		var nodes []NodeAddrs
		for i := 1; i <= 3; i++ {
			nodes = append(nodes, addrsMust(t, i, tc.family))
		}
		rows := buildTopology(nodes, gwmode.Shared)
		nats, grRoutes, egressRoutes := 0, 0, 0
		var rtos2 []string
		var v6snat, v6default bool
		for _, r := range rows {
			switch x := r.(type) {
			case *nbdb.LogicalRouterPort:
				if x.Name == "rtos-node2" {
					rtos2 = x.Networks
				}
			case *nbdb.NAT:
				nats++
				if x.ExternalIP == "fc00:f853:ccd:e793::22" && x.LogicalIP == ClusterCIDR6 {
					v6snat = true
				}
			case *nbdb.LogicalRouterStaticRoute:
				if x.Policy != nil {
					egressRoutes++
				} else if x.ExternalIDs != nil && (x.IPPrefix == "::/0" || x.IPPrefix == ClusterCIDR6 || x.IPPrefix == "0.0.0.0/0" || x.IPPrefix == ClusterCIDR) {
					grRoutes++
				}
				if x.IPPrefix == "::/0" && x.Nexthop == ExternalHostIP6 {
					v6default = true
				}
			}
		}
		if len(rtos2) != len(tc.rtos2) || rtos2[0] != tc.rtos2[0] || rtos2[len(rtos2)-1] != tc.rtos2[len(tc.rtos2)-1] {
			t.Errorf("%s: rtos-node2 networks %v, want %v", tc.family, rtos2, tc.rtos2)
		}
		if nats != tc.nats || !v6snat || !v6default || egressRoutes != tc.crs || grRoutes != tc.routesOfGR2*3 {
			t.Errorf("%s: %d SNAT (IPv6 of GR_node2 %v), IPv6 default route %v, %d src-ip routes, %d GR routes",
				tc.family, nats, v6snat, v6default, egressRoutes, grRoutes)
		}
	}
}
