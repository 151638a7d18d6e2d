package annotations

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The release linger as published state (local gateway mode; the interconnect layout in shared gateway mode). A node daemon that no longer
// holds an egress IP keeps its SNAT rules for a while; it says so on its Node, with the time that linger ends, so
// that the master (a restarted one too), explain and the checkers read the same facts instead of keeping clocks of
// their own. The master, in turn, says on each Node which egress IPs OVN reroutes to it; a node keeps the rules of a
// released IP while the master's list still names it, so a reroute written by a master that died before removing it
// never reaches a node that no longer SNATs.
const (
	// EgressIPsLingeringUntil is a JSON object {"<egress IP>": "<RFC 3339 time>"}: for every egress IP of
	// EgressIPsLingering, when its linger ends. Written beside the list by the node daemon (local gateway mode) or,
	// in the interconnect layout in shared gateway mode, by the node's zone controller.
	EgressIPsLingeringUntil = "k8s.ovn.org/egress-ips-lingering-until"
	// EgressIPsRerouted is the JSON list of the egress IPs whose served pods OVN may reroute to this node's
	// management port (local gateway mode): written by the master before a commit that adds such a reroute, and
	// narrowed only after the commit that removes it.
	EgressIPsRerouted = "k8s.ovn.org/egress-ips-rerouted"
)

// ParseLingering reads a node's lingering egress IPs with the end of each linger: the IPs of EgressIPsLingering
// whose end EgressIPsLingeringUntil gives. Both absent: none, nil. An IP listed without a parsable end, or either
// annotation unparsable, is left out and reported in the error (naming the annotation): absent or unparsable
// facts never make a node a next hop.
func ParseLingering(node *corev1.Node) (map[netip.Addr]time.Time, error) {
	out := map[netip.Addr]time.Time{}
	list, err := ParseIPList(node, EgressIPsLingering)
	if err != nil {
		return out, err
	}
	ends := map[string]string{}
	if v, ok := node.Annotations[EgressIPsLingeringUntil]; ok {
		if err := json.Unmarshal([]byte(v), &ends); err != nil {
			return out, fmt.Errorf("annotation %s: not a JSON object of egress IP to time: %w", EgressIPsLingeringUntil, err)
		}
	}
	byIP := map[netip.Addr]string{}
	for k, v := range ends {
		ip, err := netip.ParseAddr(k)
		if err != nil {
			return out, fmt.Errorf("annotation %s: %w", EgressIPsLingeringUntil, err)
		}
		byIP[ip.Unmap()] = v
	}
	var missing []string
	for ip := range list {
		v, ok := byIP[ip]
		if !ok {
			missing = append(missing, ip.String())
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return out, fmt.Errorf("annotation %s: egress IP %s: %w", EgressIPsLingeringUntil, ip, err)
		}
		out[ip] = t
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return out, fmt.Errorf("annotation %s: no end for lingering egress IPs %v (listed in %s)", EgressIPsLingeringUntil, missing, EgressIPsLingering)
	}
	return out, nil
}

// FormatLingering renders lingering egress IPs with their ends: the values of EgressIPsLingering and
// EgressIPsLingeringUntil.
func FormatLingering(until map[netip.Addr]time.Time) (list, ends string) {
	ips := map[netip.Addr]bool{}
	m := map[string]string{}
	for ip, t := range until {
		ips[ip] = true
		m[ip.Unmap().String()] = t.UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(m) // map keys are sorted
	return FormatEgressIPsReady(ips), string(b)
}
