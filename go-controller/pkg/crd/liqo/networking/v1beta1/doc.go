// Package v1beta1 is the part of Liqo's networking.liqo.io/v1beta1 API group that the direct-connections
// controllers read: Configuration (how this cluster sees a remote cluster's pod CIDRs) and Connection (whether the
// network tunnel to a remote cluster is up). Both are namespaced and labelled liqo.io/remote-cluster-id with the
// remote cluster's ID.
//
// +k8s:deepcopy-gen=package
// +groupName=networking.liqo.io
package v1beta1
