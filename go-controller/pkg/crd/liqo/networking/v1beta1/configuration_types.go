package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RemoteClusterIDLabel is the label that names the remote cluster a Configuration or Connection is about.
const RemoteClusterIDLabel = "liqo.io/remote-cluster-id"

// CIDR is an IPv4 or IPv6 prefix in CIDR notation (10.244.0.0/16, fd00:10::/64).
// +kubebuilder:validation:MaxLength=49
// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="must be an IPv4 or IPv6 CIDR"
type CIDR string

// Configuration describes how this cluster sees one remote cluster's network (label liqo.io/remote-cluster-id).
// spec.remote.cidr.pod[i] is a real pod CIDR of the remote cluster; status.remote.cidr.pod[i] is the CIDR this
// cluster uses to reach it (equal to spec when there is no overlap, a remapped CIDR of the same size otherwise).
// The same holds for the remote cluster's external CIDRs (spec.remote.cidr.external[i] ->
// status.remote.cidr.external[i]). Every field of Liqo's Configuration is declared, so that objects written by
// Liqo pass field validation.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=configurations,scope=Namespaced,categories=liqo,shortName=conf
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Desired Pod CIDR",type=string,JSONPath=".spec.remote.cidr.pod"
// +kubebuilder:printcolumn:name="Remapped Pod CIDR",type=string,JSONPath=".status.remote.cidr.pod"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Desired External CIDR",type=string,priority=1,JSONPath=".spec.remote.cidr.external"
// +kubebuilder:printcolumn:name="Remapped External CIDR",type=string,priority=1,JSONPath=".status.remote.cidr.external"
// +kubebuilder:printcolumn:name="ClusterID",type=string,priority=1,JSONPath=".metadata.labels.liqo\\.io/remote-cluster-id"
type Configuration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec holds the local and the remote cluster's real CIDRs.
	// +optional
	Spec ConfigurationSpec `json:"spec,omitempty"`
	// Status holds the remote cluster's CIDRs as this cluster sees them.
	// +optional
	Status ConfigurationStatus `json:"status,omitempty"`
}

// ConfigurationSpec holds the network configuration of the pair of clusters.
type ConfigurationSpec struct {
	// Local is this cluster's network configuration (not read by the direct-connections controllers).
	// +optional
	Local *ClusterConfig `json:"local,omitempty"`
	// Remote is the remote cluster's real network configuration.
	// +optional
	Remote ClusterConfig `json:"remote,omitempty"`
}

// ConfigurationStatus holds the remote cluster's network configuration as this cluster sees it.
type ConfigurationStatus struct {
	// Remote is the remote cluster's remapped network configuration; absent until remapping is done.
	// +optional
	Remote *ClusterConfig `json:"remote,omitempty"`
	// Conditions report the state of the Configuration (not read by the direct-connections controllers).
	// +optional
	// +listType=atomic
	Conditions []Condition `json:"conditions,omitempty"`
}

// ClusterConfig is a cluster's network configuration.
type ClusterConfig struct {
	// CIDR holds the cluster's CIDRs.
	// +optional
	CIDR ClusterConfigCIDR `json:"cidr,omitempty"`
}

// ClusterConfigCIDR holds a cluster's CIDRs.
type ClusterConfigCIDR struct {
	// Pod are the pod CIDRs. In status, entry i is how this cluster sees entry i of spec.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Pod []CIDR `json:"pod,omitempty"`
	// External are the external CIDRs (the range through which the cluster exposes addresses that are not its
	// pods'). In status, entry i is how this cluster sees entry i of spec.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	External []CIDR `json:"external,omitempty"`
}

// Condition is a status condition. Every field is optional and unknown fields are kept, so that any condition
// Liqo writes is accepted; the direct-connections controllers do not read Configuration conditions.
// +kubebuilder:pruning:PreserveUnknownFields
type Condition struct {
	// Type of the condition.
	// +optional
	Type string `json:"type,omitempty"`
	// Status of the condition.
	// +optional
	Status string `json:"status,omitempty"`
	// ObservedGeneration is the generation the condition was set for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastTransitionTime is when the condition last changed status.
	// +optional
	// +nullable
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`
	// Reason is a machine-readable reason for the last transition.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message is a human-readable message about the last transition.
	// +optional
	Message string `json:"message,omitempty"`
}

// ConfigurationList is a list of Configuration.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ConfigurationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Configuration `json:"items"`
}
