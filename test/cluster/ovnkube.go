package cluster

import (
	"strings"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// The ovnkube command lines of the local cluster, in either layout: one place for the tests that run ovnkube as
// processes on it (test/e2e, test/chaos; test/scale builds its own roles with Ovnkube), so that both layouts start
// the same way everywhere.
//
// Centralized layout: one leader-elected `ovnkube --init-master --nb-address <NB>` and per node
// `ovnkube --init-node NODE` (in the node's netns). Interconnect layout: one leader-elected
// `ovnkube --init-cluster-manager` (no NB) and per node `ovnkube --init-node NODE --init-ovnkube-controller NODE
// --nb-address <the zone's NB>` (docs/interconnect.md, "Flags").

// Ovnkube is one ovnkube command line: the flags every process takes (the egress IP feature, the gateway mode, the
// cluster and join subnets of the families, kubeconfig: the identity it runs as, the log level), then Role, then
// Metrics and Extra. It is the harnesses' one builder of these command lines: test/chaos and test/e2e take it from
// Cluster.Ovnkube, test/scale (no local cluster) fills it in itself.
type Ovnkube struct {
	Kubeconfig  string
	GatewayMode gwmode.Mode
	Families    []int // the cluster's IP families (4, 6; none: IPv4)
	LogLevel    string
	Role        []string // the role flags: OvnkubeLeaderArgs, OvnkubeNodeArgs, ...
	Metrics     string   // --metrics-bind-address, when not empty
	Extra       []string // more flags, last
}

// Args is the command line, without the program.
func (o Ovnkube) Args() []string {
	var clusterNets, joinNets []string
	families := o.Families
	if len(families) == 0 {
		families = []int{4}
	}
	for _, f := range families {
		if f == 4 {
			clusterNets, joinNets = append(clusterNets, ClusterCIDR), append(joinNets, JoinCIDR)
		} else {
			clusterNets, joinNets = append(clusterNets, ClusterCIDR6), append(joinNets, JoinCIDR6)
		}
	}
	args := []string{"--egress-ip-enable", "--gateway-mode", string(o.GatewayMode), "--kubeconfig", o.Kubeconfig,
		"--cluster-subnets", strings.Join(clusterNets, ","), "--join-subnet", strings.Join(joinNets, ","), "--loglevel", o.LogLevel}
	args = append(args, o.Role...)
	if o.Metrics != "" {
		args = append(args, "--metrics-bind-address", o.Metrics)
	}
	return append(args, o.Extra...)
}

// Ovnkube is an ovnkube of the cluster (its gateway mode and families) with the role flags role.
func (c *Cluster) Ovnkube(kubeconfig, loglevel string, role ...string) Ovnkube {
	return Ovnkube{Kubeconfig: kubeconfig, GatewayMode: c.GatewayMode(), Families: c.Families(), LogLevel: loglevel, Role: role}
}

// OvnkubeCommonArgs are the flags of every ovnkube process of the cluster (Ovnkube without a role).
func (c *Cluster) OvnkubeCommonArgs(kubeconfig string, loglevel string) []string {
	return c.Ovnkube(kubeconfig, loglevel).Args()
}

// OvnkubeLeaderArgs are the role flags of the layout's leader-elected process: `--init-master --nb-address <NB>`
// (centralized) or `--init-cluster-manager` (interconnect: no NB, the zones write the rows).
//
// Both probe the nodes with the fast health check timings (FastReachabilityArgs): the local cluster's nodes are
// network namespaces of one machine, where a probe's round trip is well under a millisecond.
func (c *Cluster) OvnkubeLeaderArgs() []string {
	if c.Layout() == LayoutInterconnect {
		return append([]string{"--init-cluster-manager"}, FastReachabilityArgs()...)
	}
	return append([]string{"--init-master", "--nb-address", c.NBAddress()}, FastReachabilityArgs()...)
}

// FastReachabilityArgs are the opt-in health check timings for a master with a short, quiet path to the nodes
// (docs/egressip.md, "Health check timings in production"): a cut node fails over in about 175 ms.
func FastReachabilityArgs() []string {
	return []string{"--egressip-reachability-interval", "25ms", "--egressip-reachability-total-timeout", "75ms"}
}

// OvnkubeNodeArgs are the role flags of node's process (run in NodeNetns(node)): `--init-node NODE` with a 2 s
// host resync (the tests' pace), and in the interconnect layout the node's zone controller in the same process,
// `--init-ovnkube-controller NODE --nb-address <ZoneNBAddress(node)>`.
func (c *Cluster) OvnkubeNodeArgs(node string) []string {
	args := []string{"--init-node", node, "--egressip-node-resync-interval", "2s"}
	if c.Layout() == LayoutInterconnect {
		args = append(args, "--init-ovnkube-controller", node, "--nb-address", c.ZoneNBAddress(node))
	}
	return args
}
