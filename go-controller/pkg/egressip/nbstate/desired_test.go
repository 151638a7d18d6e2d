package nbstate

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func pod(ns, name string, ips ...string) Pod {
	return Pod{Namespace: ns, Name: name, IPs: addrs(ips...)}
}

func assigned(node, ip string) Assignment { return Assignment{Node: node, IP: netip.MustParseAddr(ip)} }

// testNodes: node-a/node-b dual-stack, node-c IPv4 only.
func testNodes() map[string]Node {
	return map[string]Node{
		"node-a": {Name: "node-a", JoinIPs: addrs("100.64.0.2", "fd98::2"), ManagementIPs: addrs("10.244.1.2", "fd00:10:244:1::2"), Addresses: addrs("172.18.0.11", "fc00::11")},
		"node-b": {Name: "node-b", JoinIPs: addrs("100.64.0.3", "fd98::3"), ManagementIPs: addrs("10.244.2.2", "fd00:10:244:2::2"), Addresses: addrs("172.18.0.12", "fc00::12")},
		"node-c": {Name: "node-c", JoinIPs: addrs("100.64.0.4"), ManagementIPs: addrs("10.244.3.2"), Addresses: addrs("172.18.0.13")},
	}
}

const (
	v4PodToPod  = `policy ovn_cluster_router 102 allow "ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16" owner-type=Cluster,rule=pod-to-pod,ip-family=ip4`
	v4PodToJoin = `policy ovn_cluster_router 102 allow "ip4.src == 10.244.0.0/16 && ip4.dst == 100.64.0.0/16" owner-type=Cluster,rule=pod-to-join,ip-family=ip4`
	v4PodToNode = `policy ovn_cluster_router 102 allow "ip4.src == $egressip_served_pods_v4 && ip4.dst == $egressip_node_ips_v4" owner-type=Cluster,rule=pod-to-node,ip-family=ip4`
	v4NodeIPs   = `address-set egressip_node_ips_v4 [172.18.0.11 172.18.0.12 172.18.0.13] owner-type=Cluster,rule=node-ips,ip-family=ip4`
)

// readyNodes returns testNodes where node reports ips as ready (local gateway mode).
// readyNodes returns the test nodes taking part in the readiness handshake,
// each reporting the IPs in ready (none when absent).
func readyNodes(ready map[string][]string) map[string]Node {
	nodes := testNodes()
	for name, n := range nodes {
		n.ReadyEgressIPs = map[netip.Addr]bool{}
		nodes[name] = n
	}
	for name, ips := range ready {
		n := nodes[name]
		n.ReadyEgressIPs = map[netip.Addr]bool{}
		for _, ip := range addrs(ips...) {
			n.ReadyEgressIPs[ip] = true
		}
		nodes[name] = n
	}
	return nodes
}

func TestDesired(t *testing.T) {
	v4 := Input{
		Mode:           gwmode.Shared,
		ClusterSubnets: prefixes("10.244.0.0/16"),
		JoinSubnets:    prefixes("100.64.0.0/16"),
		Nodes:          testNodes(),
	}
	with := func(in Input, f func(*Input)) Input { f(&in); return in }

	tests := []struct {
		name string
		in   Input
		want []string
	}{
		{
			name: "no EgressIP: nothing at all",
			in:   v4,
			want: nil,
		},
		{
			name: "shared: one EgressIP on node-a, two pods",
			in: with(v4, func(in *Input) {
				in.EgressIPs = []EgressIP{{Name: "eip1", Assigned: []Assignment{assigned("node-a", "172.18.0.33")},
					Pods: []Pod{pod("ns1", "p1", "10.244.1.5"), pod("ns1", "p2", "10.244.2.6")}}}
			}),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.5 10.244.2.6] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				v4NodeIPs,
				`nat GR_node-a snat 172.18.0.33 <- 10.244.1.5 owner-type=EgressIP,name=eip1,rule=snat,ip-family=ip4,pod=ns1/p1,egress-ip=172.18.0.33`,
				`nat GR_node-a snat 172.18.0.33 <- 10.244.2.6 owner-type=EgressIP,name=eip1,rule=snat,ip-family=ip4,pod=ns1/p2,egress-ip=172.18.0.33`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.5" nexthops=[100.64.0.2] owner-type=EgressIP,name=eip1,rule=reroute,ip-family=ip4,pod=ns1/p1`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.2.6" nexthops=[100.64.0.2] owner-type=EgressIP,name=eip1,rule=reroute,ip-family=ip4,pod=ns1/p2`,
				v4PodToJoin, v4PodToNode, v4PodToPod,
			},
		},
		{
			name: "shared: two IPs on two nodes: ECMP next hops (sorted), SNAT on both gateway routers",
			in: with(v4, func(in *Input) {
				in.EgressIPs = []EgressIP{{Name: "eip1",
					Assigned: []Assignment{assigned("node-c", "172.18.0.44"), assigned("node-a", "172.18.0.33")},
					Pods:     []Pod{pod("ns1", "p1", "10.244.1.5")}}}
			}),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.5] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				v4NodeIPs,
				`nat GR_node-a snat 172.18.0.33 <- 10.244.1.5 owner-type=EgressIP,name=eip1,rule=snat,ip-family=ip4,pod=ns1/p1,egress-ip=172.18.0.33`,
				`nat GR_node-c snat 172.18.0.44 <- 10.244.1.5 owner-type=EgressIP,name=eip1,rule=snat,ip-family=ip4,pod=ns1/p1,egress-ip=172.18.0.44`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.5" nexthops=[100.64.0.2 100.64.0.4] owner-type=EgressIP,name=eip1,rule=reroute,ip-family=ip4,pod=ns1/p1`,
				v4PodToJoin, v4PodToNode, v4PodToPod,
			},
		},
		{
			name: "local: next hop is the management port IP of a ready holder, no SNAT",
			in: with(v4, func(in *Input) {
				in.Mode = gwmode.Local
				in.Nodes = readyNodes(map[string][]string{"node-b": {"172.18.0.33"}})
				in.EgressIPs = []EgressIP{{Name: "eip1", Assigned: []Assignment{assigned("node-b", "172.18.0.33")},
					Pods: []Pod{pod("ns1", "p1", "10.244.1.5")}}}
			}),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.5] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				v4NodeIPs,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.5" nexthops=[10.244.2.2] owner-type=EgressIP,name=eip1,rule=reroute,ip-family=ip4,pod=ns1/p1`,
				v4PodToJoin, v4PodToNode, v4PodToPod,
			},
		},
		{
			name: "unassigned EgressIP: shared rows only; its pods are not in the served set",
			in: with(v4, func(in *Input) {
				in.EgressIPs = []EgressIP{{Name: "eip1", Pods: []Pod{pod("ns1", "p1", "10.244.1.5")}}}
			}),
			want: []string{
				`address-set egressip_served_pods_v4 [] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				v4NodeIPs, v4PodToJoin, v4PodToNode, v4PodToPod,
			},
		},
		{
			name: "dual stack: each family reroutes to the holder of an IP of that family",
			in: Input{
				Mode:           gwmode.Shared,
				ClusterSubnets: prefixes("10.244.0.0/16", "fd00:10:244::/48"),
				JoinSubnets:    prefixes("100.64.0.0/16", "fd98::/64"),
				Nodes:          map[string]Node{"node-a": testNodes()["node-a"], "node-b": testNodes()["node-b"]},
				EgressIPs: []EgressIP{{Name: "eip1",
					Assigned: []Assignment{assigned("node-a", "172.18.0.33"), assigned("node-b", "fc00::33")},
					Pods:     []Pod{pod("ns1", "p1", "10.244.1.5", "fd00:10:244:1::5")}}},
			},
			want: []string{
				`address-set egressip_node_ips_v4 [172.18.0.11 172.18.0.12] owner-type=Cluster,rule=node-ips,ip-family=ip4`,
				`address-set egressip_node_ips_v6 [fc00::11 fc00::12] owner-type=Cluster,rule=node-ips,ip-family=ip6`,
				`address-set egressip_served_pods_v4 [10.244.1.5] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				`address-set egressip_served_pods_v6 [fd00:10:244:1::5] owner-type=Cluster,rule=served-pods,ip-family=ip6`,
				`nat GR_node-a snat 172.18.0.33 <- 10.244.1.5 owner-type=EgressIP,name=eip1,rule=snat,ip-family=ip4,pod=ns1/p1,egress-ip=172.18.0.33`,
				`nat GR_node-b snat fc00::33 <- fd00:10:244:1::5 owner-type=EgressIP,name=eip1,rule=snat,ip-family=ip6,pod=ns1/p1,egress-ip=fc00::33`,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.5" nexthops=[100.64.0.2] owner-type=EgressIP,name=eip1,rule=reroute,ip-family=ip4,pod=ns1/p1`,
				`policy ovn_cluster_router 100 reroute "ip6.src == fd00:10:244:1::5" nexthops=[fd98::3] owner-type=EgressIP,name=eip1,rule=reroute,ip-family=ip6,pod=ns1/p1`,
				v4PodToJoin, v4PodToNode, v4PodToPod,
				`policy ovn_cluster_router 102 allow "ip6.src == fd00:10:244::/48 && ip6.dst == fd00:10:244::/48" owner-type=Cluster,rule=pod-to-pod,ip-family=ip6`,
				`policy ovn_cluster_router 102 allow "ip6.src == fd00:10:244::/48 && ip6.dst == fd98::/64" owner-type=Cluster,rule=pod-to-join,ip-family=ip6`,
				`policy ovn_cluster_router 102 allow "ip6.src == $egressip_served_pods_v6 && ip6.dst == $egressip_node_ips_v6" owner-type=Cluster,rule=pod-to-node,ip-family=ip6`,
			},
		},
		{
			name: "several cluster subnets, no join subnet; an IPv6 EgressIP reroutes nothing in an IPv4 cluster (even a pod with an IPv6 address)",
			in: Input{
				Mode:           gwmode.Shared,
				ClusterSubnets: prefixes("10.244.0.0/16", "10.128.0.0/14"),
				Nodes:          map[string]Node{"node-a": testNodes()["node-a"]},
				EgressIPs: []EgressIP{{Name: "eip6", Assigned: []Assignment{assigned("node-a", "fc00::33")},
					Pods: []Pod{pod("ns1", "p1", "10.244.1.5", "fd00:10:244:1::5")}}},
			},
			want: []string{
				`address-set egressip_node_ips_v4 [172.18.0.11] owner-type=Cluster,rule=node-ips,ip-family=ip4`,
				`address-set egressip_served_pods_v4 [] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				`policy ovn_cluster_router 102 allow "ip4.src == {10.244.0.0/16, 10.128.0.0/14} && ip4.dst == {10.244.0.0/16, 10.128.0.0/14}" owner-type=Cluster,rule=pod-to-pod,ip-family=ip4`,
				v4PodToNode,
			},
		},
		{
			name: "a holder unknown or without a next hop of the family is left out",
			in: with(v4, func(in *Input) {
				in.EgressIPs = []EgressIP{{Name: "eip1",
					Assigned: []Assignment{assigned("node-gone", "172.18.0.44"), assigned("node-c", "fc00::33")},
					Pods:     []Pod{pod("ns1", "p1", "10.244.1.5", "fd00::5")}}}
			}),
			want: []string{
				`address-set egressip_served_pods_v4 [] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				v4NodeIPs, v4PodToJoin, v4PodToNode, v4PodToPod,
			},
		},
		{
			name: "two pods with one IP: the pod object owning it (the newer) has the rows, under its own EgressIP, though met second",
			in: with(v4, func(in *Input) {
				in.Mode = gwmode.Local
				in.Nodes = readyNodes(map[string][]string{"node-a": {"172.18.0.33"}, "node-b": {"172.18.0.44"}})
				old, newer := pod("ns1", "old", "10.244.1.5"), pod("ns2", "new", "10.244.1.5")
				old.Created, newer.Created = time.Unix(100, 0), time.Unix(200, 0)
				in.EgressIPs = []EgressIP{
					{Name: "first", Assigned: []Assignment{assigned("node-a", "172.18.0.33")}, Pods: []Pod{old}},
					{Name: "second", Assigned: []Assignment{assigned("node-b", "172.18.0.44")}, Pods: []Pod{newer}},
				}
			}),
			want: []string{
				`address-set egressip_served_pods_v4 [10.244.1.5] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				v4NodeIPs,
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.5" nexthops=[10.244.2.2] owner-type=EgressIP,name=second,rule=reroute,ip-family=ip4,pod=ns2/new`,
				v4PodToJoin, v4PodToNode, v4PodToPod,
			},
		},
		{
			name: "two pods with one IP: when the owner's EgressIP has no route, nobody has the rows (not the other EgressIP)",
			in: with(v4, func(in *Input) {
				in.Mode = gwmode.Local
				in.Nodes = readyNodes(map[string][]string{"node-a": {"172.18.0.33"}})
				old, newer := pod("ns1", "old", "10.244.1.5"), pod("ns2", "new", "10.244.1.5")
				old.Created, newer.Created = time.Unix(100, 0), time.Unix(200, 0)
				in.EgressIPs = []EgressIP{
					{Name: "first", Assigned: []Assignment{assigned("node-a", "172.18.0.33")}, Pods: []Pod{old}},
					{Name: "second", Pods: []Pod{newer}},
				}
			}),
			want: []string{
				`address-set egressip_served_pods_v4 [] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				v4NodeIPs, v4PodToJoin, v4PodToNode, v4PodToPod,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Dump(Desired(tc.in))
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("rows:\n got:\n  %s\n want:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
		})
	}
}

// TestDesiredLocalReady: in local gateway mode a holder is a next hop only once
// it reports its IP ready; with none ready, the pods go to the nodes that published
// a linger on one of the EgressIP's IPs (Lingers) or are not rerouted at all.
func TestDesiredLocalReady(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	in := func(ready map[string][]string, lingering ...string) Input {
		e := EgressIP{Name: "eip1", Assigned: []Assignment{assigned("node-a", "172.18.0.33"), assigned("node-b", "172.18.0.44")},
			Pods: []Pod{pod("ns1", "p1", "10.244.1.5")}, IPs: addrs("172.18.0.33", "172.18.0.44")}
		nodes := readyNodes(ready)
		for _, name := range lingering { // it held 172.18.0.33 before node-a, and still SNATs it for 5 s
			n := nodes[name]
			n.LingeringUntil = map[netip.Addr]time.Time{netip.MustParseAddr("172.18.0.33"): now.Add(5 * time.Second)}
			nodes[name] = n
		}
		return Input{
			Mode: gwmode.Local, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"), Nodes: nodes,
			EgressIPs: []EgressIP{e}, Now: now,
		}
	}
	reroute := Key{Router: ClusterRouter, IDs: IDs{OwnerType: OwnerEgressIP, Name: "eip1", Rule: RuleReroute, Family: FamilyIPv4, Pod: "ns1/p1"}}
	served := Key{IDs: IDs{OwnerType: OwnerCluster, Rule: RuleServedPods, Family: FamilyIPv4}}

	none := Desired(in(map[string][]string{"node-a": {"172.18.0.99"}})) // node-a ready for an IP of no EgressIP here
	if p, ok := none.Policies[reroute]; ok {
		t.Errorf("no holder ready, no fallback: got reroute %+v, want none", p)
	}
	if s := none.AddressSets[served]; s == nil || len(s.Addresses) != 0 {
		t.Errorf("no holder ready: served pods %+v, want an empty set", s)
	}
	absent := in(nil)
	for name, n := range absent.Nodes {
		n.ReadyEgressIPs = nil // annotation absent or unparsable
		absent.Nodes[name] = n
	}
	if p, ok := Desired(absent).Policies[reroute]; ok {
		t.Errorf("holders without a ready list: got reroute %+v, want none (readiness is never assumed)", p)
	}
	lingering := Desired(in(nil, "node-c"))
	if p := lingering.Policies[reroute]; p == nil || !slices.Equal(p.Nexthops, []string{"10.244.3.2"}) {
		t.Errorf("no holder ready, node-c lingering: got %+v, want a reroute to node-c's 10.244.3.2", p)
	}
	over := in(nil, "node-c")
	over.Now = now.Add(5 * time.Second)
	if p, ok := Desired(over).Policies[reroute]; ok {
		t.Errorf("no holder ready, node-c's published linger over: got reroute %+v, want none", p)
	}
	one := Desired(in(map[string][]string{"node-b": {"172.18.0.44"}}, "node-c"))
	if p, ok := one.Policies[reroute]; !ok || !slices.Equal(p.Nexthops, []string{"10.244.2.2"}) {
		t.Errorf("node-b ready: got %+v; want next hop 10.244.2.2 only (the linger is for when none is ready)", p)
	}
	both := Desired(in(map[string][]string{"node-a": {"172.18.0.33"}, "node-b": {"172.18.0.44"}}))
	if p := both.Policies[reroute]; p == nil || !slices.Equal(p.Nexthops, []string{"10.244.1.2", "10.244.2.2"}) {
		t.Errorf("both ready: got %+v, want both next hops", p)
	}
	shared := in(nil)
	shared.Mode = gwmode.Shared
	if p := Desired(shared).Policies[reroute]; p == nil || len(p.Nexthops) != 2 {
		t.Errorf("shared mode ignores readiness: got %+v", p)
	}
}

// TestDesiredExternalIDs checks that every row carries the owner key and that its
// external_ids parse back to the key it is filed under.
func TestDesiredExternalIDs(t *testing.T) {
	st := Desired(Input{
		Mode: gwmode.Shared, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"), Nodes: testNodes(),
		EgressIPs: []EgressIP{{Name: "eip1", Assigned: []Assignment{assigned("node-a", "172.18.0.33")}, Pods: []Pod{pod("ns1", "p1", "10.244.1.5")}}},
	})
	check := func(k Key, ext map[string]string) {
		if ext[OwnerControllerKey] != OwnerController {
			t.Errorf("%s: no owner key in %v", k, ext)
		}
		ids, ok := ParseIDs(ext)
		if !ok || ids != k.IDs {
			t.Errorf("%s: external_ids %v parse to %v (ok=%v)", k, ext, ids, ok)
		}
	}
	for k, r := range st.Policies {
		check(k, r.ExternalIDs)
	}
	for k, r := range st.NATs {
		check(k, r.ExternalIDs)
	}
	for k, r := range st.AddressSets {
		check(k, r.ExternalIDs)
	}
	if st.Len() != 7 { // reroute, SNAT, 3 no-reroute policies, 2 address sets
		t.Errorf("got %d rows, want 7", st.Len())
	}
}
