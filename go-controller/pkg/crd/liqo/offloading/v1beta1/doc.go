// Package v1beta1 is the part of Liqo's offloading.liqo.io/v1beta1 API group that the direct-connections
// controllers use: the namespaced ShadowEndpointSlice, which a consumer cluster writes into a provider cluster and
// the provider turns into a real EndpointSlice.
//
// +k8s:deepcopy-gen=package
// +groupName=offloading.liqo.io
package v1beta1
