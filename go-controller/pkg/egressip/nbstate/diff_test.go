package nbstate

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

var testRouters = map[string]string{
	ClusterRouter:           "uuid-cluster-router",
	GatewayRouter("node-a"): "uuid-gr-a",
	GatewayRouter("node-b"): "uuid-gr-b",
}

// sampleDesired: one EgressIP on node-a serving one pod (shared mode): 7 rows.
func sampleDesired(node string) State {
	return Desired(Input{
		Mode: gwmode.Shared, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"), Nodes: testNodes(),
		EgressIPs: []EgressIP{{Name: "eip1", Assigned: []Assignment{assigned(node, "172.18.0.33")}, Pods: []Pod{pod("ns1", "p1", "10.244.1.5")}}},
	})
}

// asCurrent turns a desired State into what ReadCurrent would return after it was
// written: deep copies with UUIDs "row-<n>".
func asCurrent(st State) Current {
	cur := NewCurrent()
	for k, v := range testRouters {
		cur.Routers[k] = v
	}
	n := 0
	next := func() string { n++; return fmt.Sprintf("row-%02d", n) }
	for _, k := range sortedKeys(st.Policies) {
		cp := *st.Policies[k]
		cp.UUID = next()
		cur.Rows.Policies[k] = &cp
	}
	for _, k := range sortedKeys(st.NATs) {
		cp := *st.NATs[k]
		cp.UUID = next()
		cur.Rows.NATs[k] = &cp
	}
	for _, k := range sortedKeys(st.AddressSets) {
		cp := *st.AddressSets[k]
		cp.UUID = next()
		cur.Rows.AddressSets[k] = &cp
	}
	return cur
}

// planLines renders a plan as "<op> <table> <rule or uuid> [router]" lines, in plan order.
func planLines(p Plan) []string {
	var out []string
	for _, c := range p.Changes {
		what := c.Key.IDs.Rule + "/" + c.Key.IDs.Family
		if c.Key.IDs.Rule == "" {
			what = c.UUID
		}
		line := fmt.Sprintf("%s %s %s", c.Op, c.Table, what)
		if c.RouterUUID != "" {
			line += " " + c.RouterUUID
		}
		if c.OldRouterUUID != "" {
			line += " from " + c.OldRouterUUID
		}
		out = append(out, line)
	}
	for _, k := range p.Skipped {
		out = append(out, "skip "+k.Router+" "+k.IDs.Rule)
	}
	return out
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name    string
		desired State
		current func() Current
		want    []string
	}{
		{
			name:    "empty NB: inserts only, address sets first",
			desired: sampleDesired("node-a"),
			current: func() Current { c := asCurrent(NewState()); return c },
			want: []string{
				"insert Address_Set node-ips/ip4",
				"insert Address_Set served-pods/ip4",
				"insert Logical_Router_Policy pod-to-join/ip4 uuid-cluster-router",
				"insert Logical_Router_Policy pod-to-node/ip4 uuid-cluster-router",
				"insert Logical_Router_Policy pod-to-pod/ip4 uuid-cluster-router",
				"insert Logical_Router_Policy reroute/ip4 uuid-cluster-router",
				"insert NAT snat/ip4 uuid-gr-a",
			},
		},
		{
			name:    "NB already right: nothing",
			desired: sampleDesired("node-a"),
			current: func() Current { return asCurrent(sampleDesired("node-a")) },
			want:    nil,
		},
		{
			name:    "sets compare without order",
			desired: sampleDesired("node-a"),
			current: func() Current {
				c := asCurrent(sampleDesired("node-a"))
				for _, as := range c.Rows.AddressSets {
					slices.Reverse(as.Addresses)
				}
				return c
			},
			want: nil,
		},
		{
			name:    "IP moved to node-b: next hop switched, the SNAT row moves from GR_node-a to GR_node-b in place",
			desired: sampleDesired("node-b"),
			current: func() Current { return asCurrent(sampleDesired("node-a")) },
			want: []string{
				"update Logical_Router_Policy reroute/ip4",
				"update NAT snat/ip4 uuid-gr-b from uuid-gr-a",
			},
		},
		{
			name:    "EgressIP gone: everything deleted",
			desired: NewState(),
			current: func() Current { return asCurrent(sampleDesired("node-a")) },
			want: []string{
				"delete Address_Set node-ips/ip4",
				"delete Address_Set served-pods/ip4",
				"delete Logical_Router_Policy pod-to-join/ip4 uuid-cluster-router",
				"delete Logical_Router_Policy pod-to-node/ip4 uuid-cluster-router",
				"delete Logical_Router_Policy pod-to-pod/ip4 uuid-cluster-router",
				"delete Logical_Router_Policy reroute/ip4 uuid-cluster-router",
				"delete NAT snat/ip4 uuid-gr-a",
			},
		},
		{
			name:    "edited rows are updated in place",
			desired: sampleDesired("node-a"),
			current: func() Current {
				c := asCurrent(sampleDesired("node-a"))
				for k, p := range c.Rows.Policies {
					if k.IDs.Rule == RulePodToPod {
						p.Match = "1"
					}
				}
				for _, n := range c.Rows.NATs {
					n.LogicalIP = "10.244.9.9"
				}
				for k, as := range c.Rows.AddressSets {
					if k.IDs.Rule == RuleNodeIPs {
						as.ExternalIDs = map[string]string{OwnerControllerKey: OwnerController, "extra": "x"}
					}
				}
				return c
			},
			want: []string{
				"update Address_Set node-ips/ip4",
				"update Logical_Router_Policy pod-to-pod/ip4",
				"update NAT snat/ip4",
			},
		},
		{
			name:    "stale duplicates are deleted",
			desired: sampleDesired("node-a"),
			current: func() Current {
				c := asCurrent(sampleDesired("node-a"))
				c.Stale = []Ref{{Table: nbdb.NATTable, UUID: "dup-2", RouterUUID: "uuid-gr-a"}, {Table: nbdb.AddressSetTable, UUID: "dup-1"}}
				return c
			},
			want: []string{
				"delete Address_Set dup-1",
				"delete NAT dup-2 uuid-gr-a",
			},
		},
		{
			name:    "missing gateway router or taken address set name: skipped, not failed",
			desired: sampleDesired("node-a"),
			current: func() Current {
				c := asCurrent(NewState())
				delete(c.Routers, GatewayRouter("node-a"))
				c.ForeignAddressSets[NodeIPsAddressSet(FamilyIPv4)] = true
				return c
			},
			want: []string{
				"insert Address_Set served-pods/ip4",
				"insert Logical_Router_Policy pod-to-join/ip4 uuid-cluster-router",
				"insert Logical_Router_Policy pod-to-node/ip4 uuid-cluster-router",
				"insert Logical_Router_Policy pod-to-pod/ip4 uuid-cluster-router",
				"insert Logical_Router_Policy reroute/ip4 uuid-cluster-router",
				"skip GR_node-a snat",
				"skip  node-ips",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := planLines(Diff(tc.desired, tc.current()))
			if !slices.Equal(got, tc.want) {
				t.Errorf("plan:\n got:\n  %s\n want:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

func TestSetDiff(t *testing.T) {
	add, del := setDiff([]string{"a", "c", "d", "d"}, []string{"b", "c", "a"})
	if !slices.Equal(add, []string{"d"}) || !slices.Equal(del, []string{"b"}) {
		t.Fatalf("setDiff = +%v -%v, want +[d] -[b]", add, del)
	}
}

// sortedKeys returns the keys of m in String order (deterministic output).
func sortedKeys[V any](m map[Key]V) []Key {
	type named struct {
		s string
		k Key
	}
	all := make([]named, 0, len(m))
	for k := range m {
		all = append(all, named{k.String(), k})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].s < all[j].s })
	keys := make([]Key, len(all))
	for i, n := range all {
		keys[i] = n.k
	}
	return keys
}
