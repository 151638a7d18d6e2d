package directconn

// Names and keys. They are Liqo's (pkg/consts, pkg/virtualKubelet/forge), so that our controllers and Liqo's
// read each other's objects: our consumer beside Liqo's provider, Liqo's consumer beside our provider.
const (
	// UseDirectConnectionsAnnotation on a consumer Service opts it in; only the exact value "true" counts.
	UseDirectConnectionsAnnotation = "liqo.io/use-direct-connections"
	// DataAnnotation on a ShadowEndpointSlice carries the JSON Data document.
	DataAnnotation = "liqo.io/direct-connections-data"
	// RemoteClusterIDLabel names the remote cluster: on a virtual Node, the provider it stands for; on a
	// Configuration or Connection, the cluster it is about.
	RemoteClusterIDLabel = "liqo.io/remote-cluster-id"
	// NodeTypeLabel with value VirtualNodeType marks a virtual Node.
	NodeTypeLabel = "liqo.io/type"
	// VirtualNodeType is the value of NodeTypeLabel on a virtual Node.
	VirtualNodeType = "virtual-node"

	// OriginClusterIDLabel on a ShadowEndpointSlice names the consumer cluster that wrote it. The provider maps
	// the addresses not listed in the data with its Configuration for that cluster; the consumer owns (updates
	// and deletes) only the shadows carrying its own cluster ID.
	OriginClusterIDLabel = "offloading.liqo.io/origin"
	// DestinationClusterIDLabel on a ShadowEndpointSlice names the provider cluster it was written to.
	DestinationClusterIDLabel = "offloading.liqo.io/destination"
	// ReflectionManagedBy is the endpointslice.kubernetes.io/managed-by value of the ShadowEndpointSlices a
	// consumer writes. The provider copies the shadow's labels to its EndpointSlice, so the provider's own
	// EndpointSlice controller leaves that slice alone.
	ReflectionManagedBy = "endpointslice.reflection.liqo.io"
	// ShadowManagedByLabel with value ShadowManagedBy marks the EndpointSlices made from ShadowEndpointSlices.
	ShadowManagedByLabel = "liqo.io/managed-by"
	// ShadowManagedBy is the value of ShadowManagedByLabel on the EndpointSlices the provider writes.
	ShadowManagedBy = "shadowendpointslice"
	// RemoteKindPrefix is prepended to the kind of a reflected endpoint's targetRef (Pod -> RemotePod).
	RemoteKindPrefix = "Remote"
)

// Event reasons.
const (
	// ReasonDirectConnectionUnavailable (Warning, provider): a listed address goes through the consumer because
	// there is no Configuration for its cluster, no Connection to it, or the Connection is not Connected.
	ReasonDirectConnectionUnavailable = "DirectConnectionUnavailable"
	// ReasonRemapFailed (Warning, both sides): an address could not be translated (outside every CIDR of its
	// cluster, prefix-length or family mismatch, malformed or missing Configuration).
	ReasonRemapFailed = "DirectConnectionRemapFailed"
	// ReasonInvalidData (Warning, provider): part of the data annotation could not be used (the message names the
	// field); the addresses it concerns are mapped as unlisted ones.
	ReasonInvalidData = "InvalidDirectConnectionsData"
	// ReasonAnnotationTooLarge (Warning, consumer): the shadow's annotations would exceed the apiserver's 256 KiB
	// limit; the previous ShadowEndpointSlice is left as it was.
	ReasonAnnotationTooLarge = "DirectConnectionsDataTooLarge"
	// ReasonEndpointNotReflected (Warning, consumer): an endpoint's node is unknown, so the endpoint is left out.
	ReasonEndpointNotReflected = "EndpointNotReflected"
)

// Problem is something to report as a Warning Event on the slice being built (and in the log). Problems never
// stop the build: the affected address takes the path the message names.
type Problem struct {
	// Reason is one of the Reason* constants.
	Reason string
	// Message says which cluster, address and field, and why.
	Message string
}

// UsesDirectConnections reports whether a Service's annotations opt it in (the exact string "true").
func UsesDirectConnections(annotations map[string]string) bool {
	return annotations[UseDirectConnectionsAnnotation] == "true"
}
