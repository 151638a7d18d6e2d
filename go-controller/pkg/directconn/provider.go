package directconn

import (
	"errors"
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
	// Origin is the state of the shadow's origin cluster from its ForeignCluster; nil when there is none (the
	// endpoints' readiness is then left as the shadow says, and every address is mapped).
	Origin *OriginState
	// DenyDirectConnections drops the endpoints listed in the data instead of remapping them (Liqo's
	// --deny-direct-connections).
	DenyDirectConnections bool
}

// ErrNoOrigin is wrapped by BuildEndpointSlice when the shadow has no offloading.liqo.io/origin label: without
// the consumer's identity the addresses cannot be mapped, and Liqo's provider refuses such shadows too.
var ErrNoOrigin = errors.New("no " + OriginClusterIDLabel + " label")

// BuildEndpointSlice returns the EndpointSlice Liqo's ShadowEndpointSlice controller makes of a shadow: same
// namespace and name, owned by the shadow (controller reference), its labels plus liqo.io/managed-by=
// shadowendpointslice, its annotations minus the data annotation, its ports and address type, and its endpoints
// with each address mapped:
//
//   - an address listed in the data for cluster C (C's pod): the direct address, i.e. the pod's real IP (realIPs,
//     else the address itself) in a spec.remote.cidr.pod entry of this provider's Configuration for C, carried to
//     the status entry at the same position with its host bits. An address in no spec entry (the consumer sees C
//     under a remapped CIDR, as with overlapping pod CIDRs) gets the host bits under C's only status pod CIDR; with
//     several, it cannot be placed. Beyond Liqo: the direct address is used only while a Connection to C is
//     Connected; otherwise, and whenever it cannot be computed, the address is mapped as an unlisted one (through
//     the consumer) and a Problem says why. With DenyDirectConnections the endpoint is dropped instead.
//   - any other address: mapped with this provider's Configuration for the origin cluster: the pod CIDR entry
//     containing it, else the external CIDR entry containing it, carried to the status entry at the same position;
//     in neither, unchanged. A missing or malformed Configuration leaves the address unchanged, with a Problem.
//
// When the origin's ForeignCluster exists, its networking module disabled means no mapping at all, and the Ready
// condition of every endpoint that is not explicitly not ready becomes the ForeignCluster's readiness (network
// Established or module disabled, API server Established or None).
//
// Problems never fail the slice (Liqo fails the whole slice on any mapping error); the returned error wraps
// ErrNoOrigin when the shadow has no origin label. The result is in the form the apiserver stores (see asStored),
// so that it compares equal to the stored EndpointSlice when nothing changed.
func BuildEndpointSlice(in SliceInput) (*discoveryv1.EndpointSlice, []Problem, error) {
	s := in.Shadow
	origin := s.Labels[OriginClusterIDLabel]
	if origin == "" {
		return nil, nil, fmt.Errorf("ShadowEndpointSlice %s/%s: %w", s.Namespace, s.Name, ErrNoOrigin)
	}
	b := sliceBuilder{in: in, origin: origin, groups: map[string]int{}}
	var data ParsedData
	if raw, ok := s.Annotations[DataAnnotation]; ok {
		var problems []Problem
		data, problems = ParseData(raw)
		for _, p := range problems {
			b.add(p.Reason, p.Message, "")
		}
	}
	mapping := in.Origin == nil || in.Origin.NetworkingEnabled

	endpoints := make([]discoveryv1.Endpoint, 0, len(s.Spec.Template.Endpoints))
	for _, ep := range s.Spec.Template.Endpoints {
		out := *ep.DeepCopy()
		if b.listed(out, data) && in.DenyDirectConnections {
			continue
		}
		for i, a := range out.Addresses {
			ip, err := netip.ParseAddr(a)
			if err != nil || !mapping {
				continue // FQDN slices; the apiserver validates IP addresses
			}
			ip = ip.Unmap()
			if c, listed := data.Cluster[ip]; listed {
				if d, ok := b.direct(c, ip, data.Real); ok {
					out.Addresses[i] = d.String()
					continue
				}
			}
			out.Addresses[i] = b.viaOrigin(ip).String()
		}
		if in.Origin != nil && (out.Conditions.Ready == nil || *out.Conditions.Ready) {
			out.Conditions.Ready = ptr.To(in.Origin.Ready)
		}
		endpoints = append(endpoints, out)
	}
	var ports []discoveryv1.EndpointPort
	for _, p := range s.Spec.Template.Ports {
		ports = append(ports, *p.DeepCopy())
	}
	labels := maps.Clone(s.Labels)
	labels[ShadowManagedByLabel] = ShadowManagedBy
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
	return out, b.problems(), nil
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

// sliceBuilder maps addresses and gathers Problems grouped by (reason, cause), listing the addresses each cause
// affects.
type sliceBuilder struct {
	in     SliceInput
	origin string
	order  []Problem
	addrs  [][]string
	groups map[string]int
}

// listed reports whether one of the endpoint's addresses is listed in the data.
func (b *sliceBuilder) listed(ep discoveryv1.Endpoint, data ParsedData) bool {
	for _, a := range ep.Addresses {
		if ip, err := netip.ParseAddr(a); err == nil {
			if _, ok := data.Cluster[ip.Unmap()]; ok {
				return true
			}
		}
	}
	return false
}

// direct returns the direct address of listed address ip of cluster c, or false (with a Problem) when it is not
// available or cannot be computed.
func (b *sliceBuilder) direct(c string, ip netip.Addr, reals map[netip.Addr]netip.Addr) (netip.Addr, bool) {
	field := fmt.Sprintf("%s[%q]", fieldClusterAddresses, c)
	fallback := fmt.Sprintf("mapped through consumer cluster %s instead", b.origin)
	if c == b.in.LocalClusterID {
		b.add(ReasonInvalidData, fmt.Sprintf("%s names this cluster: %s", field, fallback), ip.String())
		return netip.Addr{}, false
	}
	p := b.in.Peers[c]
	switch {
	case !p.HasConfiguration:
		b.add(ReasonDirectConnectionUnavailable,
			fmt.Sprintf("no Configuration for cluster %s (%s): %s", c, field, fallback), ip.String())
		return netip.Addr{}, false
	case !p.HasConnection:
		b.add(ReasonDirectConnectionUnavailable,
			fmt.Sprintf("no Connection to cluster %s (%s): %s", c, field, fallback), ip.String())
		return netip.Addr{}, false
	case p.Connection != netv1beta1.Connected:
		b.add(ReasonDirectConnectionUnavailable, fmt.Sprintf("connection to cluster %s is down (status %q) (%s): %s",
			c, p.Connection, field, fallback), ip.String())
		return netip.Addr{}, false
	case p.MapErr != nil:
		b.add(ReasonRemapFailed, fmt.Sprintf("cluster %s (%s): %v: %s", c, field, p.MapErr, fallback), ip.String())
		return netip.Addr{}, false
	}
	var (
		d   netip.Addr
		err error
	)
	realIP, given := reals[ip]
	switch {
	case given && p.Map.ContainsReal(realIP):
		d, err = p.Map.RealToView(realIP)
	case given:
		err = fmt.Errorf("real IP %s (%s[%q]) is in no spec.remote.cidr.pod %v of Configuration %s",
			realIP, fieldRealIPs, ip, p.Map.Real, p.Config)
	case p.Map.ContainsReal(ip):
		d, err = p.Map.RealToView(ip)
	default:
		d, err = p.Map.ViewByHostBits(ip)
		if err != nil {
			err = fmt.Errorf("%w (Configuration %s)", err, p.Config)
		}
	}
	if err != nil {
		b.add(ReasonRemapFailed, fmt.Sprintf("cluster %s (%s): %v: %s", c, field, err, fallback), ip.String())
		return netip.Addr{}, false
	}
	return d, true
}

// viaOrigin maps ip with this provider's Configuration for the origin cluster (pod CIDRs, then external CIDRs);
// unchanged when in neither, or (with a Problem) when the Configuration is missing or unusable.
func (b *sliceBuilder) viaOrigin(ip netip.Addr) netip.Addr {
	p := b.in.Peers[b.origin]
	kept := "address kept as the consumer wrote it"
	if !p.HasConfiguration {
		b.add(ReasonRemapFailed, fmt.Sprintf("no Configuration for origin cluster %s (label %s): %s",
			b.origin, OriginClusterIDLabel, kept), ip.String())
		return ip
	}
	if p.MapErr != nil {
		b.add(ReasonRemapFailed, fmt.Sprintf("origin cluster %s: %v: %s", b.origin, p.MapErr, kept), ip.String())
		return ip
	}
	for _, m := range []CIDRMap{p.Map, p.Ext} {
		if !m.ContainsReal(ip) {
			continue
		}
		d, err := m.RealToView(ip)
		if err != nil {
			b.add(ReasonRemapFailed, fmt.Sprintf("origin cluster %s, Configuration %s: %v: %s",
				b.origin, p.Config, err, kept), ip.String())
			return ip
		}
		return d
	}
	return ip
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
