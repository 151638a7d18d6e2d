package nbstate

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// TestLocalReadinessHandshake: in local gateway mode the reroute of a served pod
// points only at holders that report their IP ready; while none is ready the
// policy now in NB stays as it is; with none in NB, none is written. Each case
// runs Desired, then Diff against the NB state, and applies the plan to that state.
func TestLocalReadinessHandshake(t *testing.T) {
	p1 := Key{Router: ClusterRouter, IDs: IDs{OwnerType: OwnerEgressIP, Name: "eip1", Rule: RuleReroute, Family: FamilyIPv4, Pod: "ns1/p1"}}
	const mgmtA, mgmtB, joinB = "10.244.1.2", "10.244.2.2", "100.64.0.3"
	tests := []struct {
		name          string
		mode          gwmode.Mode
		assigned      []Assignment
		ready         map[string][]string // node -> IPs it reports ready
		absent        []string            // nodes without the annotation
		fallback      []string            // nodes still SNATting 172.18.0.33 by their published linger
		inNB          []string            // next hops of p1's reroute now in NB; nil: no policy
		want          []string            // next hops after the plan; nil: no policy
		rerouteChange string              // the plan's change of p1's reroute ("" none)
	}{
		{name: "(a) moved to node-b, not ready yet: rerouted to the lingering previous holder",
			assigned: []Assignment{assigned("node-b", "172.18.0.33")}, inNB: []string{mgmtA}, fallback: []string{"node-a"},
			want: []string{mgmtA}},
		{name: "(a) moved to node-b, not ready, linger over: the reroute goes",
			assigned: []Assignment{assigned("node-b", "172.18.0.33")}, inNB: []string{mgmtA},
			rerouteChange: "delete"},
		{name: "(b) node-b reports the IP ready: switched",
			assigned: []Assignment{assigned("node-b", "172.18.0.33")}, ready: map[string][]string{"node-b": {"172.18.0.33"}},
			inNB: []string{mgmtA}, fallback: []string{"node-a"}, want: []string{mgmtB}, rerouteChange: "update"},
		{name: "(c) two holders, one ready: only the ready one",
			assigned: []Assignment{assigned("node-a", "172.18.0.33"), assigned("node-b", "172.18.0.44")},
			ready:    map[string][]string{"node-b": {"172.18.0.44"}},
			inNB:     []string{mgmtA, mgmtB}, want: []string{mgmtB}, rerouteChange: "update"},
		{name: "(c) two holders, both ready: ECMP over both",
			assigned: []Assignment{assigned("node-a", "172.18.0.33"), assigned("node-b", "172.18.0.44")},
			ready:    map[string][]string{"node-a": {"172.18.0.33"}, "node-b": {"172.18.0.44"}},
			inNB:     []string{mgmtA}, want: []string{mgmtA, mgmtB}, rerouteChange: "update"},
		{name: "(d) no policy in NB and no holder ready: no reroute row",
			assigned: []Assignment{assigned("node-b", "172.18.0.33")}},
		{name: "(d) then the holder is ready: inserted",
			assigned: []Assignment{assigned("node-b", "172.18.0.33")}, ready: map[string][]string{"node-b": {"172.18.0.33"}},
			want: []string{mgmtB}, rerouteChange: "insert"},
		{name: "ready for an IP it does not hold counts as not ready",
			assigned: []Assignment{assigned("node-b", "172.18.0.33")}, ready: map[string][]string{"node-b": {"172.18.0.44"}},
			inNB: []string{mgmtA}, fallback: []string{"node-a"}, want: []string{mgmtA}},
		{name: "no holder at all (unassigned): the reroute goes",
			inNB: []string{mgmtA}, rerouteChange: "delete"},
		{name: "a holder without the annotation counts as not ready (never assumed)",
			assigned: []Assignment{assigned("node-b", "172.18.0.33")}, absent: []string{"node-b"},
			inNB: []string{mgmtA}, rerouteChange: "delete"},
		{name: "a new holder without the annotation is never rerouted to",
			assigned: []Assignment{assigned("node-b", "172.18.0.33")}, absent: []string{"node-b"}},
		{name: "shared gateway mode ignores readiness",
			mode: gwmode.Shared, assigned: []Assignment{assigned("node-b", "172.18.0.33")},
			inNB: []string{"100.64.0.2"}, want: []string{joinB}, rerouteChange: "update"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			if mode == "" {
				mode = gwmode.Local
			}
			nodes := readyNodes(tc.ready)
			for _, name := range tc.absent {
				n := nodes[name]
				n.ReadyEgressIPs = nil
				nodes[name] = n
			}
			in := Input{Mode: mode, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"),
				Nodes:     nodes,
				EgressIPs: []EgressIP{{Name: "eip1", Assigned: tc.assigned, Pods: []Pod{pod("ns1", "p1", "10.244.1.5")}}}}
			in.EgressIPs[0].IPs = addrs("172.18.0.33")
			in.Now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			for _, name := range tc.fallback {
				n := in.Nodes[name]
				n.LingeringUntil = map[netip.Addr]time.Time{netip.MustParseAddr("172.18.0.33"): in.Now.Add(5 * time.Second)}
				in.Nodes[name] = n
			}
			desired := Desired(in)

			// NB before: the same rows, with p1's reroute as in tc.inNB.
			before := Desired(in)
			delete(before.Policies, p1)
			if tc.inNB != nil {
				ids := p1.IDs
				before.Policies[p1] = &nbdb.LogicalRouterPolicy{Priority: ReroutePriority, Match: "ip4.src == 10.244.1.5",
					Action: nbdb.LogicalRouterPolicyActionReroute, Nexthops: tc.inNB, ExternalIDs: ids.ExternalIDs()}
			}
			cur := asCurrent(before)
			plan := Diff(desired, cur)

			change := ""
			after := slices.Clone(tc.inNB)
			for _, c := range plan.Changes {
				if c.Key != p1 {
					continue
				}
				change = c.Op.String()
				switch c.Op {
				case Insert, Update:
					after = slices.Clone(c.Row.(*nbdb.LogicalRouterPolicy).Nexthops)
				case Delete:
					after = nil
				}
			}
			slices.Sort(after)
			if change != tc.rerouteChange {
				t.Errorf("change of the reroute = %q, want %q (plan %v)", change, tc.rerouteChange, planLines(plan))
			}
			if !slices.Equal(after, tc.want) {
				t.Errorf("next hops after the plan = [%s], want [%s]", strings.Join(after, " "), strings.Join(tc.want, " "))
			}
		})
	}
}
