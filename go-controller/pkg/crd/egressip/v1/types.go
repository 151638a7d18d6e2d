package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EgressIP asks that traffic leaving the selected pods for destinations outside
// the cluster carries one of spec.egressIPs as its source address. The master
// assigns each IP to one egress-assignable node and records the result in
// status.items; it is the only writer of status.
//
// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=egressips,scope=Cluster,shortName=eip
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="EgressIPs",type=string,JSONPath=".spec.egressIPs"
// +kubebuilder:printcolumn:name="Assigned Node",type=string,JSONPath=".status.items[*].node"
// +kubebuilder:printcolumn:name="Assigned EgressIPs",type=string,JSONPath=".status.items[*].egressIP"
// +kubebuilder:printcolumn:name="Assigned",type=string,JSONPath=".status.assigned",description="egress IPs assigned / requested"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
type EgressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the user's request.
	// +required
	Spec EgressIPSpec `json:"spec"`
	// Status is where the master reports which node holds which egress IP.
	// +optional
	Status EgressIPStatus `json:"status,omitempty"`
}

// EgressIPSpec is the user's request: which source IPs, for which pods.
type EgressIPSpec struct {
	// EgressIPs are the source IPs (IPv4 and/or IPv6) that selected pods egress with.
	// Each entry must be an IP address; entries must be unique; at least one.
	// The same address written two ways (fd00::1, fd00:0::1) passes admission and
	// is reported by the master as an Event.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=45
	// +kubebuilder:validation:items:XValidation:rule="isIP(self)",message="each egressIPs entry must be an IPv4 or IPv6 address"
	// +listType=set
	// +required
	EgressIPs []string `json:"egressIPs"`
	// NamespaceSelector selects the namespaces whose pods are served.
	// +required
	NamespaceSelector metav1.LabelSelector `json:"namespaceSelector"`
	// PodSelector further narrows the pods of the selected namespaces (ANDed).
	// Empty or absent selects every pod of those namespaces.
	// +optional
	PodSelector metav1.LabelSelector `json:"podSelector,omitempty"`
	// NodeSelector restricts the nodes that may host this EgressIP's IPs to those
	// it selects, among the nodes labelled k8s.ovn.org/egress-assignable (ANDed).
	// Absent: every egress-assignable node. Changing it moves the IPs held by
	// nodes it no longer selects (make-before-break).
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Strict, when true, drops the served pods' traffic to destinations outside
	// the cluster while none of spec.egressIPs is assigned, instead of letting it
	// leave with a node's or gateway router's address. Traffic inside the cluster
	// (pods, nodes, services) is unaffected. Default false.
	// +optional
	Strict bool `json:"strict,omitempty"`
}

// EgressIPStatus lists the egress IPs that are currently assigned, one item per
// IP, and conditions that say whether the request is met and, per IP, why not.
type EgressIPStatus struct {
	// Items are the assignments: each egress IP that is held, and by which node.
	// +optional
	Items []EgressIPStatusItem `json:"items,omitempty"`
	// Assigned is "<assigned>/<requested>", for example "2/2".
	// +optional
	Assigned string `json:"assigned,omitempty"`
	// Conditions: "Ready" (every requested IP is assigned and programmed) and,
	// per requested IP, "Assigned-<ip>" (IPv6 colons written as dashes) saying
	// whether it is assigned and, if not, why (the reason).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EgressIPStatusItem says that node Node holds egress IP EgressIP.
type EgressIPStatusItem struct {
	// Node is the name of the Node holding the IP.
	Node string `json:"node"`
	// EgressIP is the assigned IP, as written in spec.egressIPs.
	EgressIP string `json:"egressIP"`
}

// EgressIPList is a list of EgressIP.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type EgressIPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EgressIP `json:"items"`
}
