// Package hostegress computes, as a pure function, the host state a node needs in
// local gateway mode to send served pods' traffic out with their egress IP: the
// egress IP addresses, the SNAT rules, and the policy routing for egress IPs that
// live on an interface other than the default route's. No clients, no kernel, no clock.
package hostegress

import (
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

const (
	// TableBase + the egress interface's index is the routing table that holds a
	// copy of that interface's main-table routes.
	TableBase = 7000
	// RulePriority is the priority of our "from <podIP> lookup <table>" ip rules
	// (before the main table's 32766).
	RulePriority = 6000
)

// Address is an egress IP to hold as a host address (/32 or /128).
type Address struct {
	IP        netip.Addr
	LinkIndex int
	Link      string
	// EgressIP is the name of the EgressIP object the IP belongs to.
	EgressIP string
}

// SNAT is one rule: traffic from PodIP leaving through Link gets source EgressIPAddr.
type SNAT struct {
	PodIP        netip.Addr
	EgressIPAddr netip.Addr
	Link         string
	// EgressIP is the name of the EgressIP object.
	EgressIP string
}

// Rule is an ip rule "from PodIP/32 lookup Table priority RulePriority".
type Rule struct {
	PodIP netip.Addr
	Table int
}

// Route is a route of one of our tables (a copy of a main-table route).
type Route struct {
	Table int
	hostinfo.Route
}

// State is the complete desired host state. Every list is sorted.
type State struct {
	Addresses []Address
	SNAT      []SNAT
	Rules     []Rule
	Routes    []Route
	// Owners are, per pod IP of SNAT, the pod object its rules are for
	// (selection.ClaimOf, without IPs): of two released rule sets for one pod IP,
	// Merge keeps the one of the pod object that owns the IP now. Not programmed.
	Owners map[netip.Addr]selection.IPClaim
}

// Reasons of Problems: the reasons of the Warning Events the node daemon sends on
// the EgressIP (the master sends Events of the same names about spec.egressIPs;
// these are about a status item naming this node).
const (
	// ReasonInvalidEgressIP: the status item's egressIP is not an IP address.
	ReasonInvalidEgressIP = "InvalidEgressIP"
	// ReasonEgressIPConflict: another EgressIP also assigns the IP to this node, or
	// the host already has the address (not added by us).
	ReasonEgressIPConflict = "EgressIPConflict"
	// ReasonEgressIPNotHostable: no interface of the node has a subnet containing the IP.
	ReasonEgressIPNotHostable = "EgressIPNotHostable"
)

// Problem is an egress IP assigned to this node that cannot be (fully) served.
type Problem struct {
	EgressIP string // EgressIP object name
	IP       string // the status item's egressIP, as written
	// Reason is one of the Reason constants, or selection.ReasonInvalidSelector
	// (logged only: the master sends that Event).
	Reason  string
	Message string
}

// Input is everything Compute looks at.
type Input struct {
	NodeName   string
	EgressIPs  []*egressipv1.EgressIP
	Namespaces map[string]*corev1.Namespace
	Pods       []*corev1.Pod
	Host       hostinfo.Snapshot
}

// Compute returns the desired host state for every status item that names
// in.NodeName, and the problems found. The pods served follow package selection.
// An egress IP goes on the interface whose (non-host) subnet contains it,
// preferring the default route's interface, then the lowest index. When that
// interface is not the default route's for the family, each served pod IP gets an
// ip rule into table TableBase+ifindex, which holds copies of the interface's
// main-table routes.
func Compute(in Input) (State, []Problem) {
	var st State
	var problems []Problem
	served := selection.ServedPods(in.EgressIPs, in.Namespaces, in.Pods)
	foreign := foreignAddrs(in.Host)
	eips := append([]*egressipv1.EgressIP(nil), in.EgressIPs...)
	sort.Slice(eips, func(i, j int) bool { return eips[i].Name < eips[j].Name })

	owner := ipOwners(served.Served)
	claimedIP := map[netip.Addr]string{} // egress IP -> EgressIP name
	snatKey := map[netip.Addr]bool{}     // pod IP already has a rule
	tables := map[int]bool{}             // link index -> routes needed
	ruleSeen := map[netip.Addr]bool{}

	for _, eip := range eips {
		for _, item := range eip.Status.Items {
			if item.Node != in.NodeName {
				continue
			}
			prob := func(reason, format string, a ...any) {
				problems = append(problems, Problem{EgressIP: eip.Name, IP: item.EgressIP, Reason: reason,
					Message: fmt.Sprintf("EgressIP %s: status.items egressIP %q on node %s: %s",
						eip.Name, item.EgressIP, in.NodeName, fmt.Sprintf(format, a...))})
			}
			ip, err := netip.ParseAddr(item.EgressIP)
			if err != nil {
				prob(ReasonInvalidEgressIP, "not an IP address")
				continue
			}
			ip = ip.Unmap()
			if other, dup := claimedIP[ip]; dup {
				prob(ReasonEgressIPConflict, "also assigned here by EgressIP %s; ignored", other)
				continue
			}
			link, ok := egressLink(in.Host, ip)
			if !ok {
				prob(ReasonEgressIPNotHostable, "no interface of the node has a subnet containing it")
				continue
			}
			claimedIP[ip] = eip.Name
			if l, has := foreign[ip]; has {
				prob(ReasonEgressIPConflict, "the host already has this address on %s (not added by us); it is left alone", l)
			} else {
				st.Addresses = append(st.Addresses, Address{IP: ip, LinkIndex: link.Index, Link: link.Name, EgressIP: eip.Name})
			}
			defIdx, hasDef := in.Host.DefaultRouteLink(ip.Is4())
			policy := !hasDef || defIdx != link.Index
			if err := served.Errors[eip.Name]; err != nil {
				prob(selection.ReasonInvalidSelector, "%v", err)
				continue
			}
			for _, pod := range served.Served[eip.Name] {
				for _, podIP := range selection.PodIPs(pod) {
					if podIP.Is4() != ip.Is4() || snatKey[podIP] || owner[podIP] != pod {
						continue // another pod object owns this IP now (selection.OwnsBefore)
					}
					snatKey[podIP] = true
					st.SNAT = append(st.SNAT, SNAT{PodIP: podIP, EgressIPAddr: ip, Link: link.Name, EgressIP: eip.Name})
					if st.Owners == nil {
						st.Owners = map[netip.Addr]selection.IPClaim{}
					}
					claim := selection.ClaimOf(pod)
					claim.IPs = nil
					st.Owners[podIP] = claim
					if policy && !ruleSeen[podIP] {
						ruleSeen[podIP] = true
						tables[link.Index] = true
						st.Rules = append(st.Rules, Rule{PodIP: podIP, Table: TableBase + link.Index})
					}
				}
			}
		}
	}
	for _, r := range in.Host.Routes {
		if tables[r.LinkIndex] {
			st.Routes = append(st.Routes, Route{Table: TableBase + r.LinkIndex, Route: r})
		}
	}
	sortState(&st)
	return st, problems
}

// ipOwners maps every served pod IP to the pod object owning it
// (selection.Owners), over the pods every EgressIP serves.
func ipOwners(served map[string][]*corev1.Pod) map[netip.Addr]*corev1.Pod {
	var pods []*corev1.Pod
	var claims []selection.IPClaim
	for _, list := range served {
		for _, pod := range list {
			pods = append(pods, pod)
			claims = append(claims, selection.ClaimOf(pod))
		}
	}
	out := map[netip.Addr]*corev1.Pod{}
	for ip, i := range selection.Owners(claims) {
		out[ip] = pods[i]
	}
	return out
}

// egressLink finds the link whose non-host subnet (not ours) contains ip.
func egressLink(snap hostinfo.Snapshot, ip netip.Addr) (hostinfo.Link, bool) {
	var candidates []hostinfo.Link
	for _, l := range snap.Links {
		if l.Loopback {
			continue
		}
		for _, a := range l.Addrs {
			if a.Ours || a.Prefix.IsSingleIP() || a.Prefix.Addr().Is4() != ip.Is4() {
				continue
			}
			if a.Prefix.Masked().Contains(ip) {
				candidates = append(candidates, l)
				break
			}
		}
	}
	if len(candidates) == 0 {
		return hostinfo.Link{}, false
	}
	if def, ok := snap.DefaultRouteLink(ip.Is4()); ok {
		for _, l := range candidates {
			if l.Index == def {
				return l, true
			}
		}
	}
	return candidates[0], true // Links are sorted by index.
}

// foreignAddrs maps every address not added by us to its link's name.
func foreignAddrs(snap hostinfo.Snapshot) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for _, l := range snap.Links {
		for _, a := range l.Addrs {
			if !a.Ours {
				out[a.Prefix.Addr()] = l.Name
			}
		}
	}
	return out
}

func sortState(st *State) {
	sort.Slice(st.Addresses, func(i, j int) bool { return st.Addresses[i].IP.Less(st.Addresses[j].IP) })
	sort.Slice(st.SNAT, func(i, j int) bool {
		a, b := st.SNAT[i], st.SNAT[j]
		if a.PodIP != b.PodIP {
			return a.PodIP.Less(b.PodIP)
		}
		return a.EgressIPAddr.Less(b.EgressIPAddr)
	})
	sort.Slice(st.Rules, func(i, j int) bool { return st.Rules[i].PodIP.Less(st.Rules[j].PodIP) })
	sort.SliceStable(st.Routes, func(i, j int) bool {
		a, b := st.Routes[i], st.Routes[j]
		if a.Table != b.Table {
			return a.Table < b.Table
		}
		// Link-scope routes first: a gateway route needs its on-link route in place.
		if a.Scope != b.Scope {
			return a.Scope > b.Scope
		}
		if a.Dst != b.Dst {
			if c := a.Dst.Addr().Compare(b.Dst.Addr()); c != 0 {
				return c < 0
			}
			return a.Dst.Bits() < b.Dst.Bits()
		}
		return a.Metric < b.Metric
	})
}

// Empty reports whether the state programs nothing.
func (s State) Empty() bool {
	return len(s.Addresses) == 0 && len(s.SNAT) == 0 && len(s.Rules) == 0 && len(s.Routes) == 0
}
