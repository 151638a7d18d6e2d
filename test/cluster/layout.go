package cluster

import (
	"fmt"
	"net/netip"
)

// Address plan of the local cluster. Every address is derived from the node's 1-based index, so the layout is the same
// for the shell, the Go API and the docs (docs/local-cluster.md). Nodes 1..9 use the layout of the gateway-modes recipe
// (node 172.18.0.1X, GR 172.18.0.2X), which leaves 172.18.0.30-172.18.0.99 free for egress IPs in tests; nodes 10 and
// up (scale runs) take their external addresses from 172.18.16.0 (nodes) and 172.18.32.0 (gateway routers).
// The IPv6 plan (IPv6-only and dual-stack clusters) mirrors it: see the *6 constants and AddrsForFamily.
const (
	// ClusterCIDR holds every node subnet (10.244.<index>.0/24) and the host port subnet (10.244.0.0/24).
	ClusterCIDR = "10.244.0.0/16"
	// JoinCIDR is the join switch subnet; ovn_cluster_router is .1, GR_<node> is .(index+1).
	JoinCIDR = "100.64.0.0/16"
	// ExternalCIDR is the shared external L2 (br-ex): nodes' eth0, the GRs' external ports, the external host.
	ExternalCIDR = "172.18.0.0/16"
	// ExternalHostIP is the external host (netns <prefix>ext) running the echo server; every default route points here.
	ExternalHostIP = "172.18.0.100"
	// APIServerIP is the root namespace's address on br-ex: kube-apiserver listens here so that node netns reach it.
	APIServerIP = "172.18.0.1"
	// HostPortIP is the root namespace's port into OVN (switch ovn-eip-host): the root ns reaches 10.244.0.0/16 here.
	HostPortIP = "10.244.0.2"
	// MaxNodes bounds the node index (one /24 per node inside ClusterCIDR).
	MaxNodes = 254
	// EchoPort is the TCP and UDP port of the echo server on the external host.
	EchoPort = 9000
	// TransitCIDR is the transit switch subnet of the interconnect layout (upstream's default): node id N (node
	// index + 1) has 100.88.0.N (rtots-<node>, k8s.ovn.org/node-transit-switch-port-ifaddr).
	TransitCIDR = "100.88.0.0/16"
	// TransitCIDR6 is the transit switch's IPv6 subnet (fd97::N).
	TransitCIDR6 = "fd97::/64"
	// EncapCIDR holds the Geneve tunnel endpoints of the interconnect layout's chassis: node id N's is 100.89.0.N/16 on
	// the local port of br-tun of the node's own ovs-vswitchd, in its chassis namespace (k8s.ovn.org/node-encap-ips).
	EncapCIDR = "100.89.0.0/16"
)

// The IPv6 address plan (IPv6-only and dual-stack clusters).
const (
	// ClusterCIDR6 holds every node subnet (fd00:10:244:<index hex>::/64) and the host port subnet (fd00:10:244::/64).
	ClusterCIDR6 = "fd00:10:244::/48"
	// JoinCIDR6 is the join switch subnet; ovn_cluster_router is ::1, GR_<node> is ::<index+1 hex>.
	JoinCIDR6 = "fd98::/64"
	// ExternalCIDR6 is the external L2's IPv6 subnet (the network of dist/examples/egressip-dualstack.yaml).
	ExternalCIDR6 = "fc00:f853:ccd:e793::/64"
	// ExternalHostIP6 is the external host's IPv6 address.
	ExternalHostIP6 = "fc00:f853:ccd:e793::100"
	// APIServerIP6 is the root namespace's IPv6 address on br-ex (kube-apiserver's address in IPv6-only clusters).
	APIServerIP6 = "fc00:f853:ccd:e793::1"
	// HostPortIP6 is the root namespace's IPv6 address on its port into OVN.
	HostPortIP6 = "fd00:10:244::2"
)

// IP families of a cluster (Config.IPFamily, CLUSTER_IP_FAMILY).
const (
	FamilyIPv4 = "ipv4"
	FamilyIPv6 = "ipv6"
	FamilyDual = "dual"
)

// Families returns the address families of a cluster of the given IP family, the primary one first: [4] for ipv4,
// [6] for ipv6, [4 6] for dual. It returns nil for an unknown family.
func Families(ipFamily string) []int {
	switch ipFamily {
	case FamilyIPv4, "":
		return []int{4}
	case FamilyIPv6:
		return []int{6}
	case FamilyDual:
		return []int{4, 6}
	}
	return nil
}

// familyPlan is the cluster-wide part of the address plan of one family.
type familyPlan struct {
	cluster, join, external netip.Prefix
	extHost, apiServer      netip.Addr
	hostSubnet              netip.Prefix // root namespace's port into OVN
	hostRouterIP, hostIP    netip.Addr
	clusterRtrJIP           netip.Addr // ovn_cluster_router on the join switch
	defaultRoute            string
	transit                 netip.Prefix // transit switch subnet (interconnect layout)
}

var plans = map[int]familyPlan{
	4: {
		cluster: netip.MustParsePrefix(ClusterCIDR), join: netip.MustParsePrefix(JoinCIDR),
		external: netip.MustParsePrefix(ExternalCIDR), extHost: netip.MustParseAddr(ExternalHostIP),
		apiServer: netip.MustParseAddr(APIServerIP), hostSubnet: netip.MustParsePrefix("10.244.0.0/24"),
		hostRouterIP: netip.MustParseAddr("10.244.0.1"), hostIP: netip.MustParseAddr(HostPortIP),
		clusterRtrJIP: netip.MustParseAddr("100.64.0.1"), defaultRoute: "0.0.0.0/0",
		transit: netip.MustParsePrefix(TransitCIDR),
	},
	6: {
		cluster: netip.MustParsePrefix(ClusterCIDR6), join: netip.MustParsePrefix(JoinCIDR6),
		external: netip.MustParsePrefix(ExternalCIDR6), extHost: netip.MustParseAddr(ExternalHostIP6),
		apiServer: netip.MustParseAddr(APIServerIP6), hostSubnet: netip.MustParsePrefix("fd00:10:244::/64"),
		hostRouterIP: netip.MustParseAddr("fd00:10:244::1"), hostIP: netip.MustParseAddr(HostPortIP6),
		clusterRtrJIP: netip.MustParseAddr("fd98::1"), defaultRoute: "::/0",
		transit: netip.MustParsePrefix(TransitCIDR6),
	},
}

// ExternalHost returns the external host's address of family 4 or 6 (where the echo server listens).
func ExternalHost(family int) netip.Addr { return plans[family].extHost }

// ExternalNetwork returns the external network of family 4 or 6.
func ExternalNetwork(family int) netip.Prefix { return plans[family].external }

// FamilyOf returns 4 or 6.
func FamilyOf(ip netip.Addr) int {
	if ip.Unmap().Is4() {
		return 4
	}
	return 6
}

// FamilyAddrs are the addresses of one node in one family.
type FamilyAddrs struct {
	Family    int          // 4 or 6
	Subnet    netip.Prefix // pod subnet 10.244.<index>.0/24 | fd00:10:244:<index>::/64
	RouterIP  netip.Addr   // ovn_cluster_router port on the node switch (.1 | ::1)
	MgmtIP    netip.Addr   // management port k8s-<node> in the node netns (.2 | ::2)
	JoinIP    netip.Addr   // GR_<node> port on the join switch (the reroute nexthop in shared mode)
	NodeIP    netip.Addr   // the node netns eth0 on br-ex (the "host" IP)
	GatewayIP netip.Addr   // GR_<node> external port on ext_<node>
	TransitIP netip.Addr   // rtots-<node> on the transit switch (interconnect layout): the node-id-th address of 100.88.0.0/16 | fd97::/64
}

// NodeAddrs are the addresses of one node. The embedded FamilyAddrs are those of the cluster's primary family (IPv4
// in ipv4 and dual-stack clusters, IPv6 in IPv6-only ones); Families has every family of the cluster, primary first.
type NodeAddrs struct {
	Index int    // 1-based
	Name  string // node<index>
	FamilyAddrs
	Families   []FamilyAddrs
	NodeMAC    string // node netns eth0
	MgmtMAC    string // management port
	GatewayMAC string // GR_<node> external port
	RouterMAC  string // rtos-<node>
	JoinMAC    string // rtoj-GR_<node>
	// ID is the node id (k8s.ovn.org/node-id, the tunnel key of its transit switch port): Index+1, so that the GR join
	// IP is the ID-th address of the join subnet (upstream's derivation; the plan has always had node1's GR at
	// 100.64.0.2), and the transit IP the ID-th of the transit subnet.
	ID         int
	TransitMAC string     // rtots-<node> (0a:58 + the primary transit IP)
	EncapIP    netip.Addr // the chassis' Geneve endpoint in the interconnect layout (100.89.0.<ID>)
}

// Family returns the node's addresses of family 4 or 6, or false when the cluster does not have that family.
func (n NodeAddrs) Family(family int) (FamilyAddrs, bool) {
	for _, f := range n.Families {
		if f.Family == family {
			return f, true
		}
	}
	return FamilyAddrs{}, false
}

// NodeName is the name of the node with the given 1-based index.
func NodeName(index int) string { return fmt.Sprintf("node%d", index) }

// AddrsFor returns the IPv4 addresses of node index (1..MaxNodes).
func AddrsFor(index int) (NodeAddrs, error) { return AddrsForFamily(index, FamilyIPv4) }

// AddrsForFamily returns the addresses of node index (1..MaxNodes) in a cluster of ipFamily (FamilyIPv4, FamilyIPv6
// or FamilyDual).
func AddrsForFamily(index int, ipFamily string) (NodeAddrs, error) {
	if index < 1 || index > MaxNodes {
		return NodeAddrs{}, fmt.Errorf("node index %d out of range 1..%d", index, MaxNodes)
	}
	fams := Families(ipFamily)
	if fams == nil {
		return NodeAddrs{}, fmt.Errorf("IP family %q is none of %s, %s, %s", ipFamily, FamilyIPv4, FamilyIPv6, FamilyDual)
	}
	a := NodeAddrs{Index: index, Name: NodeName(index)}
	for _, f := range fams {
		a.Families = append(a.Families, familyAddrs(index, f))
	}
	a.FamilyAddrs = a.Families[0]
	a.NodeMAC = macFor(0x02, 0x00, a.NodeIP)
	a.MgmtMAC = ovnMAC(a.MgmtIP)
	a.GatewayMAC = ovnMAC(a.GatewayIP)
	a.RouterMAC = ovnMAC(a.RouterIP)
	a.JoinMAC = ovnMAC(a.JoinIP)
	a.ID = index + 1
	a.TransitMAC = ovnMAC(a.TransitIP)
	a.EncapIP = nthAddr(netip.MustParsePrefix(EncapCIDR).Addr(), uint32(a.ID))
	return a, nil
}

func familyAddrs(index, family int) FamilyAddrs {
	p := plans[family]
	var subnet netip.Prefix
	var nodeIP, gwIP netip.Addr
	if family == 4 {
		subnet = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(index), 0}), 24)
		if index <= 9 {
			nodeIP = netip.AddrFrom4([4]byte{172, 18, 0, byte(10 + index)})
			gwIP = netip.AddrFrom4([4]byte{172, 18, 0, byte(20 + index)})
		} else {
			nodeIP = netip.AddrFrom4([4]byte{172, 18, 16, byte(index)})
			gwIP = netip.AddrFrom4([4]byte{172, 18, 32, byte(index)})
		}
	} else {
		b := p.cluster.Addr().As16()
		b[7] = byte(index) // fd00:10:244:<index>::/64
		subnet = netip.PrefixFrom(netip.AddrFrom16(b), 64)
		e := p.external.Addr().As16()
		if index <= 9 { // ::1X and ::2X, read as the IPv4 plan's .1X and .2X
			e[15] = byte(0x10 + index)
			nodeIP = netip.AddrFrom16(e)
			e[15] = byte(0x20 + index)
			gwIP = netip.AddrFrom16(e)
		} else { // ::10:<index> and ::20:<index>
			e[13], e[15] = 0x10, byte(index)
			nodeIP = netip.AddrFrom16(e)
			e[13] = 0x20
			gwIP = netip.AddrFrom16(e)
		}
	}
	return FamilyAddrs{
		Family:    family,
		Subnet:    subnet,
		RouterIP:  nthAddr(subnet.Addr(), 1),
		MgmtIP:    nthAddr(subnet.Addr(), 2),
		JoinIP:    nthAddr(p.join.Addr(), uint32(index)+1),
		NodeIP:    nodeIP,
		GatewayIP: gwIP,
		TransitIP: nthAddr(p.transit.Addr(), uint32(index)+1),
	}
}

// PodIP returns the n-th pod address of a node subnet (n >= 0 gives .3, .4, ...), or false when the subnet is full
// (the IPv6 subnets use the same 251 addresses as the IPv4 ones).
func PodIP(subnet netip.Prefix, n int) (netip.Addr, bool) {
	if n < 0 || n > 250 {
		return netip.Addr{}, false
	}
	return nthAddr(subnet.Addr(), uint32(n)+3), true
}

// podIndex is the n for which PodIP(subnet, n) is ip; false when ip is none of subnet's pod addresses.
func podIndex(subnet netip.Prefix, ip netip.Addr) (int, bool) {
	for n := 0; ; n++ {
		a, ok := PodIP(subnet, n)
		if !ok {
			return 0, false
		}
		if a == ip {
			return n, true
		}
	}
}

// ovnMAC is the OVN-Kubernetes convention for logical port MACs: 0a:58 followed by the IPv4 address bytes (for an
// IPv6 address of this plan, bytes 3, 7, 13 and 15: the network, the node index and the host part, unique per port).
func ovnMAC(ip netip.Addr) string { return macFor(0x0a, 0x58, ip) }

func macFor(b0, b1 byte, ip netip.Addr) string {
	var b [4]byte
	if ip.Is4() {
		b = ip.As4()
	} else {
		s := ip.As16()
		b = [4]byte{s[3], s[7], s[13], s[15]}
	}
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b0, b1, b[0], b[1], b[2], b[3])
}

// nthAddr adds n to base (in its low 32 bits for IPv6).
func nthAddr(base netip.Addr, n uint32) netip.Addr {
	if base.Is6() {
		b := base.As16()
		v := uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])
		v += n
		b[12], b[13], b[14], b[15] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
		return netip.AddrFrom16(b)
	}
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
