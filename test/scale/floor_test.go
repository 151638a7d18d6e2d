package scale

import (
	"slices"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// TestMovesBetween: only rows present before and after, whose next hops or
// gateway router changed, are moves; next hops compare as sets.
func TestMovesBetween(t *testing.T) {
	policy := func(pod string) nbstate.Key {
		return nbstate.Key{Router: nbstate.ClusterRouter, IDs: nbstate.IDs{OwnerType: nbstate.OwnerEgressIP, Name: "e",
			Rule: nbstate.RuleReroute, Family: nbstate.FamilyIPv4, Pod: pod}}
	}
	snat := func(pod, node string) nbstate.Key {
		return nbstate.Key{Router: nbstate.GatewayRouter(node), IDs: nbstate.IDs{OwnerType: nbstate.OwnerEgressIP, Name: "e",
			Rule: nbstate.RuleSNAT, Family: nbstate.FamilyIPv4, Pod: pod, EgressIP: "172.18.0.33"}}
	}
	hops := func(h ...string) *nbdb.LogicalRouterPolicy { return &nbdb.LogicalRouterPolicy{Nexthops: h} }
	before, after := nbstate.NewCurrent(), nbstate.NewCurrent()
	before.Rows.Policies[policy("ns/moved")] = hops("100.64.0.2", "100.64.0.3")
	after.Rows.Policies[policy("ns/moved")] = hops("100.64.0.4", "100.64.0.3")
	before.Rows.Policies[policy("ns/same")] = hops("100.64.0.2", "100.64.0.3")
	after.Rows.Policies[policy("ns/same")] = hops("100.64.0.3", "100.64.0.2") // same set, other order
	after.Rows.Policies[policy("ns/new")] = hops("100.64.0.4")                // added: not a move
	before.Rows.NATs[snat("ns/moved", "node1")] = &nbdb.NAT{}
	after.Rows.NATs[snat("ns/moved", "node4")] = &nbdb.NAT{}
	before.Rows.NATs[snat("ns/same", "node2")] = &nbdb.NAT{}
	after.Rows.NATs[snat("ns/same", "node2")] = &nbdb.NAT{}
	before.Rows.NATs[snat("ns/gone", "node1")] = &nbdb.NAT{} // removed: not a move

	m := movesBetween(before, after)
	if len(m.nexthops) != 1 || !slices.Equal(m.nexthops[policy("ns/moved").IDs.String()], []string{"100.64.0.4", "100.64.0.3"}) {
		t.Errorf("next hops moved: %v; want only ns/moved's", m.nexthops)
	}
	if len(m.routers) != 1 || m.routers[snat("ns/moved", "").IDs.String()] != "GR_node4" {
		t.Errorf("SNAT moves: %v; want only ns/moved's, to GR_node4", m.routers)
	}
}
