package chaos

import (
	"net/netip"
	"strings"
	"testing"
)

// TestDiffHost: the local gateway mode host check finds what is missing and what is stale.
func TestDiffHost(t *testing.T) {
	addrs, err := parseIPAddrJSON([]byte(`[
 {"ifname":"lo","addr_info":[{"local":"127.0.0.1","prefixlen":8},{"local":"::1","prefixlen":128}]},
 {"ifname":"eth0","addr_info":[{"local":"172.18.0.12","prefixlen":16},{"local":"172.18.0.61","prefixlen":32},{"local":"fe80::1","prefixlen":64}]},
 {"ifname":"k8s-node2","addr_info":[{"local":"10.244.2.2","prefixlen":24}]}]`))
	if err != nil {
		t.Fatal(err)
	}
	nat := []string{
		"*nat",
		":OVN-KUBE-EGRESSIP - [0:0]",
		`-A POSTROUTING -m comment --comment "ovn-egressip" -j OVN-KUBE-EGRESSIP`,
		`-A POSTROUTING -s 10.244.0.0/16 -o eth0 -m comment --comment harness -j MASQUERADE`,
		`-A OVN-KUBE-EGRESSIP -s 10.244.1.5/32 -o eth0 -m comment --comment "ovn-egressip eip=eip1" -j SNAT --to-source 172.18.0.61`,
		"COMMIT",
	}
	filter := []string{
		`-A INPUT -j OVN-KUBE-EGRESSIP-GUARD`,
		`-A OVN-KUBE-EGRESSIP-GUARD -d 172.18.0.61/32 -p tcp -m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN -m conntrack --ctstate INVALID,NEW -j DROP`,
		`-A OVN-KUBE-EGRESSIP-GUARD -d 172.18.0.61/32 -p udp -m conntrack --ctstate NEW -j DROP`,
	}
	good := hostState{addrs: addrs, nat: nat, filter: filter}
	eip := netip.MustParseAddr("172.18.0.61")
	pod := netip.MustParseAddr("10.244.1.5")
	want := hostWant{ips: map[netip.Addr]string{eip: "eip1"}, pods: map[netip.Addr][]netip.Addr{eip: {pod}}}
	none := hostWant{ips: map[netip.Addr]string{}}
	ready := []string{"172.18.0.61"}

	for _, tc := range []struct {
		name           string
		w              hostWant
		hs             hostState
		ready          []string
		missing, stale []string // substrings, one per item expected
	}{
		{name: "as it must be", w: want, hs: good, ready: ready},
		{name: "the IP moved away, nothing cleaned yet", w: none, hs: good, ready: ready,
			stale: []string{"address 172.18.0.61/32 on eth0", "--to-source 172.18.0.61", "172.18.0.61/32 tcp DROP", "172.18.0.61/32 udp DROP", "lists 172.18.0.61"}},
		{name: "a second served pod has no rule", w: hostWant{ips: want.ips, pods: map[netip.Addr][]netip.Addr{eip: {pod, netip.MustParseAddr("10.244.3.7")}}},
			hs: good, ready: ready, missing: []string{"-s 10.244.3.7/32 -o eth0 --to-source 172.18.0.61"}},
		{name: "no served pod: no SNAT chain needed", w: hostWant{ips: want.ips}, hs: hostState{addrs: addrs, filter: filter}, ready: ready},
		{name: "not listed ready", w: want, hs: good, ready: nil, missing: []string{"does not list 172.18.0.61"}},
		{name: "nothing programmed", w: want, hs: hostState{addrs: addrs[:3]}, ready: ready, // lo and eth0's own address
			missing: []string{"address 172.18.0.61/32 on eth0", "-s 10.244.1.5/32", "tcp DROP", "udp DROP", "POSTROUTING", "INPUT"}},
		{name: "the SNAT jump is not first", w: want, hs: hostState{addrs: addrs, nat: []string{nat[3], nat[2], nat[4]}, filter: filter},
			ready: ready, missing: []string{"POSTROUTING does not jump"}},
	} {
		miss, stale := diffHost("node2", tc.w, tc.hs, tc.ready)
		match := func(kind string, got, want []string) {
			if len(got) != len(want) {
				t.Errorf("%s: %s %v, want %d items like %v", tc.name, kind, got, len(want), want)
				return
			}
			for _, w := range want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("%s: %s %v: none contains %q", tc.name, kind, got, w)
				}
			}
		}
		match("missing", miss, tc.missing)
		match("stale", stale, tc.stale)
	}
}
