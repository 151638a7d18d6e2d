// Package migrate replaces upstream OVN-Kubernetes' egress IP rows in one OVN
// Northbound database with ours (FromUpstream), or ours with rows in upstream's
// shape (ToUpstream), each as ONE transaction, so that the pods' traffic never
// meets a state with neither (docs/migration.md).
//
// Upstream's rows are found by upstream's own external_ids only:
// k8s.ovn.org/owner-controller=default-network-controller and
// k8s.ovn.org/owner-type=EgressIP. Ours are computed by the master's planning
// (master.PlannedRows) and written as nbstate.Diff plans them.
package migrate

import (
	"context"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Upstream's external_ids (shared facts, "Upstream's own egress IP rows").
const (
	UpstreamOwnerControllerKey = "k8s.ovn.org/owner-controller"
	UpstreamOwnerTypeKey       = "k8s.ovn.org/owner-type"
	UpstreamIDKey              = "k8s.ovn.org/id"
	UpstreamNameKey            = "k8s.ovn.org/name"
	UpstreamPriorityKey        = "priority"
	UpstreamFamilyKey          = "ip-family"
	UpstreamNetworkKey         = "network"

	// UpstreamController is upstream's owner controller of the default network.
	UpstreamController = "default-network-controller"
	// UpstreamOwnerType is the owner type of every upstream egress IP row.
	UpstreamOwnerType = "EgressIP"
	// UpstreamNetwork is the default network's name in upstream's ids.
	UpstreamNetwork = "default"

	// Upstream's names of its shared egress IP rows.
	UpstreamNoReroutePodToPod  = "EIP-No-Reroute-Pod-To-Pod"
	UpstreamNoReroutePodToJoin = "EIP-No-Reroute-Pod-To-Join"
	UpstreamNoReroutePodToNode = "EIP-No-Reroute-Pod-To-Node"
	UpstreamServedPods         = "egressip-served-pods"
	UpstreamNodeIPs            = "node-ips"
)

// IsUpstream reports whether external_ids mark a row as upstream's egress IP row
// (default network). Nothing else is ever deleted by FromUpstream.
func IsUpstream(ext map[string]string) bool {
	return ext[UpstreamOwnerControllerKey] == UpstreamController && ext[UpstreamOwnerTypeKey] == UpstreamOwnerType
}

func upstreamIDs(id, name string, kv ...string) map[string]string {
	m := map[string]string{
		UpstreamOwnerControllerKey: UpstreamController,
		UpstreamOwnerTypeKey:       UpstreamOwnerType,
		UpstreamNameKey:            name,
		UpstreamIDKey:              id,
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// UpstreamPolicy is a logical router policy in upstream's shape: the reroute of
// one pod (name "<egressip>_<namespace>/<pod>", priority 100) or a no-reroute
// policy (name EIP-No-Reroute-..., priority 102). fam is ip4 or ip6.
func UpstreamPolicy(name, fam string, priority int, match, action string, nexthops []string) *nbdb.LogicalRouterPolicy {
	p := strconv.Itoa(priority)
	id := strings.Join([]string{UpstreamController, UpstreamOwnerType, p, name, fam, UpstreamNetwork}, ":")
	return &nbdb.LogicalRouterPolicy{Priority: priority, Match: match, Action: action, Nexthops: nexthops,
		ExternalIDs: upstreamIDs(id, name, UpstreamPriorityKey, p, UpstreamFamilyKey, fam, UpstreamNetworkKey, UpstreamNetwork)}
}

// UpstreamSNAT is a SNAT row in upstream's shape for one pod (name
// "<egressip>_<namespace>/<pod>") on node's gateway router.
func UpstreamSNAT(name, fam, egressIP, podIP, node string) *nbdb.NAT {
	id := strings.Join([]string{UpstreamController, UpstreamOwnerType, name, fam}, ":")
	port := "k8s-" + node
	return &nbdb.NAT{Type: nbdb.NATTypeSNAT, ExternalIP: egressIP, LogicalIP: podIP, LogicalPort: &port,
		ExternalIDs: upstreamIDs(id, name, UpstreamFamilyKey, fam)}
}

// UpstreamAddressSet is an address set in upstream's shape (name
// egressip-served-pods or node-ips; fam ip4 or ip6, written v4 or v6 as upstream's
// address sets are). Its id joins upstream's keys in upstream's order (name,
// ip-family, network), and its row name is upstream's for that id: "a" and the
// decimal FNV-64a hash of the id. Upstream's controller finds its sets by that id.
func UpstreamAddressSet(name, fam string, addrs []string) *nbdb.AddressSet {
	v := "v4"
	if fam == nbstate.FamilyIPv6 {
		v = "v6"
	}
	id := strings.Join([]string{UpstreamController, UpstreamOwnerType, name, v, UpstreamNetwork}, ":")
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return &nbdb.AddressSet{Name: "a" + strconv.FormatUint(h.Sum64(), 10), Addresses: addrs,
		ExternalIDs: upstreamIDs(id, name, UpstreamFamilyKey, v, UpstreamNetworkKey, UpstreamNetwork)}
}

// Snapshot is what one NB holds that a migration reads: every row of the tables
// egress IP rows live in, or reference address sets from. Rows are the cache's:
// READ ONLY.
type Snapshot struct {
	// Ours are the rows we own (nbstate.ReadCurrent).
	Ours        nbstate.Current
	Routers     []*nbdb.LogicalRouter
	Switches    []*nbdb.LogicalSwitch
	Policies    map[string]*nbdb.LogicalRouterPolicy
	NATs        map[string]*nbdb.NAT
	QoS         map[string]*nbdb.QoS
	ACLs        []*nbdb.ACL
	AddressSets []*nbdb.AddressSet
}

// Read reads a Snapshot from a libovsdb client's cache, which must monitor
// Logical_Router, Logical_Switch, Logical_Router_Policy, NAT, QoS, ACL and
// Address_Set.
func Read(ctx context.Context, c nbstate.CacheReader) (Snapshot, error) {
	s := Snapshot{Policies: map[string]*nbdb.LogicalRouterPolicy{}, NATs: map[string]*nbdb.NAT{}, QoS: map[string]*nbdb.QoS{}}
	var err error
	if s.Ours, err = nbstate.ReadCurrent(ctx, c); err != nil {
		return s, err
	}
	tc := c.Cache()
	errs := []error{
		nbstate.EachRow(tc, nbdb.LogicalRouterTable, func(r *nbdb.LogicalRouter) { s.Routers = append(s.Routers, r) }),
		nbstate.EachRow(tc, nbdb.LogicalSwitchTable, func(r *nbdb.LogicalSwitch) { s.Switches = append(s.Switches, r) }),
		nbstate.EachRow(tc, nbdb.LogicalRouterPolicyTable, func(r *nbdb.LogicalRouterPolicy) { s.Policies[r.UUID] = r }),
		nbstate.EachRow(tc, nbdb.NATTable, func(r *nbdb.NAT) { s.NATs[r.UUID] = r }),
		nbstate.EachRow(tc, nbdb.QoSTable, func(r *nbdb.QoS) { s.QoS[r.UUID] = r }),
		nbstate.EachRow(tc, nbdb.ACLTable, func(r *nbdb.ACL) { s.ACLs = append(s.ACLs, r) }),
		nbstate.EachRow(tc, nbdb.AddressSetTable, func(r *nbdb.AddressSet) { s.AddressSets = append(s.AddressSets, r) }),
	}
	for _, err := range errs {
		if err != nil {
			return s, err
		}
	}
	return s, ctx.Err()
}
