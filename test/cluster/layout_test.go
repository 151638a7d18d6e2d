package cluster

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
)

func TestAddrsFor(t *testing.T) {
	tests := []struct {
		index                                        int
		subnet, mgmt, join, node, gw, mgmtMAC, gwMAC string
	}{
		{1, "10.244.1.0/24", "10.244.1.2", "100.64.0.2", "172.18.0.11", "172.18.0.21", "0a:58:0a:f4:01:02", "0a:58:ac:12:00:15"},
		{3, "10.244.3.0/24", "10.244.3.2", "100.64.0.4", "172.18.0.13", "172.18.0.23", "0a:58:0a:f4:03:02", "0a:58:ac:12:00:17"},
		{9, "10.244.9.0/24", "10.244.9.2", "100.64.0.10", "172.18.0.19", "172.18.0.29", "0a:58:0a:f4:09:02", "0a:58:ac:12:00:1d"},
		{10, "10.244.10.0/24", "10.244.10.2", "100.64.0.11", "172.18.16.10", "172.18.32.10", "0a:58:0a:f4:0a:02", "0a:58:ac:12:20:0a"},
		{254, "10.244.254.0/24", "10.244.254.2", "100.64.0.255", "172.18.16.254", "172.18.32.254", "0a:58:0a:f4:fe:02", "0a:58:ac:12:20:fe"},
	}
	for _, tc := range tests {
		a, err := AddrsFor(tc.index)
		if err != nil {
			t.Fatalf("AddrsFor(%d): %v", tc.index, err)
		}
		got := []string{a.Subnet.String(), a.MgmtIP.String(), a.JoinIP.String(), a.NodeIP.String(), a.GatewayIP.String(), a.MgmtMAC, a.GatewayMAC}
		want := []string{tc.subnet, tc.mgmt, tc.join, tc.node, tc.gw, tc.mgmtMAC, tc.gwMAC}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("node %d field %d = %s, want %s", tc.index, i, got[i], want[i])
			}
		}
	}
	for _, bad := range []int{0, -1, MaxNodes + 1} {
		if _, err := AddrsFor(bad); err == nil {
			t.Errorf("AddrsFor(%d) succeeded", bad)
		}
	}
}

func TestAddrsForFamily(t *testing.T) {
	tests := []struct {
		index                                 int
		family                                string
		subnet, mgmt, join, node, gw, mgmtMAC string
	}{
		{1, FamilyIPv6, "fd00:10:244:1::/64", "fd00:10:244:1::2", "fd98::2", "fc00:f853:ccd:e793::11", "fc00:f853:ccd:e793::21", "0a:58:10:01:00:02"},
		{3, FamilyIPv6, "fd00:10:244:3::/64", "fd00:10:244:3::2", "fd98::4", "fc00:f853:ccd:e793::13", "fc00:f853:ccd:e793::23", "0a:58:10:03:00:02"},
		{254, FamilyIPv6, "fd00:10:244:fe::/64", "fd00:10:244:fe::2", "fd98::ff", "fc00:f853:ccd:e793::10:fe", "fc00:f853:ccd:e793::20:fe", "0a:58:10:fe:00:02"},
		// dual-stack: IPv4 is primary (and gives the MACs), IPv6 is the second family
		{2, FamilyDual, "10.244.2.0/24", "10.244.2.2", "100.64.0.3", "172.18.0.12", "172.18.0.22", "0a:58:0a:f4:02:02"},
	}
	for _, tc := range tests {
		a, err := AddrsForFamily(tc.index, tc.family)
		if err != nil {
			t.Fatalf("AddrsForFamily(%d, %s): %v", tc.index, tc.family, err)
		}
		got := []string{a.Subnet.String(), a.MgmtIP.String(), a.JoinIP.String(), a.NodeIP.String(), a.GatewayIP.String(), a.MgmtMAC}
		want := []string{tc.subnet, tc.mgmt, tc.join, tc.node, tc.gw, tc.mgmtMAC}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("node %d (%s) field %d = %s, want %s", tc.index, tc.family, i, got[i], want[i])
			}
		}
		wantFams := map[string]int{FamilyIPv6: 1, FamilyDual: 2}[tc.family]
		if len(a.Families) != wantFams || a.Families[0] != a.FamilyAddrs {
			t.Errorf("node %d (%s): families %+v", tc.index, tc.family, a.Families)
		}
	}
	d := addrsMust(t, 2, FamilyDual)
	if v6, ok := d.Family(6); !ok || v6.MgmtIP.String() != "fd00:10:244:2::2" || v6.NodeIP.String() != "fc00:f853:ccd:e793::12" {
		t.Errorf("dual node2 IPv6 = %+v %v", v6, ok)
	}
	if _, err := AddrsForFamily(1, "ipv5"); err == nil {
		t.Error("AddrsForFamily accepted ipv5")
	}
}

func TestAddressesNeverCollide(t *testing.T) {
	seen := map[netip.Addr]string{}
	claim := func(ip netip.Addr, what string) {
		if prev, ok := seen[ip]; ok {
			t.Fatalf("%s and %s share %s", prev, what, ip)
		}
		seen[ip] = what
	}
	macs := map[string]string{}
	claimMAC := func(mac, what string) {
		if prev, ok := macs[mac]; ok {
			t.Fatalf("%s and %s share MAC %s", prev, what, mac)
		}
		macs[mac] = what
	}
	for _, f := range []int{4, 6} {
		pl := plans[f]
		claim(pl.extHost, "external host")
		claim(pl.apiServer, "apiserver")
		claim(pl.hostIP, "host port")
		claim(pl.hostRouterIP, "host port router")
		claim(pl.clusterRtrJIP, "cluster router join")
	}
	for _, fam := range []string{FamilyIPv4, FamilyIPv6} {
		for i := 1; i <= MaxNodes; i++ {
			a := addrsMust(t, i, fam)
			for _, x := range []struct {
				ip   netip.Addr
				what string
			}{{a.NodeIP, "node IP"}, {a.GatewayIP, "GR IP"}, {a.JoinIP, "join IP"}, {a.MgmtIP, "mgmt IP"}, {a.RouterIP, "router IP"}} {
				claim(x.ip, a.Name+" "+x.what)
			}
			if fam == FamilyIPv6 { // IPv6-only clusters derive the MACs from the IPv6 addresses
				claimMAC(a.MgmtMAC, a.Name+" mgmt")
				claimMAC(a.RouterMAC, a.Name+" router")
				claimMAC(a.JoinMAC, a.Name+" join")
				claimMAC(a.GatewayMAC, a.Name+" GR")
			}
		}
	}
	// the egress IPs the docs and tests use stay free
	for _, eip := range []string{"172.18.0.33", "172.18.0.44", "172.18.0.50", "fc00:f853:ccd:e793::50", "fc00:f853:ccd:e793::70"} {
		if what, ok := seen[netip.MustParseAddr(eip)]; ok {
			t.Errorf("egress IP %s is taken by %s", eip, what)
		}
	}
}

func TestPodIP(t *testing.T) {
	s := netip.MustParsePrefix("10.244.2.0/24")
	if ip, ok := PodIP(s, 0); !ok || ip.String() != "10.244.2.3" {
		t.Errorf("PodIP(0) = %s %v", ip, ok)
	}
	if ip, ok := PodIP(s, 250); !ok || ip.String() != "10.244.2.253" {
		t.Errorf("PodIP(250) = %s %v", ip, ok)
	}
	if _, ok := PodIP(s, 251); ok {
		t.Error("PodIP(251) should be out of the subnet's usable range")
	}
	// podIndex (PodSpec.IP) inverts PodIP, and knows no other address.
	for _, n := range []int{0, 7, 250} {
		ip, _ := PodIP(s, n)
		if got, ok := podIndex(s, ip); !ok || got != n {
			t.Errorf("podIndex(%s) = %d %v, want %d", ip, got, ok, n)
		}
	}
	for _, ip := range []string{"10.244.2.2", "10.244.2.254", "10.244.3.3"} {
		if n, ok := podIndex(s, netip.MustParseAddr(ip)); ok {
			t.Errorf("podIndex(%s) = %d, want none (not a pod address of %s)", ip, n, s)
		}
	}
}

func TestInterfaceNamesFitTheKernelLimit(t *testing.T) {
	// 14 characters: 15 is the kernel's limit and plumb needs one more for the temporary peer name.
	names := []string{apiLink, hostLink, extLink, mgmtLink(MaxNodes), ethLink(MaxNodes), podLink("a-very-long-namespace-name", "a-very-long-pod-name")}
	for _, n := range names {
		if len(n) > 14 {
			t.Errorf("interface name %q is %d characters", n, len(n))
		}
	}
	if podLink("a", "b-c") == podLink("a-b", "c") {
		t.Error("pod link names collide")
	}
}

func netipMust(s string) netip.Addr { return netip.MustParseAddr(s) }

// addrsMust is AddrsForFamily for a node that exists: an error fails the test.
func addrsMust(t *testing.T, index int, ipFamily string) NodeAddrs {
	t.Helper()
	a, err := AddrsForFamily(index, ipFamily)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Down on a state directory that never held a cluster touches nothing (another cluster's namespaces may exist).
func TestDownWithoutStateTouchesNothing(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep-me")
	if err := os.WriteFile(keep, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Down(context.Background(), dir); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("Down removed a file it did not make: %v", err)
	}
}
