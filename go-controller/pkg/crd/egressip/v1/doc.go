// Package v1 is the k8s.ovn.org/v1 API group: the cluster-scoped EgressIP resource.
//
// +k8s:deepcopy-gen=package
// +groupName=k8s.ovn.org
package v1
