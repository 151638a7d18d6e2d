package cluster

import (
	"fmt"
	"net/netip"
)

// Address plan of the local cluster. Every address is derived from the node's 1-based index, so the layout is the same
// for the shell, the Go API and the docs (docs/local-cluster.md). Nodes 1..9 use the layout of the gateway-modes recipe
// (node 172.18.0.1X, GR 172.18.0.2X), which leaves 172.18.0.30-172.18.0.99 free for egress IPs in tests; nodes 10 and
// up (scale runs) take their external addresses from 172.18.16.0 (nodes) and 172.18.32.0 (gateway routers).
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
)

// NodeAddrs are the addresses of one node.
type NodeAddrs struct {
	Index      int          // 1-based
	Name       string       // node<index>
	Subnet     netip.Prefix // pod subnet 10.244.<index>.0/24
	RouterIP   netip.Addr   // ovn_cluster_router port on the node switch, 10.244.<index>.1
	MgmtIP     netip.Addr   // management port k8s-<node> in the node netns, 10.244.<index>.2
	JoinIP     netip.Addr   // GR_<node> port on the join switch (the reroute nexthop in shared mode)
	NodeIP     netip.Addr   // the node netns eth0 on br-ex (the "host" IP)
	GatewayIP  netip.Addr   // GR_<node> external port on ext_<node>
	NodeMAC    string       // node netns eth0
	MgmtMAC    string       // management port
	GatewayMAC string       // GR_<node> external port
	RouterMAC  string       // rtos-<node>
	JoinMAC    string       // rtoj-GR_<node>
}

// NodeName is the name of the node with the given 1-based index.
func NodeName(index int) string { return fmt.Sprintf("node%d", index) }

// AddrsFor returns the addresses of node index (1..MaxNodes).
func AddrsFor(index int) (NodeAddrs, error) {
	if index < 1 || index > MaxNodes {
		return NodeAddrs{}, fmt.Errorf("node index %d out of range 1..%d", index, MaxNodes)
	}
	subnet := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(index), 0}), 24)
	var nodeIP, gwIP netip.Addr
	if index <= 9 {
		nodeIP = netip.AddrFrom4([4]byte{172, 18, 0, byte(10 + index)})
		gwIP = netip.AddrFrom4([4]byte{172, 18, 0, byte(20 + index)})
	} else {
		nodeIP = netip.AddrFrom4([4]byte{172, 18, 16, byte(index)})
		gwIP = netip.AddrFrom4([4]byte{172, 18, 32, byte(index)})
	}
	a := NodeAddrs{
		Index:     index,
		Name:      NodeName(index),
		Subnet:    subnet,
		RouterIP:  nthAddr(subnet.Addr(), 1),
		MgmtIP:    nthAddr(subnet.Addr(), 2),
		JoinIP:    nthAddr(netip.MustParsePrefix(JoinCIDR).Addr(), uint32(index)+1),
		NodeIP:    nodeIP,
		GatewayIP: gwIP,
	}
	a.NodeMAC = macFor(0x02, 0x00, a.NodeIP)
	a.MgmtMAC = ovnMAC(a.MgmtIP)
	a.GatewayMAC = ovnMAC(a.GatewayIP)
	a.RouterMAC = ovnMAC(a.RouterIP)
	a.JoinMAC = ovnMAC(a.JoinIP)
	return a, nil
}

// PodIP returns the n-th pod address of a node subnet (n >= 0 gives .3, .4, ...), or false when the subnet is full.
func PodIP(subnet netip.Prefix, n int) (netip.Addr, bool) {
	if n < 0 || n > 250 {
		return netip.Addr{}, false
	}
	return nthAddr(subnet.Addr(), uint32(n)+3), true
}

// ovnMAC is the OVN-Kubernetes convention for logical port MACs: 0a:58 followed by the IPv4 address bytes.
func ovnMAC(ip netip.Addr) string { return macFor(0x0a, 0x58, ip) }

func macFor(b0, b1 byte, ip netip.Addr) string {
	b := ip.As4()
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", b0, b1, b[0], b[1], b[2], b[3])
}

func nthAddr(base netip.Addr, n uint32) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += n
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Host port (root namespace into OVN) addresses.
var (
	hostSubnet    = netip.MustParsePrefix("10.244.0.0/24")
	hostRouterIP  = netip.MustParseAddr("10.244.0.1")
	clusterRtrJIP = netip.MustParseAddr("100.64.0.1")
)
