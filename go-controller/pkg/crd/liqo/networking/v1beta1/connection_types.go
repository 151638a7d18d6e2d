package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConnectionStatusValue is the state of the network tunnel to a remote cluster. Liqo uses Connected, Connecting
// and Error; any other value is accepted and counts as not connected.
type ConnectionStatusValue string

const (
	// Connected means the tunnel is up.
	Connected ConnectionStatusValue = "Connected"
	// Connecting means the tunnel is being set up.
	Connecting ConnectionStatusValue = "Connecting"
	// ConnectionError means the tunnel failed.
	ConnectionError ConnectionStatusValue = "Error"
)

// ConnectionType is the side of the tunnel this cluster plays.
// +kubebuilder:validation:Enum=Server;Client
type ConnectionType string

// Connection reports the state of the network tunnel from this cluster to one remote cluster
// (label liqo.io/remote-cluster-id). Only status.value is read here; every field of Liqo's Connection is
// declared, so that objects written by Liqo pass field validation.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=connections,scope=Namespaced,categories=liqo,shortName=conn
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=".spec.type"
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=".status.value"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Latency",type=string,priority=1,JSONPath=".status.latency.value"
// +kubebuilder:printcolumn:name="ClusterID",type=string,priority=1,JSONPath=".metadata.labels.liqo\\.io/remote-cluster-id"
type Connection struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec describes the tunnel (Liqo requires both fields; they are optional here, as nothing here reads them).
	// +optional
	Spec ConnectionSpec `json:"spec,omitempty"`
	// Status is the observed state of the tunnel.
	// +optional
	Status ConnectionStatus `json:"status,omitempty"`
}

// ConnectionSpec describes the tunnel.
type ConnectionSpec struct {
	// Type is Server or Client.
	// +optional
	Type ConnectionType `json:"type,omitempty"`
	// GatewayRef refers to the gateway that carries the tunnel.
	// +optional
	GatewayRef *corev1.ObjectReference `json:"gatewayRef,omitempty"`
}

// ConnectionStatus is the observed state of the tunnel.
type ConnectionStatus struct {
	// Value is Connected, Connecting or Error.
	// +optional
	Value ConnectionStatusValue `json:"value,omitempty"`
	// Latency is the last measured latency of the tunnel.
	// +optional
	Latency *ConnectionLatency `json:"latency,omitempty"`
}

// ConnectionLatency is a latency measurement.
type ConnectionLatency struct {
	// Value is the latency (e.g. "2ms").
	// +optional
	Value string `json:"value,omitempty"`
	// Timestamp is when it was measured.
	// +optional
	// +nullable
	Timestamp *metav1.Time `json:"timestamp,omitempty"`
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
