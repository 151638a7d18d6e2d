// Package nbstate computes the OVN Northbound rows the master wants for egress IPs
// (Routes, PodRows, ClusterRows, pure; the master composes them, master.plan),
// compares them with the rows it owns in NB (Diff, pure), and turns the difference
// into one list of libovsdb operations (Ops) to be committed in a single
// transaction.
//
// Every row written here carries these external_ids (one key per value), which are
// how rows are found again and how ownership is decided; rows without
// OwnerControllerKey=OwnerController are never modified or deleted:
//
//	k8s.ovn.org/owner-controller  "egressip" on every row we own
//	k8s.ovn.org/owner-type        "EgressIP" for rows of one EgressIP (reroute, snat),
//	                              "Cluster" for rows shared by all EgressIPs
//	k8s.ovn.org/name              the EgressIP's name (owner-type EgressIP only)
//	k8s.ovn.org/rule              reroute | snat | pod-to-pod | pod-to-join | pod-to-node |
//	                              served-pods | node-ips
//	k8s.ovn.org/ip-family         ip4 | ip6
//	k8s.ovn.org/pod               <namespace>/<name> of the served pod (reroute, snat)
//	k8s.ovn.org/egress-ip         the egress IP, canonical form (snat)
//
// The identity of a row is its table, its parent router (policies and NAT rows) and
// the values of these keys; everything else (match, nexthops, addresses...) is
// content that is updated in place. A SNAT row's node is its gateway router, GR_<node>,
// which references it: no external_id names it, so when an egress IP moves, its SNAT
// rows change router (two mutations of the routers' nat sets) and not one column of
// their own. Earlier versions also wrote k8s.ovn.org/node on SNAT rows; such a row
// reads with IDs.Node set, so it differs from the desired row, and Diff rewrites its
// external_ids in place (see moveNATs).
package nbstate

import (
	"net/netip"
	"strings"
)

// External ID keys and values; see the package documentation.
const (
	OwnerControllerKey = "k8s.ovn.org/owner-controller"
	OwnerTypeKey       = "k8s.ovn.org/owner-type"
	NameKey            = "k8s.ovn.org/name"
	RuleKey            = "k8s.ovn.org/rule"
	FamilyKey          = "k8s.ovn.org/ip-family"
	PodKey             = "k8s.ovn.org/pod"
	// NodeKey is only read: earlier versions wrote it on SNAT rows (see above).
	NodeKey     = "k8s.ovn.org/node"
	EgressIPKey = "k8s.ovn.org/egress-ip"

	// OwnerController marks every row this controller owns.
	OwnerController = "egressip"
	// OwnerEgressIP rows belong to one EgressIP (NameKey names it).
	OwnerEgressIP = "EgressIP"
	// OwnerCluster rows are shared by all EgressIPs.
	OwnerCluster = "Cluster"
)

// Rules (values of RuleKey).
const (
	RuleReroute    = "reroute"
	RuleSNAT       = "snat"
	RulePodToPod   = "pod-to-pod"
	RulePodToJoin  = "pod-to-join"
	RulePodToNode  = "pod-to-node"
	RuleServedPods = "served-pods"
	RuleNodeIPs    = "node-ips"
)

// Families (values of FamilyKey).
const (
	FamilyIPv4 = "ip4"
	FamilyIPv6 = "ip6"
)

// Topology names and priorities (OVN-Kubernetes conventions).
const (
	ClusterRouter       = "ovn_cluster_router"
	GatewayRouterPrefix = "GR_"
	ReroutePriority     = 100
	NoReroutePriority   = 102
	servedPodsSetPrefix = "egressip_served_pods_"
	nodeIPsSetPrefix    = "egressip_node_ips_"
)

// GatewayRouter returns the name of node's gateway router, GR_<node>.
func GatewayRouter(node string) string { return GatewayRouterPrefix + node }

// IDs is the identity of a row in external_ids form. The zero value of a field
// means "key absent".
type IDs struct {
	OwnerType string
	Name      string
	Rule      string
	Family    string
	Pod       string
	Node      string
	EgressIP  string
}

// ExternalIDs renders ids as the external_ids map written to NB (OwnerControllerKey included).
// Built directly: it runs for every row of a plan and of the Mirror's answers.
func (ids IDs) ExternalIDs() map[string]string {
	m := make(map[string]string, 8)
	m[OwnerControllerKey] = OwnerController
	for _, kv := range [...][2]string{
		{OwnerTypeKey, ids.OwnerType}, {NameKey, ids.Name}, {RuleKey, ids.Rule}, {FamilyKey, ids.Family},
		{PodKey, ids.Pod}, {NodeKey, ids.Node}, {EgressIPKey, ids.EgressIP},
	} {
		if kv[1] != "" {
			m[kv[0]] = kv[1]
		}
	}
	return m
}

// Owned reports whether a row's external_ids mark it as ours.
func Owned(externalIDs map[string]string) bool {
	return externalIDs[OwnerControllerKey] == OwnerController
}

// ParseIDs reads the identity of a row we own. ok is false when the row is not
// ours (no owner key) or lacks the owner type or rule.
func ParseIDs(externalIDs map[string]string) (ids IDs, ok bool) {
	if !Owned(externalIDs) {
		return IDs{}, false
	}
	ids = IDs{
		OwnerType: externalIDs[OwnerTypeKey],
		Name:      externalIDs[NameKey],
		Rule:      externalIDs[RuleKey],
		Family:    externalIDs[FamilyKey],
		Pod:       externalIDs[PodKey],
		Node:      externalIDs[NodeKey],
		EgressIP:  externalIDs[EgressIPKey],
	}
	return ids, ids.OwnerType != "" && ids.Rule != ""
}

// String renders ids for logs and sorting: key=value pairs in a fixed order.
func (ids IDs) String() string {
	var b strings.Builder
	b.Grow(len(ids.OwnerType) + len(ids.Name) + len(ids.Rule) + len(ids.Family) + len(ids.Pod) + len(ids.Node) + len(ids.EgressIP) + 64)
	for _, kv := range [...][2]string{
		{"owner-type", ids.OwnerType}, {"name", ids.Name}, {"rule", ids.Rule}, {"ip-family", ids.Family},
		{"pod", ids.Pod}, {"node", ids.Node}, {"egress-ip", ids.EgressIP},
	} {
		if kv[1] != "" {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(kv[0])
			b.WriteByte('=')
			b.WriteString(kv[1])
		}
	}
	return b.String()
}

// Key identifies one row: its parent router ("" for address sets) and its IDs.
type Key struct {
	Router string
	IDs    IDs
}

func (k Key) String() string {
	if k.Router == "" {
		return k.IDs.String()
	}
	return k.Router + ":" + k.IDs.String()
}

// Family returns FamilyIPv4 or FamilyIPv6 for addr.
func Family(addr netip.Addr) string {
	if addr.Is4() {
		return FamilyIPv4
	}
	return FamilyIPv6
}

// ServedPodsAddressSet and NodeIPsAddressSet name the shared address sets of a
// family (egressip_served_pods_v4, egressip_node_ips_v6, ...): names OVN matches can
// reference as $name.
func ServedPodsAddressSet(family string) string { return servedPodsSetPrefix + setSuffix(family) }

// NodeIPsAddressSet: see ServedPodsAddressSet.
func NodeIPsAddressSet(family string) string { return nodeIPsSetPrefix + setSuffix(family) }

func setSuffix(family string) string {
	if family == FamilyIPv6 {
		return "v6"
	}
	return "v4"
}
