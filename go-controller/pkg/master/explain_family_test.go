package master

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// With the default --cluster-subnets (IPv4 only) explain computes no IPv6 rows, so on a dual-stack cluster every
// IPv6 row of the EgressIP shows as extra. The report then says why, and which flags to pass.
func TestExplainMissingFamilyNote(t *testing.T) {
	rows := func(fams ...string) *nbstate.Current {
		st := nbstate.NewState()
		for i, f := range fams {
			ids := nbstate.IDs{OwnerType: nbstate.OwnerEgressIP, Name: "eip", Rule: "reroute", Family: f, Pod: "ns/p" + string(rune('a'+i))}
			st.Policies[nbstate.Key{Router: nbstate.ClusterRouter, IDs: ids}] = &nbdb.LogicalRouterPolicy{}
		}
		other := nbstate.IDs{OwnerType: nbstate.OwnerEgressIP, Name: "other", Rule: "snat", Family: nbstate.FamilyIPv6}
		st.NATs[nbstate.Key{Router: "GR_node1", IDs: other}] = &nbdb.NAT{}
		return &nbstate.Current{Rows: st}
	}
	v4 := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	dual := append(v4, netip.MustParsePrefix("fd00:10:244::/48"))
	for _, tc := range []struct {
		name string
		in   ExplainInput
		want string // "" = no note
	}{
		{"dual rows, IPv4 subnets", ExplainInput{ClusterSubnets: v4, NB: rows("ip4", "ip6", "ip6")}, "(2 ip6)"},
		{"dual rows, dual subnets", ExplainInput{ClusterSubnets: dual, NB: rows("ip4", "ip6")}, ""},
		{"IPv4 rows only", ExplainInput{ClusterSubnets: v4, NB: rows("ip4")}, ""},
		{"another EgressIP's IPv6 rows do not count", ExplainInput{ClusterSubnets: v4, NB: rows()}, ""},
		{"zone NBs", ExplainInput{ClusterSubnets: v4, ZoneNB: map[string]*nbstate.Current{"node1": rows("ip6"), "node2": rows("ip6")}}, "(2 ip6)"},
		{"no NB read", ExplainInput{ClusterSubnets: v4}, ""},
	} {
		got := missingFamilyNote(tc.in, "eip")
		if tc.want == "" && got != "" || tc.want != "" && (!strings.Contains(got, tc.want) || !strings.Contains(got, "--cluster-subnets") || !strings.Contains(got, "10.244.0.0/16")) {
			t.Errorf("%s: note %q, want one containing %q", tc.name, got, tc.want)
		}
	}
}
