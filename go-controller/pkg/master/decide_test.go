package master

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// decideNode is an eligible node on 172.18.0.0/16 (assign's view).
func decideNode(name string) assign.Node {
	return assign.Node{Name: name, Labelled: true, Ready: true, Reachable: true,
		Egress: annotations.EgressConfig{Network: annotations.DualPrefix{V4: netip.MustParsePrefix("172.18.0.10/16")},
			CapacityV4: -1, CapacityV6: -1, CapacityTotal: -1}}
}

func items(pairs ...string) []egressipv1.EgressIPStatusItem {
	var out []egressipv1.EgressIPStatusItem
	for i := 0; i+1 < len(pairs); i += 2 {
		out = append(out, egressipv1.EgressIPStatusItem{EgressIP: pairs[i], Node: pairs[i+1]})
	}
	return out
}

// TestDecideStatus: the status decisions, from what a sync read to the writes it
// makes, before NB (decideStatus) and after (decideConditions).
func TestDecideStatus(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	unreachable := func(n assign.Node) assign.Node { n.Reachable = false; return n }
	readyOn := func(ips ...string) nbstate.Node {
		n := nbstate.Node{ReadyEgressIPs: map[netip.Addr]bool{}}
		for _, ip := range ips {
			n.ReadyEgressIPs[netip.MustParseAddr(ip)] = true
		}
		return n
	}
	type want struct {
		items       []egressipv1.EgressIPStatusItem // the write's items (nil: no write)
		ready       metav1.ConditionStatus          // its Ready condition
		readyReason string
		assigned    string
		message     string // a part of the Ready message (empty: not checked)
	}
	cases := []struct {
		name      string
		believed  []egressipv1.EgressIPStatusItem // status believed current (nil: none)
		cached    []egressipv1.EgressIPStatusItem // the informer's copy, when it lags behind believed
		nodes     []assign.Node
		nbNodes   map[string]nbstate.Node
		committed bool        // the believed items are programmed in NB
		mode      gwmode.Mode // "" = shared
		noRouter  string      // a router missing from NB
		before    want        // decideStatus' write
		after     want        // decideConditions' write once NB holds what decideStatus left
		problems  int
	}{
		{name: "new EgressIP: assigned, not programmed yet; after NB: Ready",
			nodes:  []assign.Node{decideNode("node1")},
			before: want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionFalse, readyReason: conditions.ReasonNotProgrammed, assigned: "1/1"},
			after:  want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionTrue, readyReason: conditions.ReasonProgrammed, assigned: "1/1"}},
		{name: "holder unreachable: the IP moves to the other node",
			believed: items("172.18.0.100", "node1"), committed: true,
			nodes:  []assign.Node{unreachable(decideNode("node1")), decideNode("node2")},
			before: want{items: items("172.18.0.100", "node2"), ready: metav1.ConditionFalse, readyReason: conditions.ReasonNotProgrammed, assigned: "1/1"},
			after:  want{items: items("172.18.0.100", "node2"), ready: metav1.ConditionTrue, readyReason: conditions.ReasonProgrammed, assigned: "1/1"}},
		{name: "no eligible node: nothing to write before NB; after: NotAllAssigned",
			nodes:    []assign.Node{unreachable(decideNode("node1"))},
			problems: 1,
			after:    want{items: nil, ready: metav1.ConditionFalse, readyReason: conditions.ReasonNotAssigned, assigned: "0/1"}},
		{name: "the cache lags behind the master's own write: decided from the write, nothing to do",
			believed: items("172.18.0.100", "node1"), cached: nil, committed: true,
			nodes: []assign.Node{decideNode("node1"), decideNode("node2")},
			after: want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionTrue, readyReason: conditions.ReasonProgrammed, assigned: "1/1"}},
		{name: "shared gateway, the holder's gateway router is missing: not programmed",
			// The message names the missing router from the first write on: nothing changes after NB.
			nodes: []assign.Node{decideNode("node1")}, noRouter: "GR_node1",
			before: want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionFalse, readyReason: conditions.ReasonNotProgrammed, assigned: "1/1",
				message: "gateway router GR_node1 of node node1 not in OVN Northbound"},
			after: want{}},
		{name: "the cluster router is missing: not programmed",
			nodes: []assign.Node{decideNode("node1")}, noRouter: nbstate.ClusterRouter, mode: gwmode.Local,
			nbNodes: map[string]nbstate.Node{"node1": readyOn("172.18.0.100")},
			before: want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionFalse, readyReason: conditions.ReasonNotProgrammed, assigned: "1/1",
				message: "logical router ovn_cluster_router not in OVN Northbound"},
			after: want{}},
		{name: "local gateway: programmed only once the holder lists it ready",
			nodes: []assign.Node{decideNode("node1")}, mode: gwmode.Local,
			nbNodes: map[string]nbstate.Node{"node1": readyOn()},
			before:  want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionFalse, readyReason: conditions.ReasonNotProgrammed, assigned: "1/1"},
			after:   want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionFalse, readyReason: conditions.ReasonNotProgrammed, assigned: "1/1"}},
		{name: "local gateway, holder lists it: Ready",
			nodes: []assign.Node{decideNode("node1")}, mode: gwmode.Local,
			nbNodes: map[string]nbstate.Node{"node1": readyOn("172.18.0.100")},
			before:  want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionFalse, readyReason: conditions.ReasonNotProgrammed, assigned: "1/1"},
			after:   want{items: items("172.18.0.100", "node1"), ready: metav1.ConditionTrue, readyReason: conditions.ReasonProgrammed, assigned: "1/1"}},
	}
	check := func(t *testing.T, stage string, writes []statusWrite, w want) *egressipv1.EgressIPStatus {
		t.Helper()
		if w.ready == "" {
			if len(writes) != 0 {
				t.Fatalf("%s: %d writes (%s), want none", stage, len(writes), describe(writes[0].status.Items))
			}
			return nil
		}
		if len(writes) != 1 {
			t.Fatalf("%s: %d writes, want 1", stage, len(writes))
		}
		st := writes[0].status
		if !sameItems(st.Items, w.items) || st.Assigned != w.assigned {
			t.Fatalf("%s: items %s assigned %q, want %s %q", stage, describe(st.Items), st.Assigned, describe(w.items), w.assigned)
		}
		if len(st.Conditions) == 0 || st.Conditions[0].Type != conditions.TypeReady ||
			st.Conditions[0].Status != w.ready || st.Conditions[0].Reason != w.readyReason {
			t.Fatalf("%s: conditions %+v, want Ready %s %s", stage, st.Conditions, w.ready, w.readyReason)
		}
		if !strings.Contains(st.Conditions[0].Message, w.message) {
			t.Fatalf("%s: Ready message %q does not say %q", stage, st.Conditions[0].Message, w.message)
		}
		if writes[0].rv != "rv-believed" {
			t.Fatalf("%s: writes over resourceVersion %q, want the believed one", stage, writes[0].rv)
		}
		return &st
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := egressIP("e1", 0, []string{"172.18.0.100"}, prodNS, web)
			e.ResourceVersion = "rv-cache"
			e.Status.Items = tc.cached
			in := statusInput{eips: []*egressipv1.EgressIP{e}, nodes: tc.nodes, nbNodes: tc.nbNodes, mode: tc.mode, now: now,
				believed:  map[string]believed{"e1": {status: egressipv1.EgressIPStatus{Items: tc.believed}, rv: "rv-believed"}},
				committed: map[string][]egressipv1.EgressIPStatusItem{}}
			if in.nbNodes == nil {
				in.nbNodes = map[string]nbstate.Node{}
			}
			if in.mode == "" {
				in.mode = gwmode.Shared
			}
			in.routers = map[string]bool{nbstate.ClusterRouter: true, "GR_node1": true, "GR_node2": true}
			delete(in.routers, tc.noRouter)
			if tc.committed {
				in.committed["e1"] = tc.believed
			}
			d := decideStatus(in)
			if len(d.problems["e1"]) != tc.problems {
				t.Fatalf("problems %+v, want %d", d.problems, tc.problems)
			}
			programmed := d.kept
			cur := egressipv1.EgressIPStatus{Items: tc.believed}
			if st := check(t, "before NB", d.writes, tc.before); st != nil {
				programmed = map[string][]egressipv1.EgressIPStatusItem{"e1": st.Items}
				cur = *st
			} else if _, ok := d.kept["e1"]; !ok {
				t.Fatalf("no write and not kept: %+v", d)
			}

			// NB committed what the decision left; the status is what was written.
			in.committed = programmed
			in.believed["e1"] = believed{status: cur, rv: "rv-believed"}
			st := check(t, "after NB", decideConditions(in, programmed, d.problems), tc.after)
			if st == nil {
				return
			}
			// The written status is a fixed point: deciding again writes nothing.
			in.believed["e1"] = believed{status: *st, rv: "rv-believed"}
			if again := decideStatus(in); len(again.writes) != 0 {
				t.Fatalf("deciding again writes %s", describe(again.writes[0].status.Items))
			}
			if again := decideConditions(in, programmed, d.problems); len(again) != 0 {
				t.Fatalf("deciding conditions again writes %+v", again[0].status)
			}
		})
	}
}
