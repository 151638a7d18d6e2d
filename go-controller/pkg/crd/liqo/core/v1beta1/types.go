package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionType names a ForeignCluster condition.
type ConditionType string

// The condition types read here.
const (
	// APIServerStatusCondition (in status.conditions) is the state of the foreign cluster's API server.
	APIServerStatusCondition ConditionType = "APIServerStatus"
	// NetworkConnectionStatusCondition (in status.modules.networking.conditions) is the state of the network
	// connection to the foreign cluster.
	NetworkConnectionStatusCondition ConditionType = "NetworkConnectionStatus"
)

// ConditionStatus is the status of a ForeignCluster condition.
type ConditionStatus string

// The condition statuses read here (Liqo also uses Pending, Error, Ready, NotReady, SomeNotReady).
const (
	// ConditionStatusNone means the condition does not apply; it is also what an absent condition counts as.
	ConditionStatusNone ConditionStatus = "None"
	// ConditionStatusEstablished means the connection or API server is up.
	ConditionStatusEstablished ConditionStatus = "Established"
)

// ForeignCluster is a cluster peered with this one. Only spec.clusterID, status.modules.networking (enabled,
// conditions) and status.conditions are read; the other fields of Liqo's ForeignCluster are declared as far as
// their shape is known and every unknown field is kept, so that objects written by Liqo pass field validation.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=foreignclusters,scope=Cluster,categories=liqo,shortName=fc
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Role",type=string,JSONPath=".status.role"
// +kubebuilder:printcolumn:name="ClusterID",type=string,priority=1,JSONPath=".spec.clusterID"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ForeignCluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec names the foreign cluster.
	// +optional
	Spec ForeignClusterSpec `json:"spec,omitempty"`
	// Status is the observed state of the peering.
	// +optional
	Status ForeignClusterStatus `json:"status,omitempty"`
}

// ForeignClusterSpec names the foreign cluster.
// +kubebuilder:pruning:PreserveUnknownFields
type ForeignClusterSpec struct {
	// ClusterID is the foreign cluster's ID.
	// +optional
	ClusterID string `json:"clusterID,omitempty"`
}

// ForeignClusterStatus is the observed state of the peering.
// +kubebuilder:pruning:PreserveUnknownFields
type ForeignClusterStatus struct {
	// Role is Consumer, Provider, ConsumerAndProvider or Unknown.
	// +optional
	Role string `json:"role,omitempty"`
	// Modules holds the state of each peering module.
	// +optional
	Modules Modules `json:"modules,omitempty"`
	// APIServerURL is the URL of the foreign cluster's API server.
	// +optional
	APIServerURL string `json:"apiServerUrl,omitempty"`
	// ForeignProxyURL is the URL of the proxy in front of the foreign API server.
	// +optional
	ForeignProxyURL string `json:"foreignProxyUrl,omitempty"`
	// TenantNamespace names the tenant namespaces of the pair of clusters.
	// +optional
	TenantNamespace TenantNamespace `json:"tenantNamespace,omitempty"`
	// Conditions are the generic conditions (APIServerStatus among them).
	// +optional
	// +listType=atomic
	Conditions []Condition `json:"conditions,omitempty"`
}

// Modules holds the state of each peering module.
// +kubebuilder:pruning:PreserveUnknownFields
type Modules struct {
	// Networking is the networking module.
	// +optional
	Networking Module `json:"networking,omitempty"`
	// Authentication is the authentication module.
	// +optional
	Authentication Module `json:"authentication,omitempty"`
	// Offloading is the offloading module.
	// +optional
	Offloading Module `json:"offloading,omitempty"`
}

// Module is the state of one peering module.
// +kubebuilder:pruning:PreserveUnknownFields
type Module struct {
	// Enabled says whether the module is enabled.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// Conditions are the module's conditions.
	// +optional
	// +listType=atomic
	Conditions []Condition `json:"conditions,omitempty"`
}

// TenantNamespace names the tenant namespaces of the pair of clusters.
type TenantNamespace struct {
	// Local is the tenant namespace in this cluster.
	// +optional
	Local string `json:"local,omitempty"`
	// Remote is the tenant namespace in the foreign cluster.
	// +optional
	Remote string `json:"remote,omitempty"`
}

// Condition is one ForeignCluster condition.
// +kubebuilder:pruning:PreserveUnknownFields
type Condition struct {
	// Type is the condition type (APIServerStatus, NetworkConnectionStatus, ...).
	// +optional
	Type ConditionType `json:"type,omitempty"`
	// Status is the condition status (None, Pending, Established, Error, Ready, NotReady, SomeNotReady).
	// +optional
	Status ConditionStatus `json:"status,omitempty"`
	// LastTransitionTime is when the status last changed.
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

// ForeignClusterList is a list of ForeignCluster.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type ForeignClusterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ForeignCluster `json:"items"`
}
