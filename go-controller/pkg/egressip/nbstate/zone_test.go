package nbstate

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// zoneNodes: three nodes with node-id style join IPs and transit switch IPs (interconnect layout). A lingering IP
// has a published end after Input's zero Now (Lingers), and its zone keeps its rows (LingeringEgressIPs, read for the
// zone's own node).
func zoneNodes(ready, lingering map[string][]string) map[string]Node {
	end := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	nodes := map[string]Node{}
	for i, name := range []string{"node1", "node2", "node3"} {
		id := string(rune('2' + i))
		n := Node{Name: name, JoinIPs: addrs("100.64.0." + id), TransitIPs: addrs("100.88.0." + id),
			ManagementIPs: addrs("10.244." + string(rune('1'+i)) + ".2"), Addresses: addrs("172.18.0.1" + string(rune('1'+i))),
			ReadyEgressIPs: map[netip.Addr]bool{}, LingeringEgressIPs: map[netip.Addr]bool{}, LingeringUntil: map[netip.Addr]time.Time{}}
		for _, ip := range ready[name] {
			n.ReadyEgressIPs[netip.MustParseAddr(ip)] = true
		}
		for _, ip := range lingering[name] {
			n.LingeringEgressIPs[netip.MustParseAddr(ip)] = true
			n.LingeringUntil[netip.MustParseAddr(ip)] = end
		}
		nodes[name] = n
	}
	return nodes
}

func zonePod(name, node, ip string) Pod {
	return Pod{Namespace: "prod", Name: name, IPs: addrs(ip), Node: node}
}

// egressRows keeps the per-pod rows and the served-pods set of a Dump.
func egressRows(s State) []string {
	var out []string
	for _, l := range Dump(s) {
		if strings.HasPrefix(l, "nat ") || strings.Contains(l, " 100 ") || strings.HasPrefix(l, "address-set egressip_served_pods") {
			out = append(out, strings.Fields(l)[0]+" "+strings.Join(strings.Fields(l)[1:len(strings.Fields(l))-1], " "))
		}
	}
	return out
}

func TestDesiredZone(t *testing.T) {
	const x = "172.18.0.50"
	eip := func(strict bool, assigned ...Assignment) EgressIP {
		return EgressIP{Name: "eip1", Assigned: assigned, IPs: addrs(x), Strict: strict,
			Pods: []Pod{zonePod("p1", "node1", "10.244.1.3"), zonePod("p2", "node2", "10.244.2.3")}}
	}
	onNode2 := Assignment{Node: "node2", IP: netip.MustParseAddr(x)}
	tests := []struct {
		name      string
		mode      gwmode.Mode
		zone      string
		ready     map[string][]string
		lingering map[string][]string
		eip       EgressIP
		want      []string
	}{
		{
			name: "pod zone, holder elsewhere and ready: reroute to its transit switch IP, no NAT here",
			mode: gwmode.Shared, zone: "node1", ready: map[string][]string{"node2": {x}}, eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.3]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.88.0.3]`,
			},
		},
		{
			name: "pod zone, holder elsewhere not ready yet: no reroute (the pod leaves through its own node)",
			mode: gwmode.Shared, zone: "node1", eip: eip(false, onNode2),
			want: []string{`address-set egressip_served_pods_v4 []`},
		},
		{
			name: "pod zone, holder not ready, strict: drop",
			mode: gwmode.Shared, zone: "node1", eip: eip(true, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.3]`,
				`policy ovn_cluster_router 100 drop "ip4.src == 10.244.1.3"`,
			},
		},
		{
			name: "holder zone: its own pod and the other zone's pod rerouted to its gateway router, SNAT for both",
			mode: gwmode.Shared, zone: "node2", eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.2.3]`,
				`nat GR_node2 snat 172.18.0.50 <- 10.244.1.3`,
				`nat GR_node2 snat 172.18.0.50 <- 10.244.2.3`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.64.0.3]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.2.3" nexthops=[100.64.0.3]`,
			},
		},
		{
			name: "a zone neither holding nor running a served pod: no per-pod rows",
			mode: gwmode.Shared, zone: "node3", ready: map[string][]string{"node2": {x}}, eip: eip(false, onNode2),
			want: []string{`address-set egressip_served_pods_v4 []`},
		},
		{
			name: "pod zone, new holder not ready, old holder lingering: rerouted to the old holder meanwhile",
			mode: gwmode.Shared, zone: "node1", lingering: map[string][]string{"node3": {x}}, eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.3]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.88.0.4]`,
			},
		},
		{
			name: "pod zone, new holder not ready, old holder's zone has not seen the move yet (still lists it ready): rerouted to the old holder",
			mode: gwmode.Shared, zone: "node1", ready: map[string][]string{"node3": {x}}, eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.3]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.88.0.4]`,
			},
		},
		{
			name: "pod zone, new holder ready: the lingering old holder is no next hop any more",
			mode: gwmode.Shared, zone: "node1", ready: map[string][]string{"node2": {x}}, lingering: map[string][]string{"node3": {x}},
			eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.3]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.88.0.3]`,
			},
		},
		{
			name: "old holder's zone while it lingers: keeps the SNAT and the reroute of every pod to its router",
			mode: gwmode.Shared, zone: "node3", ready: map[string][]string{"node2": {x}}, lingering: map[string][]string{"node3": {x}},
			eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 []`,
				`nat GR_node3 snat 172.18.0.50 <- 10.244.1.3`,
				`nat GR_node3 snat 172.18.0.50 <- 10.244.2.3`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.64.0.4]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.2.3" nexthops=[100.64.0.4]`,
			},
		},
		{
			name: "local gateway mode, pod zone: reroute to the ready holder's transit switch IP",
			mode: gwmode.Local, zone: "node1", ready: map[string][]string{"node2": {x}}, eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.3]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.88.0.3]`,
			},
		},
		{
			name: "local gateway mode, holder zone: every served pod to the management port, no NAT",
			mode: gwmode.Local, zone: "node2", ready: map[string][]string{"node2": {x}}, eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.2.3]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[10.244.2.2]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.2.3" nexthops=[10.244.2.2]`,
			},
		},
		{
			name: "local gateway mode, old holder's zone while it lingers: the other zones' pods still to its management port",
			mode: gwmode.Local, zone: "node3", ready: map[string][]string{"node2": {x}}, lingering: map[string][]string{"node3": {x}},
			eip: eip(false, onNode2),
			want: []string{
				`address-set egressip_served_pods_v4 []`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[10.244.3.2]`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.2.3" nexthops=[10.244.3.2]`,
			},
		},
		{
			// The other zones reroute to node2 only once it lists the IP SNAT-ready; one that has not caught up
			// with a change finds the reroute to node2's host rather than its gateway router.
			name: "local gateway mode, holder zone, host rules not ready: the other zones' pod rerouted to its management port",
			mode: gwmode.Local, zone: "node2", eip: eip(false, onNode2),
			want: []string{`address-set egressip_served_pods_v4 []`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[10.244.2.2]`},
		},
		{
			name: "a holder without a transit switch IP is no next hop for other zones",
			mode: gwmode.Shared, zone: "node1", ready: map[string][]string{"node2": {x}}, eip: eip(false, onNode2),
			want: []string{`address-set egressip_served_pods_v4 []`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodes := zoneNodes(tc.ready, tc.lingering)
			if strings.HasPrefix(tc.name, "a holder without a transit") {
				n := nodes["node2"]
				n.TransitIPs = nil
				nodes["node2"] = n
			}
			in := Input{Mode: tc.mode, Zone: tc.zone, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"),
				Nodes: nodes, EgressIPs: []EgressIP{tc.eip}}
			got := egressRows(Desired(in))
			if !slices.Equal(got, tc.want) {
				t.Errorf("got\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestDesiredZonesPartitionCentralized: with every holder ready and no linger, the zones' rows together are the
// centralized rows, but for where the reroutes point: each SNAT is in exactly one zone (its holder's), each pod's
// reroute in its own zone.
func TestDesiredZonesPartitionCentralized(t *testing.T) {
	x, y := "172.18.0.50", "172.18.0.51"
	nodes := zoneNodes(map[string][]string{"node2": {x}, "node3": {y}}, nil)
	e := EgressIP{Name: "eip1", IPs: addrs(x, y),
		Assigned: []Assignment{{Node: "node2", IP: netip.MustParseAddr(x)}, {Node: "node3", IP: netip.MustParseAddr(y)}},
		Pods:     []Pod{zonePod("p1", "node1", "10.244.1.3"), zonePod("p2", "node2", "10.244.2.3"), zonePod("p3", "node3", "10.244.3.3")}}
	base := Input{Mode: gwmode.Shared, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"), Nodes: nodes,
		EgressIPs: []EgressIP{e}}
	central := Desired(base)
	nats := map[string]int{}
	for _, zone := range []string{"node1", "node2", "node3"} {
		in := base
		in.Zone = zone
		st := Desired(in)
		for k, n := range st.NATs {
			if k.Router != GatewayRouter(zone) {
				t.Errorf("zone %s writes a NAT on %s", zone, k.Router)
			}
			nats[k.Router+" "+n.ExternalIP+" "+n.LogicalIP]++
		}
		for k, p := range st.Policies {
			if p.Priority != ReroutePriority {
				continue
			}
			if k.IDs.Pod == "prod/p1" && zone == "node1" && !slices.Equal(p.Nexthops, []string{"100.88.0.3", "100.88.0.4"}) {
				t.Errorf("zone node1: p1 next hops %v, want both holders' transit IPs", p.Nexthops)
			}
		}
	}
	for _, n := range central.NATs {
		r := ""
		for k, v := range central.NATs {
			if v == n {
				r = k.Router
			}
		}
		if nats[r+" "+n.ExternalIP+" "+n.LogicalIP] != 1 {
			t.Errorf("NAT %s %s <- %s: in %d zones, want 1", r, n.ExternalIP, n.LogicalIP, nats[r+" "+n.ExternalIP+" "+n.LogicalIP])
		}
	}
	if len(nats) != len(central.NATs) {
		t.Errorf("zones write %d NATs, centralized %d", len(nats), len(central.NATs))
	}
}

// TestDesiredZoneLocalPublishedLinger: interconnect layout, local gateway mode. While no holder is ready, a pod's
// zone reroutes to the old holder for as long as that node's daemon published it still SNATs the IP (Lingers), and
// not a moment longer, whatever the zone itself remembers: a zone controller restarted during the linger decides the
// same as one that saw the move.
func TestDesiredZoneLocalPublishedLinger(t *testing.T) {
	const x = "172.18.0.50"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := t0.Add(5 * time.Second)
	for _, tc := range []struct {
		name   string
		now    time.Time
		strict bool
		want   string // p1's rule ("" none)
	}{
		{"within the published linger: to the old holder's transit switch IP", t0, false, `policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.88.0.4]`},
		{"within the published linger, strict: the same", t0, true, `policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.3" nexthops=[100.88.0.4]`},
		{"at the published end: no reroute", end, false, ""},
		{"at the published end, strict: drop", end, true, `policy ovn_cluster_router 100 drop "ip4.src == 10.244.1.3"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := zoneNodes(nil, nil)
			old := nodes["node3"]
			old.LingeringUntil = map[netip.Addr]time.Time{netip.MustParseAddr(x): end}
			nodes["node3"] = old
			e := EgressIP{Name: "eip1", IPs: addrs(x), Strict: tc.strict, Assigned: []Assignment{{Node: "node2", IP: netip.MustParseAddr(x)}},
				Pods: []Pod{zonePod("p1", "node1", "10.244.1.3")}}
			in := Input{Mode: gwmode.Local, Zone: "node1", ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"),
				Nodes: nodes, EgressIPs: []EgressIP{e}, Now: tc.now}
			var got string
			for _, l := range egressRows(Desired(in)) {
				if strings.HasPrefix(l, "policy ") {
					got = l
				}
			}
			if got != tc.want {
				t.Errorf("p1's rule %q, want %q", got, tc.want)
			}
		})
	}
}
