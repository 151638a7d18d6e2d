package cluster

import (
	"context"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// Simulated nodes, for scale runs (test/scale): the NB topology and the Node objects
// of a cluster laid out exactly as Up lays it out, without a data plane, node
// namespaces or node daemons. What the node daemon would publish (its egress facts)
// is written into the Node objects directly, as kwok-style simulators do.

// WriteNBTopology writes the NB rows of nodes (ovn_cluster_router, join switch, and
// per node the switch, GR_<node>, ext_<node> and routes; see buildTopology) into the
// NB database at nbAddress in one transaction, for gateway mode mode.
// It fails if the rows exist already.
func WriteNBTopology(ctx context.Context, nbAddress string, nodes []NodeAddrs, mode gwmode.Mode) error {
	if _, err := gwmode.Parse(string(mode)); err != nil {
		return fmt.Errorf("cluster: %w", err)
	}
	if err := createRowsAt(ctx, nbAddress, buildTopology(nodes, mode)); err != nil {
		return fmt.Errorf("NB topology: %w", err)
	}
	return nil
}

// SimulatedNode is the Node object of a simulated node: the harness annotations
// (node-subnets, gateway router join address), a Ready condition and InternalIP, and
// the egress facts its daemon would publish (node-primary-ifaddr and host-cidrs:
// eth0 with NodeIP in ExternalCIDR). Labelled egress-assignable when assignable.
func SimulatedNode(n NodeAddrs, assignable bool) *corev1.Node {
	node := nodeObject(n)
	node.Status = nodeStatus(n, metav1.Now())
	ext := netip.MustParsePrefix(ExternalCIDR)
	eth0 := netip.PrefixFrom(n.NodeIP, ext.Bits())
	node.Annotations[annotations.PrimaryIfAddr] = annotations.DualPrefix{V4: eth0}.Marshal()
	node.Annotations[annotations.HostCIDRs] = fmt.Sprintf(`[%q]`, eth0.String())
	if assignable {
		node.Labels[annotations.EgressAssignableLabel] = ""
	}
	return node
}
