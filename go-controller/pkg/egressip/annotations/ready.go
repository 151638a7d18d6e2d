package annotations

import (
	"encoding/json"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// FormatEgressIPsReady renders ips as the EgressIPsReady value: a JSON list of
// canonical address strings, sorted (IPv4 first), without duplicates; "[]" when empty.
func FormatEgressIPsReady(ips map[netip.Addr]bool) string {
	list := make([]netip.Addr, 0, len(ips))
	for ip, ok := range ips {
		if ok {
			list = append(list, ip.Unmap())
		}
	}
	slices.SortFunc(list, netip.Addr.Compare)
	list = slices.Compact(list)
	out := make([]string, len(list))
	for i, ip := range list {
		out[i] = ip.String()
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// ParseEgressIPsReady reads EgressIPsReady: the set of egress IPs the node reports
// as fully programmed. Absent: an empty set, nil. A value that is not a JSON list
// of IP addresses is an error naming the annotation (and nothing is ready).
// Addresses are compared parsed, so "fd00:0::1" and "fd00::1" are the same IP.
func ParseEgressIPsReady(node *corev1.Node) (map[netip.Addr]bool, error) {
	return ParseIPList(node, EgressIPsReady)
}
