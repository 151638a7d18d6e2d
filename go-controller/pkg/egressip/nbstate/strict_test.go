package nbstate

import (
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// TestDesiredStrict: a strict EgressIP with no usable holder drops its pods'
// traffic (priority 100, same row identity as the reroute) and keeps them in the
// served-pods set, so the no-reroute policies still allow traffic inside the
// cluster; with a holder it reroutes as usual; not strict: no row.
func TestDesiredStrict(t *testing.T) {
	for _, mode := range []gwmode.Mode{gwmode.Shared, gwmode.Local} {
		in := Input{Mode: mode, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"), Nodes: readyNodes(nil)}
		e := EgressIP{Name: "e", Strict: true, Pods: []Pod{pod("prod", "web", "10.244.1.5")}}
		in.EgressIPs = []EgressIP{e}
		st := Desired(in)
		key := Key{Router: ClusterRouter, IDs: IDs{OwnerType: OwnerEgressIP, Name: "e", Rule: RuleReroute, Family: FamilyIPv4, Pod: "prod/web"}}
		p := st.Policies[key]
		if p == nil || p.Action != nbdb.LogicalRouterPolicyActionDrop || len(p.Nexthops) != 0 || p.Priority != ReroutePriority || p.Match != "ip4.src == 10.244.1.5" {
			t.Fatalf("%s: strict, nothing assigned: policy %+v, want a priority-100 drop", mode, p)
		}
		if set := st.AddressSets[ServedPodsKey(FamilyIPv4)]; set == nil || len(set.Addresses) != 1 || set.Addresses[0] != "10.244.1.5" {
			t.Errorf("%s: served pods set %+v, want the dropped pod in it (pod-to-node stays allowed)", mode, set)
		}
		if len(st.NATs) != 0 {
			t.Errorf("%s: SNAT rows %v with nothing assigned", mode, st.NATs)
		}

		in.Nodes = readyNodes(map[string][]string{"node-a": {"172.18.0.33"}})
		e.Assigned = []Assignment{assigned("node-a", "172.18.0.33")}
		in.EgressIPs = []EgressIP{e}
		if p := Desired(in).Policies[key]; p == nil || p.Action != nbdb.LogicalRouterPolicyActionReroute {
			t.Errorf("%s: strict with a holder: %+v, want reroute", mode, p)
		}

		e.Assigned, e.Strict = nil, false
		in.EgressIPs = []EgressIP{e}
		if p := Desired(in).Policies[key]; p != nil {
			t.Errorf("%s: not strict, nothing assigned: %+v, want no row", mode, p)
		}
	}
}
