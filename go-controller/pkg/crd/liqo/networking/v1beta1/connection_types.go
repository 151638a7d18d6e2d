package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConnectionStatusValue is the state of the network tunnel to a remote cluster.
// +kubebuilder:validation:Enum=Connected;Connecting;Error
type ConnectionStatusValue string

const (
	// Connected means the tunnel is up.
	Connected ConnectionStatusValue = "Connected"
	// Connecting means the tunnel is being set up.
	Connecting ConnectionStatusValue = "Connecting"
	// ConnectionError means the tunnel failed.
	ConnectionError ConnectionStatusValue = "Error"
)

// Connection reports the state of the network tunnel from this cluster to one remote cluster
// (label liqo.io/remote-cluster-id). Only status.value is used here.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=connections,scope=Namespaced,categories=liqo,shortName=conn
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.value"
// +kubebuilder:printcolumn:name="ClusterID",type=string,priority=1,JSONPath=".metadata.labels.liqo\\.io/remote-cluster-id"
type Connection struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Status is the observed state of the tunnel.
	// +optional
	Status ConnectionStatus `json:"status,omitempty"`
}

// ConnectionStatus is the observed state of the tunnel.
type ConnectionStatus struct {
	// Value is Connected, Connecting or Error.
	// +optional
	Value ConnectionStatusValue `json:"value,omitempty"`
}

// ConnectionList is a list of Connection.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ConnectionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Connection `json:"items"`
}
