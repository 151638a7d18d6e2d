package v1beta1

import (
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ShadowEndpointSlice is an EndpointSlice reflected from a consumer cluster into a provider cluster. The provider's
// controller creates an EndpointSlice with the same namespace and name from spec.template, owned by the shadow.
// Its labels and annotations are copied to that EndpointSlice (except liqo.io/direct-connections-data, which the
// provider consumes).
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=shadowendpointslices,scope=Namespaced,categories=liqo,shortName=shes;sheps;seps
type ShadowEndpointSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the EndpointSlice to create.
	// +optional
	Spec ShadowEndpointSliceSpec `json:"spec,omitempty"`
}

// ShadowEndpointSliceSpec holds the EndpointSlice to create.
type ShadowEndpointSliceSpec struct {
	// Template is the content of the EndpointSlice (endpoints, ports and address type).
	// +optional
	Template EndpointSliceTemplate `json:"template,omitempty"`
}

// EndpointSliceTemplate is the content of an EndpointSlice, with the same fields and meaning as
// discovery.k8s.io/v1 EndpointSlice.
type EndpointSliceTemplate struct {
	// Endpoints are the endpoints of the slice, with addresses as the provider cluster reaches them.
	// +optional
	// +listType=atomic
	Endpoints []discoveryv1.Endpoint `json:"endpoints,omitempty"`
	// Ports are the ports of the slice.
	// +optional
	// +listType=atomic
	Ports []discoveryv1.EndpointPort `json:"ports,omitempty"`
	// AddressType is IPv4, IPv6 or FQDN.
	// +optional
	AddressType discoveryv1.AddressType `json:"addressType,omitempty"`
}

// ShadowEndpointSliceList is a list of ShadowEndpointSlice.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ShadowEndpointSliceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ShadowEndpointSlice `json:"items"`
}
