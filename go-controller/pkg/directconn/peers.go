package directconn

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
)

// Peer is what one cluster knows about one remote cluster, from its Configuration and Connection objects
// labelled liqo.io/remote-cluster-id with that cluster's ID.
type Peer struct {
	// HasConfiguration is true when at least one Configuration names the cluster.
	HasConfiguration bool
	// Config is the namespace/name of the Configuration (of one of them when there are several).
	Config string
	// Map is the Configuration's pod CIDR map; valid only when HasConfiguration and MapErr == nil.
	Map CIDRMap
	// Ext is the Configuration's external CIDR map; valid only when HasConfiguration and MapErr == nil.
	Ext CIDRMap
	// MapErr says why the Configuration cannot be used (malformed, no status yet, several Configurations).
	MapErr error
	// Connection is the best status.value among the Connections that name the cluster (Connected, then
	// Connecting, then Error, then anything else); "" when there is none.
	Connection netv1beta1.ConnectionStatusValue
	// HasConnection is true when at least one Connection names the cluster.
	HasConnection bool
}

// Peers indexes Configurations and Connections by the remote cluster ID in their liqo.io/remote-cluster-id
// label. Objects without the label are ignored. Several Configurations for one cluster are an error (they could
// disagree), reported through Peer.MapErr; several Connections are fine (the best status counts).
func Peers(cfgs []*netv1beta1.Configuration, conns []*netv1beta1.Connection) map[string]Peer {
	out := map[string]Peer{}
	byCluster := map[string][]*netv1beta1.Configuration{}
	for _, c := range cfgs {
		if id := c.Labels[RemoteClusterIDLabel]; id != "" {
			byCluster[id] = append(byCluster[id], c)
		}
	}
	for id, list := range byCluster {
		p := Peer{HasConfiguration: true, Config: list[0].Namespace + "/" + list[0].Name}
		if len(list) > 1 {
			names := make([]string, 0, len(list))
			for _, c := range list {
				names = append(names, c.Namespace+"/"+c.Name)
			}
			sort.Strings(names)
			p.MapErr = fmt.Errorf("%d Configurations name cluster %s (%v); expected one", len(list), id, names)
		} else {
			p.Map, p.Ext, p.MapErr = CIDRMapFromConfiguration(list[0])
		}
		out[id] = p
	}
	for _, c := range conns {
		id := c.Labels[RemoteClusterIDLabel]
		if id == "" {
			continue
		}
		p := out[id]
		if !p.HasConnection || connectionRank(c.Status.Value) < connectionRank(p.Connection) {
			p.Connection = c.Status.Value
		}
		p.HasConnection = true
		out[id] = p
	}
	return out
}

func connectionRank(v netv1beta1.ConnectionStatusValue) int {
	switch v {
	case netv1beta1.Connected:
		return 0
	case netv1beta1.Connecting:
		return 1
	case netv1beta1.ConnectionError:
		return 2
	default:
		return 3
	}
}

// NodeClusters maps the name of every Node to the provider cluster it stands for: the liqo.io/remote-cluster-id
// label of a virtual Node (label liqo.io/type=virtual-node), "" for the consumer's own Nodes and for virtual nodes
// without a cluster ID (their endpoints are treated like the consumer's own).
func NodeClusters(nodes []*corev1.Node) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		out[n.Name] = ""
		if n.Labels[NodeTypeLabel] == VirtualNodeType {
			out[n.Name] = n.Labels[RemoteClusterIDLabel]
		}
	}
	return out
}
