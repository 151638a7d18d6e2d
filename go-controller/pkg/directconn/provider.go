package directconn

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
)

// SliceInput is the provider-side snapshot for turning one ShadowEndpointSlice into an EndpointSlice.
type SliceInput struct {
	// LocalClusterID is this provider's cluster ID; data entries naming it are ignored (reported).
	LocalClusterID string
	// Shadow is the ShadowEndpointSlice written by the consumer.
	Shadow *offv1beta1.ShadowEndpointSlice
	// Peers are this provider's Configurations and Connections by remote cluster ID (Peers).
	Peers map[string]Peer
}

// BuildEndpointSlice returns the EndpointSlice for a ShadowEndpointSlice: same namespace and name, owned by the
// shadow (controller reference), with its labels (endpointslice.kubernetes.io/managed-by=ManagedBy) and annotations
// minus the data annotation, its ports and address type, and its endpoints where each address listed in the data
// annotation is replaced by the direct address when
//
//   - this provider has a Configuration for the pod's cluster C and a Connection to C whose status is Connected, and
//   - the pod's real IP lies in one of the Configuration's spec.remote.cidr.pod entries whose paired status entry
//     has the same family and prefix length: the direct address is that status prefix with the real IP's host bits.
//
// Otherwise the address keeps its indirect value and a Problem says why. Addresses not listed are untouched.
//
// The result is in the form the apiserver stores (see asStored), so that it compares equal to the stored
// EndpointSlice when nothing changed.
func BuildEndpointSlice(in SliceInput) (*discoveryv1.EndpointSlice, []Problem) {
	s := in.Shadow
	b := sliceBuilder{groups: map[string]int{}}
	direct := b.directAddresses(in)

	endpoints := make([]discoveryv1.Endpoint, 0, len(s.Spec.Template.Endpoints))
	for _, ep := range s.Spec.Template.Endpoints {
		out := *ep.DeepCopy()
		for i, a := range out.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				if d, ok := direct[ip.Unmap()]; ok {
					out.Addresses[i] = d.String()
				}
			}
		}
		endpoints = append(endpoints, out)
	}
	var ports []discoveryv1.EndpointPort
	for _, p := range s.Spec.Template.Ports {
		ports = append(ports, *p.DeepCopy())
	}
	labels := maps.Clone(s.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[discoveryv1.LabelManagedBy] = ManagedBy
	annotations := maps.Clone(s.Annotations)
	delete(annotations, DataAnnotation)
	if len(annotations) == 0 {
		annotations = nil
	}
	out := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:            s.Name,
			Namespace:       s.Namespace,
			Labels:          labels,
			Annotations:     annotations,
			OwnerReferences: []metav1.OwnerReference{ShadowOwnerReference(s)},
		},
		AddressType: s.Spec.Template.AddressType,
		Endpoints:   endpoints,
		Ports:       ports,
	}
	asStored(out)
	return out, b.problems()
}

// asStored changes s in place as kube-apiserver (v1.37) changes an EndpointSlice written through
// discovery.k8s.io/v1 before storing it, for the fields a ShadowEndpointSlice's template may leave out or carry:
//
//   - ports[].name nil becomes "" and ports[].protocol nil becomes TCP (the discovery/v1 defaults);
//   - endpoints[].deprecatedTopology is dropped: it is not writable through v1, the apiserver discards it on create
//     and on every update that changes the endpoints.
//
// Without this, a template lacking a port's name or protocol makes every sync send an update (a no-op for the
// apiserver, but a request each time), and one carrying deprecatedTopology an update that the apiserver stores
// with a new generation, whose watch event syncs the slice again: an endless stream of writes.
//
// Not covered: hints.forNodes, which apiservers whose PreferSameTrafficDistribution gate is off (before v1.34 by
// default; locked on since v1.35) drop as well.
func asStored(s *discoveryv1.EndpointSlice) {
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Name == nil {
			p.Name = ptr.To("")
		}
		if p.Protocol == nil {
			p.Protocol = ptr.To(corev1.ProtocolTCP)
		}
	}
	for i := range s.Endpoints {
		s.Endpoints[i].DeprecatedTopology = nil
	}
}

// ShadowOwnerReference is the controller reference from an EndpointSlice to its ShadowEndpointSlice.
func ShadowOwnerReference(s *offv1beta1.ShadowEndpointSlice) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: offv1beta1.SchemeGroupVersion.String(),
		Kind:       "ShadowEndpointSlice",
		Name:       s.Name,
		UID:        s.UID,
		Controller: ptr.To(true),
	}
}

// sliceBuilder gathers Problems grouped by (reason, cause), listing the addresses each cause affects.
type sliceBuilder struct {
	order  []Problem
	addrs  [][]string
	groups map[string]int
}

// directAddresses maps each listed reflected address to its direct address, for the entries that can be remapped.
func (b *sliceBuilder) directAddresses(in SliceInput) map[netip.Addr]netip.Addr {
	raw, ok := in.Shadow.Annotations[DataAnnotation]
	if !ok {
		return nil
	}
	entries, err := DecodeData(raw)
	if err != nil {
		b.add(ReasonInvalidData, err.Error()+"; every address keeps its indirect value", "")
		return nil
	}
	out := map[netip.Addr]netip.Addr{}
	conflicted := map[netip.Addr]bool{}
	for _, e := range entries {
		d, reason, why := directAddress(in, e)
		if why != "" {
			b.add(reason, why, e.ReflectedIP.String())
			continue
		}
		if prev, seen := out[e.ReflectedIP]; (seen && prev != d) || conflicted[e.ReflectedIP] {
			b.add(ReasonInvalidData, "the data lists the address several times with different real IPs",
				e.ReflectedIP.String())
			delete(out, e.ReflectedIP)
			conflicted[e.ReflectedIP] = true
			continue
		}
		out[e.ReflectedIP] = d
	}
	return out
}

// directAddress computes one entry's direct address, or the reason and cause that keep it indirect.
func directAddress(in SliceInput, e ParsedEndpoint) (netip.Addr, string, string) {
	c := e.ClusterID
	if c == in.LocalClusterID {
		return netip.Addr{}, ReasonInvalidData, fmt.Sprintf("the data lists cluster %s, which is this cluster", c)
	}
	p := in.Peers[c]
	switch {
	case !p.HasConfiguration:
		return netip.Addr{}, ReasonDirectConnectionUnavailable,
			fmt.Sprintf("no Configuration for cluster %s: indirect address kept", c)
	case !p.HasConnection:
		return netip.Addr{}, ReasonDirectConnectionUnavailable,
			fmt.Sprintf("no Connection to cluster %s: indirect address kept", c)
	case p.Connection != netv1beta1.Connected:
		return netip.Addr{}, ReasonDirectConnectionUnavailable,
			fmt.Sprintf("connection to cluster %s is down (status %q): indirect address kept", c, p.Connection)
	case p.MapErr != nil:
		return netip.Addr{}, ReasonRemapFailed, fmt.Sprintf("cluster %s: %v: indirect address kept", c, p.MapErr)
	}
	d, err := p.Map.RealToView(e.RealIP)
	if err != nil {
		return netip.Addr{}, ReasonRemapFailed, fmt.Sprintf("cluster %s: %v: indirect address kept", c, err)
	}
	return d, "", ""
}

func (b *sliceBuilder) add(reason, cause, addr string) {
	key := reason + "\x00" + cause
	i, ok := b.groups[key]
	if !ok {
		i = len(b.order)
		b.groups[key] = i
		b.order = append(b.order, Problem{Reason: reason, Message: cause})
		b.addrs = append(b.addrs, nil)
	}
	if addr != "" {
		b.addrs[i] = append(b.addrs[i], addr)
	}
}

// maxListedAddresses bounds how many addresses one Problem message names.
const maxListedAddresses = 5

func (b *sliceBuilder) problems() []Problem {
	out := make([]Problem, 0, len(b.order))
	for i, p := range b.order {
		if a := b.addrs[i]; len(a) > 0 {
			shown := a[:min(len(a), maxListedAddresses)]
			p.Message = fmt.Sprintf("%s (addresses %s", p.Message, strings.Join(shown, ", "))
			if len(a) > len(shown) {
				p.Message += fmt.Sprintf(" and %d more", len(a)-len(shown))
			}
			p.Message += ")"
		}
		out = append(out, p)
	}
	return out
}
