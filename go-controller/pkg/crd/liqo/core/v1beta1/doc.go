// Package v1beta1 is the part of Liqo's core.liqo.io/v1beta1 API group that the direct-connections provider
// reads: ForeignCluster (one per peered cluster, cluster-scoped), whose status says whether the network and the
// API server of that cluster are usable.
//
// +k8s:deepcopy-gen=package
// +groupName=core.liqo.io
package v1beta1
