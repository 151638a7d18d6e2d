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
	"k8s.io/utils/ptr"

	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
)

// ErrAnnotationsTooLarge is wrapped by BuildShadow when the shadow's annotations (the data document included)
// would exceed the apiserver's limit (256 KiB for all annotations of an object).
var ErrAnnotationsTooLarge = errors.New("annotations too large")

// ShadowInput is the consumer-side snapshot for reflecting one EndpointSlice to one provider.
type ShadowInput struct {
	// ConsumerClusterID is this (consumer) cluster's ID; written in OriginClusterIDLabel and as each endpoint's
	// nodeName.
	ConsumerClusterID string
	// Target is the cluster ID of provider P the shadow is written to.
	Target string
	// Service is the slice's Service, or nil when it does not exist (then nothing is listed).
	Service *corev1.Service
	// Slice is the consumer's EndpointSlice.
	Slice *discoveryv1.EndpointSlice
	// NodeClusters maps every Node's name to the provider cluster it stands for, "" for the consumer's own
	// (NodeClusters).
	NodeClusters map[string]string
	// Peers are the consumer's Configurations by remote cluster ID (Peers); Connections are not used here.
	Peers map[string]Peer
}

// BuildShadow returns the ShadowEndpointSlice that Liqo's virtual kubelet writes to provider in.Target for the
// consumer's EndpointSlice: same namespace and name; the slice's labels plus endpointslice.kubernetes.io/
// managed-by=endpointslice.reflection.liqo.io, offloading.liqo.io/origin=<consumer> and
// offloading.liqo.io/destination=<target>; the slice's annotations; its ports and address type; and its endpoints
// except those on the target's own virtual nodes (the target's EndpointSlice controller serves its pods), each
// with its addresses untranslated, its Ready condition, hostname, zone and hints, nodeName the consumer's cluster
// ID and a targetRef of kind Remote<Kind>. An endpoint on an unknown Node is left out (a Problem says so), as
// Liqo does.
//
// When the Service opts in, the data annotation lists, per other provider C, the addresses of the endpoints on
// C's virtual nodes (Data); realIPs carries, beyond Liqo, the pod's IP in C when the consumer sees C under a
// remapped CIDR. An address whose real IP cannot be computed is listed without one and reported as a Problem.
// The returned error wraps ErrAnnotationsTooLarge when the annotations would exceed the apiserver's limit: the
// caller must then leave the previous shadow as it was.
func BuildShadow(in ShadowInput) (*offv1beta1.ShadowEndpointSlice, []Problem, error) {
	b := shadowBuilder{in: in, optIn: in.Service != nil && UsesDirectConnections(in.Service.Annotations),
		data: Data{ClusterAddresses: map[string][]string{}, RealIPs: map[string]string{}}}
	var endpoints []discoveryv1.Endpoint
	for _, ep := range in.Slice.Endpoints {
		if out, ok := b.endpoint(ep); ok {
			endpoints = append(endpoints, out)
		}
	}

	labels := maps.Clone(in.Slice.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[discoveryv1.LabelManagedBy] = ReflectionManagedBy
	labels[OriginClusterIDLabel] = in.ConsumerClusterID
	labels[DestinationClusterIDLabel] = in.Target
	annotations := maps.Clone(in.Slice.Annotations)
	delete(annotations, DataAnnotation)
	if len(b.data.ClusterAddresses) > 0 {
		if len(b.data.RealIPs) == 0 {
			b.data.RealIPs = nil
		}
		doc, err := b.data.Encode()
		if err != nil {
			return nil, b.problems, fmt.Errorf("EndpointSlice %s/%s: %w", in.Slice.Namespace, in.Slice.Name, err)
		}
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[DataAnnotation] = doc
	}
	if len(annotations) == 0 {
		annotations = nil
	}
	if err := apivalidation.ValidateAnnotationsSize(annotations); err != nil {
		return nil, b.problems, fmt.Errorf("%w: ShadowEndpointSlice %s/%s for cluster %s listing %d addresses: %w",
			ErrAnnotationsTooLarge, in.Slice.Namespace, in.Slice.Name, in.Target, b.listed, err)
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
	listed   int
	problems []Problem
}

// endpoint returns the reflected endpoint, or false when it is not reflected.
func (b *shadowBuilder) endpoint(ep discoveryv1.Endpoint) (discoveryv1.Endpoint, bool) {
	cluster := ""
	if ep.NodeName != nil {
		c, known := b.in.NodeClusters[*ep.NodeName]
		if !known {
			b.problem(ReasonEndpointNotReflected, fmt.Sprintf(
				"endpoint %v on Node %s, which is unknown, not reflected to cluster %s", ep.Addresses, *ep.NodeName, b.in.Target))
			return discoveryv1.Endpoint{}, false
		}
		if c == b.in.Target {
			return discoveryv1.Endpoint{}, false // the target's own pod: its EndpointSlice controller serves it
		}
		cluster = c
	}
	src := ep.DeepCopy()
	out := discoveryv1.Endpoint{
		Addresses:  src.Addresses,
		Conditions: discoveryv1.EndpointConditions{Ready: src.Conditions.Ready},
		Hostname:   src.Hostname,
		TargetRef:  src.TargetRef,
		NodeName:   ptr.To(b.in.ConsumerClusterID),
		Zone:       src.Zone,
		Hints:      src.Hints,
	}
	if out.TargetRef != nil {
		out.TargetRef.Kind = RemoteKindPrefix + out.TargetRef.Kind
	}
	if cluster != "" && b.optIn && b.in.Slice.AddressType != discoveryv1.AddressTypeFQDN {
		for _, a := range out.Addresses {
			b.list(cluster, a)
		}
	}
	return out, true
}

// list adds the address of a pod on another provider to the data document, with its real IP when the consumer
// sees it under a remapped CIDR.
func (b *shadowBuilder) list(cluster, addr string) {
	b.data.ClusterAddresses[cluster] = append(b.data.ClusterAddresses[cluster], addr)
	b.listed++
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return // the apiserver validates slice addresses; listed as it is, like Liqo does
	}
	p, ok := b.in.Peers[cluster]
	var realIP netip.Addr
	switch {
	case !ok || !p.HasConfiguration:
		err = fmt.Errorf("the consumer has no Configuration for cluster %s", cluster)
	case p.MapErr != nil:
		err = p.MapErr
	case !p.Map.ContainsView(ip):
		err = fmt.Errorf("%s is in no status.remote.cidr.pod %v of Configuration %s", ip, p.Map.View, p.Config)
	default:
		realIP, err = p.Map.ViewToReal(ip)
	}
	if err != nil {
		b.problem(ReasonRemapFailed, fmt.Sprintf(
			"address %s on cluster %s listed for direct connections from cluster %s without its real IP: %v",
			addr, cluster, b.in.Target, err))
		return
	}
	if realIP != ip.Unmap() {
		b.data.RealIPs[addr] = realIP.String()
	}
}

func (b *shadowBuilder) problem(reason, msg string) {
	for _, p := range b.problems {
		if p.Reason == reason && p.Message == msg {
			return
		}
	}
	b.problems = append(b.problems, Problem{Reason: reason, Message: msg})
}
