package directconn

// Names and keys. Those under liqo.io are Liqo's, so that the controllers can run beside a Liqo installation.
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

	// OriginClusterIDLabel on a ShadowEndpointSlice names the consumer cluster that wrote it; the consumer
	// controller owns (updates and deletes) only shadows carrying its own cluster ID.
	OriginClusterIDLabel = "directconn.ovn-egressip.io/origin-cluster-id"
	// ManagedBy is the endpointslice.kubernetes.io/managed-by value of the slices we write, so that the
	// provider's own EndpointSlice controller leaves them alone.
	ManagedBy = "directconn.ovn-egressip.io"
)

// Event reasons.
const (
	// ReasonDirectConnectionUnavailable (Warning, provider): an address keeps its indirect value because there is
	// no Configuration for its cluster, no Connection to it, or the Connection is not Connected.
	ReasonDirectConnectionUnavailable = "DirectConnectionUnavailable"
	// ReasonRemapFailed (Warning, both sides): an address could not be translated (outside every known CIDR,
	// prefix-length or family mismatch, malformed Configuration); it keeps its indirect value.
	ReasonRemapFailed = "DirectConnectionRemapFailed"
	// ReasonInvalidData (Warning, provider): the data annotation could not be used; every address stays indirect.
	ReasonInvalidData = "InvalidDirectConnectionsData"
	// ReasonAnnotationTooLarge (Warning, consumer): the shadow's annotations would exceed the apiserver's 256 KiB
	// limit; the previous ShadowEndpointSlice is left as it was.
	ReasonAnnotationTooLarge = "DirectConnectionsDataTooLarge"
)

// Problem is something to report as a Warning Event on the slice being built (and in the log). Problems never
// stop the build: the affected address keeps its indirect value.
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
