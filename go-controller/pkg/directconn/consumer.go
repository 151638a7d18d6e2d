package directconn

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
)

// ErrAnnotationsTooLarge is wrapped by BuildShadow when the shadow's annotations (the data document included)
// would exceed the apiserver's limit (256 KiB for all annotations of an object).
var ErrAnnotationsTooLarge = errors.New("annotations too large")

// ShadowInput is the consumer-side snapshot for reflecting one EndpointSlice to one provider.
type ShadowInput struct {
	// ConsumerClusterID is this (consumer) cluster's ID; written in OriginClusterIDLabel.
	ConsumerClusterID string
	// Target is the cluster ID of provider P the shadow is written to.
	Target string
	// Service is the slice's Service, or nil when it does not exist (then nothing is listed).
	Service *corev1.Service
	// Slice is the consumer's EndpointSlice.
	Slice *discoveryv1.EndpointSlice
	// NodeClusters maps virtual node names to their provider cluster ID (VirtualNodeClusters).
	NodeClusters map[string]string
	// Peers are the consumer's Configurations by remote cluster ID (Peers); Connections are not used here.
	Peers map[string]Peer
}

// BuildShadow returns the ShadowEndpointSlice to write to provider in.Target: same namespace and name as the
// consumer's slice, its labels (plus endpointslice.kubernetes.io/managed-by=ManagedBy and OriginClusterIDLabel) and
// annotations, and its endpoints (without nodeName, which names a consumer Node) with the addresses as P sees them:
//
//   - pods on P itself: the consumer's address un-remapped with the consumer's Configuration for P (status entry
//     -> spec entry), i.e. the pod's own IP on P; an address outside every remapped CIDR (such as a host-network
//     pod) and every address when the consumer has no Configuration for P pass through unchanged;
//   - every other address (the consumer's pods, other providers' pods): passed through as the consumer sees it.
//     This is the indirect path, through the consumer.
//
// When the Service opts in, the data annotation lists the addresses of pods on other providers (see Data); the
// real IP comes from the consumer's Configuration for C, and an address that cannot be un-remapped is not listed
// (P keeps the indirect address) and is reported as a Problem. The returned error wraps ErrAnnotationsTooLarge when
// the annotations would exceed the apiserver's limit: the caller must then leave the previous shadow as it was.
func BuildShadow(in ShadowInput) (*offv1beta1.ShadowEndpointSlice, []Problem, error) {
	b := shadowBuilder{in: in, optIn: in.Service != nil && UsesDirectConnections(in.Service.Annotations)}
	endpoints := make([]discoveryv1.Endpoint, 0, len(in.Slice.Endpoints))
	for _, ep := range in.Slice.Endpoints {
		endpoints = append(endpoints, b.endpoint(ep))
	}

	labels := maps.Clone(in.Slice.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[discoveryv1.LabelManagedBy] = ManagedBy
	labels[OriginClusterIDLabel] = in.ConsumerClusterID
	annotations := maps.Clone(in.Slice.Annotations)
	delete(annotations, DataAnnotation)
	if len(b.data.Endpoints) > 0 {
		doc, err := b.data.Encode()
		if err != nil {
			return nil, b.problems, fmt.Errorf("EndpointSlice %s/%s: encode %s: %w",
				in.Slice.Namespace, in.Slice.Name, DataAnnotation, err)
		}
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[DataAnnotation] = doc
	}
	if err := apivalidation.ValidateAnnotationsSize(annotations); err != nil {
		return nil, b.problems, fmt.Errorf("%w: ShadowEndpointSlice %s/%s for cluster %s with %d %s entries: %v",
			ErrAnnotationsTooLarge, in.Slice.Namespace, in.Slice.Name, in.Target, len(b.data.Endpoints),
			DataAnnotation, err)
	}

	var ports []discoveryv1.EndpointPort
	for _, p := range in.Slice.Ports {
		ports = append(ports, *p.DeepCopy())
	}
	return &offv1beta1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:        in.Slice.Name,
			Namespace:   in.Slice.Namespace,
			Labels:      labels,
			Annotations: annotations,
		},
		Spec: offv1beta1.ShadowEndpointSliceSpec{Template: offv1beta1.EndpointSliceTemplate{
			Endpoints:   endpoints,
			Ports:       ports,
			AddressType: in.Slice.AddressType,
		}},
	}, b.problems, nil
}

type shadowBuilder struct {
	in       ShadowInput
	optIn    bool
	data     Data
	problems []Problem
}

func (b *shadowBuilder) endpoint(ep discoveryv1.Endpoint) discoveryv1.Endpoint {
	out := *ep.DeepCopy()
	out.NodeName = nil // the consumer's node names mean nothing to the provider
	if b.in.Slice.AddressType == discoveryv1.AddressTypeFQDN {
		return out
	}
	cluster := ""
	if ep.NodeName != nil {
		cluster = b.in.NodeClusters[*ep.NodeName]
	}
	for i, a := range ep.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue // the apiserver validates slice addresses; leave anything else alone
		}
		switch {
		case cluster == "":
			// the consumer's own pod: indirect, pass through
		case cluster == b.in.Target:
			out.Addresses[i] = b.onTarget(ip).String()
		case b.optIn:
			b.list(cluster, ip)
		}
	}
	return out
}

// onTarget translates the address of a pod running on the target provider back to the pod's own IP there.
func (b *shadowBuilder) onTarget(ip netip.Addr) netip.Addr {
	p, ok := b.in.Peers[b.in.Target]
	if !ok || !p.HasConfiguration {
		return ip
	}
	if p.MapErr != nil {
		b.problem(ReasonRemapFailed, fmt.Sprintf("address %s on cluster %s passed through: %v", ip, b.in.Target, p.MapErr))
		return ip
	}
	if !p.Map.ContainsView(ip) {
		return ip
	}
	realIP, err := p.Map.ViewToReal(ip)
	if err != nil {
		b.problem(ReasonRemapFailed, fmt.Sprintf("address %s on cluster %s passed through: %v", ip, b.in.Target, err))
		return ip
	}
	return realIP
}

// list adds the address of a pod on another provider to the data document, when its real IP is known.
func (b *shadowBuilder) list(cluster string, ip netip.Addr) {
	p, ok := b.in.Peers[cluster]
	var (
		realIP netip.Addr
		err    error
	)
	switch {
	case !ok || !p.HasConfiguration:
		err = fmt.Errorf("the consumer has no Configuration for cluster %s", cluster)
	case p.MapErr != nil:
		err = p.MapErr
	default:
		realIP, err = p.Map.ViewToReal(ip)
	}
	if err != nil {
		b.problem(ReasonRemapFailed, fmt.Sprintf(
			"address %s on cluster %s not listed for direct connections from cluster %s: %v",
			ip, cluster, b.in.Target, err))
		return
	}
	b.data.Endpoints = append(b.data.Endpoints, DataEndpoint{
		ClusterID:   cluster,
		RealIP:      realIP.String(),
		ConsumerIP:  ip.String(),
		ReflectedIP: ip.String(),
	})
}

func (b *shadowBuilder) problem(reason, msg string) {
	for _, p := range b.problems {
		if p.Reason == reason && p.Message == msg {
			return
		}
	}
	b.problems = append(b.problems, Problem{Reason: reason, Message: msg})
}
