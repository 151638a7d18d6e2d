// Package assign places the egress IPs of EgressIP objects on nodes. It is pure:
// no client, no clock, no globals. The master feeds it a snapshot (EgressIP spec and
// current status, parsed node facts) and writes back the status it returns.
//
// The rules are those of DESIGN.md section 4:
//   - a node is eligible when it is labelled egress-assignable, Ready, reachable and
//     its egress configuration parses (ConfigErr == nil);
//   - hard constraints: the node's egress network of the IP's family contains the IP;
//     the IP equals no node address; the IP belongs to one EgressIP only; at most one
//     IP of an EgressIP per node; the node's capacity (per family and in total);
//   - a valid status item is never moved; an invalid one (node gone, unlabelled,
//     NotReady, unreachable, network no longer containing the IP, IP left the spec,
//     IP lost to another EgressIP, capacity lowered) is dropped and the IP re-placed;
//   - new placements go to the eligible node with the fewest allocations, ties
//     broken by node name;
//   - the result depends only on the input (EgressIPs are processed oldest first,
//     ties by name; spec order within an EgressIP).
package assign

import (
	"net/netip"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
)

// Reason is the machine-readable cause of a Problem; it is used as the Event reason.
type Reason string

const (
	// NoMatchingNodeFound: no eligible node has an egress network that contains the IP.
	NoMatchingNodeFound Reason = "NoMatchingNodeFound"
	// UnassignedRequest: eligible nodes whose network contains the IP exist, but every
	// one of them is excluded by a constraint (already holds an IP of this EgressIP,
	// or is at capacity).
	UnassignedRequest Reason = "UnassignedRequest"
	// InvalidEgressIP: the spec entry is not an IP address (or carries a zone), or it
	// is the same address as an earlier entry of the same EgressIP written another way.
	InvalidEgressIP Reason = "InvalidEgressIP"
	// EgressIPConflict: the IP equals a node address, or another EgressIP claims it.
	EgressIPConflict Reason = "EgressIPConflict"
	// UnsupportedRequest: the address parses but cannot be an egress IP (unspecified,
	// loopback, multicast, link-local, IPv4-mapped IPv6).
	UnsupportedRequest Reason = "UnsupportedRequest"
)

// Item is one status item: Node holds EgressIP. EgressIP is the address as written
// in spec.egressIPs.
type Item struct {
	Node     string
	EgressIP string
}

// EgressIP is the part of an EgressIP object assignment reads.
type EgressIP struct {
	// Name is the object's name (EgressIP is cluster-scoped).
	Name string
	// Created is metadata.creationTimestamp: older EgressIPs win contested IPs.
	Created time.Time
	// Spec is spec.egressIPs, unparsed, in order.
	Spec []string
	// Status is status.items, as currently stored.
	Status []Item
	// NodeSelector is spec.nodeSelector compiled (nil: every node). Only nodes it
	// matches may hold this EgressIP's IPs.
	NodeSelector labels.Selector
	// NodeSelectorErr: spec.nodeSelector does not compile; no node may hold its IPs.
	NodeSelectorErr error
}

// selects reports whether e's node selector admits n.
func (e *EgressIP) selects(n *Node) bool {
	if e.NodeSelectorErr != nil {
		return false
	}
	return e.NodeSelector == nil || e.NodeSelector.Matches(labels.Set(n.Labels))
}

// Node is what assignment needs to know about a node.
type Node struct {
	Name string
	// Egress is the node's egress network per family and its capacity
	// (annotations.ParseEgressConfig). Ignored when ConfigErr is set.
	Egress annotations.EgressConfig
	// ConfigErr says why the node cannot host egress IPs despite its label
	// (unparsable annotation, missing reroute next hop); nil when it can.
	ConfigErr error
	// Addresses are the node's own addresses (annotations.NodeAddresses); no egress
	// IP may equal one of them, whether or not the node is eligible.
	Addresses []netip.Addr
	// Labelled, Ready and Reachable: the node carries the egress-assignable label,
	// its Ready condition is True, and the health check reaches it.
	Labelled, Ready, Reachable bool
	// Labels are the node's labels (matched against EgressIP node selectors).
	Labels map[string]string
}

// Eligible reports whether the node may host egress IPs at all.
func (n *Node) Eligible() bool {
	return n.Labelled && n.Ready && n.Reachable && n.ConfigErr == nil &&
		(n.Egress.Network.V4.IsValid() || n.Egress.Network.V6.IsValid())
}

// Problem is a request that cannot be met: IP of EgressIP is not assigned because of Reason.
type Problem struct {
	EgressIP string
	// IP is the spec entry as written; Index its position in spec.egressIPs.
	IP    string
	Index int
	// Reason is the upstream Event reason; Cause the finer reason of the status
	// condition.
	Reason  Reason
	Cause   Cause
	Message string
}

// Cause is why one requested IP is not assigned, finer than Reason: it is the
// reason of the IP's status condition.
type Cause string

// Causes, in the order assignment checks them.
const (
	CauseNotAnIP            Cause = "NotAnIP"
	CauseDuplicate          Cause = "DuplicateEntry"
	CauseUnsupported        Cause = "UnsupportedAddress"
	CauseNodeAddress        Cause = "EqualsNodeAddress"
	CauseClaimed            Cause = "ClaimedByOtherEgressIP"
	CauseInvalidSelector    Cause = "InvalidNodeSelector"
	CauseNoMatchingNetwork  Cause = "NoNodeWithMatchingNetwork"
	CauseNodesNotLabelled   Cause = "CandidatesNotLabelled"
	CauseNodesExcluded      Cause = "CandidatesExcludedBySelector"
	CauseNodesConfigInvalid Cause = "CandidatesMisconfigured"
	CauseNodesNotReady      Cause = "CandidatesNotReady"
	CauseNodesUnreachable   Cause = "CandidatesUnreachable"
	CauseNoEligibleNode     Cause = "NoEligibleCandidate"
	CauseCapacity           Cause = "NoCapacity"
)

// NodeCause is why a node is or is not a candidate for one egress IP.
type NodeCause string

// Node causes, in the order they are checked.
const (
	NodeCandidate     NodeCause = "Candidate"
	NodeNotLabelled   NodeCause = "NotLabelled"
	NodeExcluded      NodeCause = "ExcludedBySelector"
	NodeConfigInvalid NodeCause = "Misconfigured"
	NodeNotReady      NodeCause = "NotReady"
	NodeUnreachable   NodeCause = "Unreachable"
	NodeNoNetwork     NodeCause = "NetworkDoesNotContainIP"
	NodeHoldsOther    NodeCause = "HoldsAnotherIPOfThisEgressIP"
	NodeAtCapacity    NodeCause = "AtCapacity"
	NodeHolder        NodeCause = "Holder"
)

// Why says whether node n could hold addr for e ignoring the allocations of
// other IPs (NodeCandidate), or the first reason it cannot.
func Why(e *EgressIP, n *Node, addr netip.Addr) NodeCause {
	switch {
	case !n.Labelled:
		return NodeNotLabelled
	case !e.selects(n):
		return NodeExcluded
	case n.ConfigErr != nil:
		return NodeConfigInvalid
	case !n.Ready:
		return NodeNotReady
	case !n.Reachable:
		return NodeUnreachable
	case !fits(n, addr):
		return NodeNoNetwork
	}
	return NodeCandidate
}

// Result is the outcome of Assign.
type Result struct {
	// Status maps every input EgressIP name to its new status items, in spec order.
	// A nil or empty slice means nothing is assigned.
	Status map[string][]Item
	// Problems lists every spec entry that is not assigned, in processing order
	// (oldest EgressIP first, spec order within one).
	Problems []Problem
}
