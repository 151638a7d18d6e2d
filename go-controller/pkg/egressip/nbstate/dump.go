package nbstate

import (
	"fmt"
	"slices"
	"strings"
)

// Dump renders a State as sorted one-line descriptions, for logs and golden tests:
//
//	policy <router> <priority> <action> "<match>" nexthops=[...] <ids>
//	nat <router> snat <external_ip> <- <logical_ip> <ids>
//	address-set <name> [<addresses>] <ids>
func Dump(s State) []string {
	var out []string
	for k, p := range s.Policies {
		nh := slices.Clone(p.Nexthops)
		slices.Sort(nh)
		line := fmt.Sprintf("policy %s %d %s %q", k.Router, p.Priority, p.Action, p.Match)
		if len(nh) > 0 {
			line += " nexthops=[" + strings.Join(nh, " ") + "]"
		}
		out = append(out, line+" "+k.IDs.String())
	}
	for k, n := range s.NATs {
		out = append(out, fmt.Sprintf("nat %s %s %s <- %s %s", k.Router, n.Type, n.ExternalIP, n.LogicalIP, k.IDs))
	}
	for k, a := range s.AddressSets {
		addrs := slices.Clone(a.Addresses)
		slices.Sort(addrs)
		out = append(out, fmt.Sprintf("address-set %s [%s] %s", a.Name, strings.Join(addrs, " "), k.IDs))
	}
	slices.Sort(out)
	return out
}
