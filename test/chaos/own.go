package chaos

// A probe's own sources, the rule every probe is held to, inside a window too: a served pod's traffic leaves with
// an address of its own EgressIP, or (non-strict EgressIP, or pod not served) with its own node's egress address
// (cluster.EgressSource: the gateway router's external IP in shared gateway mode, the node IP in local gateway
// mode); never with another EgressIP's address nor another node's (docs/egressip.md; docs/dev/chaos.md, "Foreign
// sources").
//
// "Its own EgressIP" is every EgressIP that selects the pod object in any state of the window the harness knows:
// the converged state before the window, the state after each change the harness made (the harness is the only
// writer of specs and labels, so these are all the states the API held), and the converged state that ends the
// window. Its addresses are every IP of its spec in those states (not only the assigned ones: a released IP may
// linger on its old holder, docs/egressip.md "Connections across a move").

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
)

// Why an address is a pod's own.
const (
	whyOwnNode = "its node's address"
	// whyHolderGR: in the interconnect layout's shared gateway mode, a pod that starts (or starts being served)
	// while its EgressIP's holder already lists the IP leaves, until the holder's zone adds its SNAT row (one sync
	// of that zone), with the holder's gateway router address (docs/interconnect.md, "Readiness and moves across
	// zones"). Counted apart, inside windows only; never allowed outside one.
	whyHolderGR = "its EgressIP's holder's gateway router address (documented, interconnect shared gateway)"
	// whyZoneDown: in the interconnect layout's local gateway mode, a pod whose own zone cannot program (its zone
	// controller killed or cut off from the apiserver, or its zone's NB and SB down) keeps being rerouted to the holder it had, while that
	// holder's zone drops its reroute of the pod to the management port when the pod stops being served by that
	// IP there (the IP edited out of the EgressIP, the pod or namespace relabelled): the pod leaves through the
	// holder's gateway router, with its address, until its own zone is back (docs/interconnect.md, "When a part is
	// down"; an open defect). Counted apart, inside the window of that fault only.
	whyZoneDown = "a gateway router address while its own zone could not program (documented open defect, interconnect local gateway)"
)

// documented reports whether why is one of the documented moments (counted apart, never allowed outside a window).
func documented(why string) bool { return why == whyHolderGR || why == whyZoneDown }

// ownSources are, for each pod (namespace/name), its own sources with why each is (an EgressIP's name,
// whyOwnNode, whyHolderGR).
type ownSources map[string]map[netip.Addr]string

func (o ownSources) allow(pod string, a netip.Addr, why string) {
	if o[pod] == nil {
		o[pod] = map[netip.Addr]string{}
	}
	if _, ok := o[pod][a]; !ok || documented(o[pod][a]) {
		o[pod][a] = why // an EgressIP's address or the node's own wins over the documented moment
	}
}

// add adds every source of other to o.
func (o ownSources) add(other ownSources) {
	for pod, srcs := range other {
		for a, why := range srcs {
			o.allow(pod, a, why)
		}
	}
}

// clone is a copy of o.
func (o ownSources) clone() ownSources {
	out := ownSources{}
	out.add(o)
	return out
}

// judge says whether src is pod's own: "" when it is, whyHolderGR when it is only the documented moment, or a
// description of the foreign source.
func (o ownSources) judge(pod string, src netip.Addr) string {
	why, ok := o[pod][src]
	switch {
	case ok && documented(why):
		return why
	case ok:
		return ""
	}
	return fmt.Sprintf("source %s is not its own (own: %s)", src, o.list(pod))
}

// withoutHolderGR is o without the documented moment's addresses (outside a window nothing allows them).
func (o ownSources) withoutHolderGR() ownSources {
	out := ownSources{}
	for pod, srcs := range o {
		for a, why := range srcs {
			if !documented(why) {
				out.allow(pod, a, why)
			}
		}
	}
	return out
}

func (o ownSources) list(pod string) string {
	var out []string
	for _, a := range slices.SortedFunc(maps.Keys(o[pod]), func(a, b netip.Addr) int { return a.Compare(b) }) {
		out = append(out, fmt.Sprintf("%s (%s)", a, o[pod][a]))
	}
	if len(out) == 0 {
		return "none known"
	}
	return strings.Join(out, ", ")
}

// ownOf computes the own sources of every pod of one read of the API: the spec IPs of each EgressIP that selects
// it; its node's address (nodeSource) when no EgressIP selects it or one that does is not strict; and, with
// holderGR (interconnect layout, shared gateway mode), the gateway router address of each holder (status) of an
// EgressIP that selects it, as whyHolderGR. A node whose address is unknown adds nothing (nothing is then its own).
func ownOf(eips []egressipv1.EgressIP, nss []corev1.Namespace, pods []corev1.Pod,
	nodeSource, holderGR func(node string) (netip.Addr, error)) ownSources {
	nsLabels := map[string]map[string]string{}
	for _, ns := range nss {
		nsLabels[ns.Name] = ns.Labels
	}
	sorted := slices.Clone(eips)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	o := ownSources{}
	for _, p := range pods {
		if p.Spec.HostNetwork {
			continue
		}
		key := p.Namespace + "/" + p.Name
		served, lax := false, false
		for _, e := range sorted {
			// The harness never lets two EgressIPs select one pod: one that selects it serves it.
			if !selects(e.Spec.NamespaceSelector, nsLabels[p.Namespace]) || !selects(e.Spec.PodSelector, p.Labels) {
				continue
			}
			served, lax = true, lax || !e.Spec.Strict
			for _, ip := range e.Spec.EgressIPs {
				if a, err := netip.ParseAddr(ip); err == nil {
					o.allow(key, a, "EgressIP "+e.Name)
				}
			}
			for _, it := range e.Status.Items {
				if holderGR == nil {
					break
				}
				if a, err := holderGR(it.Node); err == nil {
					o.allow(key, a, whyHolderGR)
				}
			}
		}
		if a, err := nodeSource(p.Spec.NodeName); err == nil && (!served || lax) {
			o.allow(key, a, whyOwnNode)
		}
	}
	return o
}
