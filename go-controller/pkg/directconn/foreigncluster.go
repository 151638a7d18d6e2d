package directconn

import (
	"sort"

	corev1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/core/v1beta1"
)

// OriginState is what the ForeignCluster of a shadow's origin (consumer) cluster says, as Liqo's provider reads it.
type OriginState struct {
	// ForeignCluster is the name of the ForeignCluster.
	ForeignCluster string
	// NetworkingEnabled is status.modules.networking.enabled. When false the consumer's addresses are used as they
	// are (no mapping at all), as Liqo does.
	NetworkingEnabled bool
	// Ready is whether the endpoints may be ready: the network connection to the consumer is Established (or the
	// networking module is disabled) and its API server is Established or None (an absent condition counts as
	// None).
	Ready bool
}

// OriginFromForeignClusters returns the state of cluster id from the ForeignCluster whose spec.clusterID is id
// (the first by name if several), or nil when there is none.
func OriginFromForeignClusters(fcs []*corev1beta1.ForeignCluster, id string) *OriginState {
	var match []*corev1beta1.ForeignCluster
	for _, fc := range fcs {
		if id != "" && fc.Spec.ClusterID == id {
			match = append(match, fc)
		}
	}
	if len(match) == 0 {
		return nil
	}
	sort.Slice(match, func(i, j int) bool { return match[i].Name < match[j].Name })
	fc := match[0]
	net := fc.Status.Modules.Networking
	networkReady := !net.Enabled ||
		conditionStatus(net.Conditions, corev1beta1.NetworkConnectionStatusCondition) == corev1beta1.ConditionStatusEstablished
	api := conditionStatus(fc.Status.Conditions, corev1beta1.APIServerStatusCondition)
	apiReady := api == corev1beta1.ConditionStatusEstablished || api == corev1beta1.ConditionStatusNone
	return &OriginState{ForeignCluster: fc.Name, NetworkingEnabled: net.Enabled, Ready: networkReady && apiReady}
}

// conditionStatus returns the status of the first condition of type t, None when there is none.
func conditionStatus(conds []corev1beta1.Condition, t corev1beta1.ConditionType) corev1beta1.ConditionStatus {
	for _, c := range conds {
		if c.Type == t {
			return c.Status
		}
	}
	return corev1beta1.ConditionStatusNone
}
