package assign

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// node returns an eligible node with unlimited capacity on the given egress networks.
func node(name string, networks ...string) Node {
	n := Node{Name: name, Labelled: true, Ready: true, Reachable: true,
		Egress: annotations.EgressConfig{CapacityV4: -1, CapacityV6: -1, CapacityTotal: -1}}
	for _, s := range networks {
		p := netip.MustParsePrefix(s)
		if p.Addr().Is4() {
			n.Egress.Network.V4 = p
		} else {
			n.Egress.Network.V6 = p
		}
		n.Addresses = append(n.Addresses, p.Addr())
	}
	return n
}

func with(n Node, f func(*Node)) Node { f(&n); return n }

func eip(name string, age int, spec []string, status ...Item) EgressIP {
	return EgressIP{Name: name, Created: t0.Add(time.Duration(age) * time.Second), Spec: spec, Status: status}
}

func it(node, ip string) Item { return Item{Node: node, EgressIP: ip} }

type problem struct {
	eip, ip string
	reason  Reason
}

func TestAssign(t *testing.T) {
	a := node("node-a", "172.18.0.11/16")
	b := node("node-b", "172.18.0.12/16")
	c := with(node("node-c", "172.18.0.13/16"), func(n *Node) { n.Labelled = false })
	a6 := node("node-a", "172.18.0.11/16", "fc00::11/64")
	b6 := node("node-b", "172.18.0.12/16", "fc00::12/64")
	only6 := node("node-v6", "fc00::20/64")

	tests := []struct {
		name     string
		eips     []EgressIP
		nodes    []Node
		want     map[string][]Item
		problems []problem
	}{
		{
			name:  "3 nodes, 2 assignable: one IP on each assignable node",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33", "172.18.0.44"})},
			nodes: []Node{a, b, c},
			want:  map[string][]Item{"e1": {it("node-a", "172.18.0.33"), it("node-b", "172.18.0.44")}},
		},
		{
			name: "fewest allocations first, tie by node name",
			eips: []EgressIP{
				eip("e1", 0, []string{"172.18.0.33"}, it("node-a", "172.18.0.33")),
				eip("e2", 1, []string{"172.18.0.44"}),
				eip("e3", 2, []string{"172.18.0.55"}),
			},
			nodes: []Node{a, b},
			want: map[string][]Item{
				"e1": {it("node-a", "172.18.0.33")},
				"e2": {it("node-b", "172.18.0.44")},
				"e3": {it("node-a", "172.18.0.55")},
			},
		},
		{
			name: "valid assignments are never moved, even when unbalanced",
			eips: []EgressIP{
				eip("e1", 0, []string{"172.18.0.33"}, it("node-b", "172.18.0.33")),
				eip("e2", 1, []string{"172.18.0.44"}, it("node-b", "172.18.0.44")),
			},
			nodes: []Node{a, b},
			want: map[string][]Item{
				"e1": {it("node-b", "172.18.0.33")},
				"e2": {it("node-b", "172.18.0.44")},
			},
		},
		{
			name:  "unlabelled node: its IP moves to the other assignable node",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33"}, it("node-c", "172.18.0.33"))},
			nodes: []Node{a, c},
			want:  map[string][]Item{"e1": {it("node-a", "172.18.0.33")}},
		},
		{
			name:  "NotReady node: its IP moves",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33"}, it("node-b", "172.18.0.33"))},
			nodes: []Node{a, with(b, func(n *Node) { n.Ready = false })},
			want:  map[string][]Item{"e1": {it("node-a", "172.18.0.33")}},
		},
		{
			name:  "unreachable node: its IP moves",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33"}, it("node-b", "172.18.0.33"))},
			nodes: []Node{a, with(b, func(n *Node) { n.Reachable = false })},
			want:  map[string][]Item{"e1": {it("node-a", "172.18.0.33")}},
		},
		{
			name:  "node with an unparsable egress config: its IP moves",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33"}, it("node-b", "172.18.0.33"))},
			nodes: []Node{a, with(b, func(n *Node) { n.ConfigErr = errors.New("bad annotation") })},
			want:  map[string][]Item{"e1": {it("node-a", "172.18.0.33")}},
		},
		{
			name:  "deleted node: its IP moves",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33"}, it("node-gone", "172.18.0.33"))},
			nodes: []Node{b},
			want:  map[string][]Item{"e1": {it("node-b", "172.18.0.33")}},
		},
		{
			name:  "node's subnet no longer contains the IP: it moves",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33"}, it("node-a", "172.18.0.33"))},
			nodes: []Node{node("node-a", "10.0.0.5/24"), b},
			want:  map[string][]Item{"e1": {it("node-b", "172.18.0.33")}},
		},
		{
			name:  "IP removed from spec: its item goes, the rest stays",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.44"}, it("node-a", "172.18.0.33"), it("node-b", "172.18.0.44"))},
			nodes: []Node{a, b},
			want:  map[string][]Item{"e1": {it("node-b", "172.18.0.44")}},
		},
		{
			name:     "at most one IP of an EgressIP per node",
			eips:     []EgressIP{eip("e1", 0, []string{"172.18.0.33", "172.18.0.44", "172.18.0.55"})},
			nodes:    []Node{a, b},
			want:     map[string][]Item{"e1": {it("node-a", "172.18.0.33"), it("node-b", "172.18.0.44")}},
			problems: []problem{{"e1", "172.18.0.55", UnassignedRequest}},
		},
		{
			name:     "two items of one EgressIP on one node: the second is re-placed",
			eips:     []EgressIP{eip("e1", 0, []string{"172.18.0.33", "172.18.0.44"}, it("node-a", "172.18.0.33"), it("node-a", "172.18.0.44"))},
			nodes:    []Node{a, b},
			want:     map[string][]Item{"e1": {it("node-a", "172.18.0.33"), it("node-b", "172.18.0.44")}},
			problems: nil,
		},
		{
			name:     "no node network contains the IP",
			eips:     []EgressIP{eip("e1", 0, []string{"192.168.9.9", "172.18.0.33"})},
			nodes:    []Node{a, c},
			want:     map[string][]Item{"e1": {it("node-a", "172.18.0.33")}},
			problems: []problem{{"e1", "192.168.9.9", NoMatchingNodeFound}},
		},
		{
			name:     "no eligible node at all",
			eips:     []EgressIP{eip("e1", 0, []string{"172.18.0.33"})},
			nodes:    []Node{c},
			want:     map[string][]Item{"e1": nil},
			problems: []problem{{"e1", "172.18.0.33", NoMatchingNodeFound}},
		},
		{
			name: "per-family capacity",
			eips: []EgressIP{
				eip("e1", 0, []string{"172.18.0.33"}),
				eip("e2", 1, []string{"172.18.0.44"}),
			},
			nodes: []Node{
				with(a, func(n *Node) { n.Egress.CapacityV4 = 1 }),
				with(b, func(n *Node) { n.Egress.CapacityV4 = 0 }),
			},
			want:     map[string][]Item{"e1": {it("node-a", "172.18.0.33")}, "e2": nil},
			problems: []problem{{"e2", "172.18.0.44", UnassignedRequest}},
		},
		{
			name: "total capacity counts both families",
			eips: []EgressIP{
				eip("e1", 0, []string{"fc00::33"}, it("node-a", "fc00::33")),
				eip("e2", 1, []string{"172.18.0.44"}),
			},
			nodes:    []Node{with(a6, func(n *Node) { n.Egress.CapacityTotal = 1 })},
			want:     map[string][]Item{"e1": {it("node-a", "fc00::33")}, "e2": nil},
			problems: []problem{{"e2", "172.18.0.44", UnassignedRequest}},
		},
		{
			name:  "capacity lowered below current use: the later item is re-placed",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33"}, it("node-a", "172.18.0.33")), eip("e2", 1, []string{"172.18.0.44"}, it("node-a", "172.18.0.44"))},
			nodes: []Node{with(a, func(n *Node) { n.Egress.CapacityV4 = 1 }), b},
			want:  map[string][]Item{"e1": {it("node-a", "172.18.0.33")}, "e2": {it("node-b", "172.18.0.44")}},
		},
		{
			name:  "IPv6 only",
			eips:  []EgressIP{eip("e1", 0, []string{"fc00::33"})},
			nodes: []Node{a, only6},
			want:  map[string][]Item{"e1": {it("node-v6", "fc00::33")}},
		},
		{
			name:  "dual stack: each family on a node of that family, one per node",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33", "fc00::33"})},
			nodes: []Node{a6, b6},
			want:  map[string][]Item{"e1": {it("node-a", "172.18.0.33"), it("node-b", "fc00::33")}},
		},
		{
			name:     "invalid and unsupported entries are reported, the rest is assigned",
			eips:     []EgressIP{eip("e1", 0, []string{"not-an-ip", "172.18.0.33", "127.0.0.1", "fe80::1%eth0", "::ffff:172.18.0.40", "ff02::1"})},
			nodes:    []Node{a6},
			want:     map[string][]Item{"e1": {it("node-a", "172.18.0.33")}},
			problems: []problem{{"e1", "not-an-ip", InvalidEgressIP}, {"e1", "127.0.0.1", UnsupportedRequest}, {"e1", "fe80::1%eth0", InvalidEgressIP}, {"e1", "::ffff:172.18.0.40", UnsupportedRequest}, {"e1", "ff02::1", UnsupportedRequest}},
		},
		{
			name:     "the same address written two ways is one IP",
			eips:     []EgressIP{eip("e1", 0, []string{"fc00::33", "fc00:0::33"})},
			nodes:    []Node{a6, b6},
			want:     map[string][]Item{"e1": {it("node-a", "fc00::33")}},
			problems: []problem{{"e1", "fc00:0::33", InvalidEgressIP}},
		},
		{
			name:     "IP equal to a node address (even of an ineligible node) is a conflict",
			eips:     []EgressIP{eip("e1", 0, []string{"172.18.0.13", "172.18.0.12"}, it("node-a", "172.18.0.12"))},
			nodes:    []Node{a, b, c},
			want:     map[string][]Item{"e1": nil},
			problems: []problem{{"e1", "172.18.0.13", EgressIPConflict}, {"e1", "172.18.0.12", EgressIPConflict}},
		},
		{
			name: "IP claimed by two EgressIPs goes to the older one",
			eips: []EgressIP{
				eip("young", 5, []string{"172.18.0.33"}),
				eip("old", 1, []string{"fc00:0::33", "172.18.0.33"}),
			},
			nodes:    []Node{a6, b6},
			want:     map[string][]Item{"old": {it("node-a", "fc00:0::33"), it("node-b", "172.18.0.33")}, "young": nil},
			problems: []problem{{"young", "172.18.0.33", EgressIPConflict}},
		},
		{
			name: "claim tie on age is broken by name; spellings are compared parsed",
			eips: []EgressIP{
				eip("zz", 0, []string{"fc00::33"}),
				eip("aa", 0, []string{"fc00:0:0::33"}),
			},
			nodes:    []Node{a6},
			want:     map[string][]Item{"aa": {it("node-a", "fc00:0:0::33")}, "zz": nil},
			problems: []problem{{"zz", "fc00::33", EgressIPConflict}},
		},
		{
			name: "an EgressIP holding the IP keeps it when an older one starts claiming it",
			eips: []EgressIP{
				eip("old", 0, []string{"172.18.0.33"}),
				eip("holder", 9, []string{"172.18.0.33"}, it("node-b", "172.18.0.33")),
			},
			nodes:    []Node{a, b},
			want:     map[string][]Item{"holder": {it("node-b", "172.18.0.33")}, "old": nil},
			problems: []problem{{"old", "172.18.0.33", EgressIPConflict}},
		},
		{
			name:  "status spelled differently from spec: kept in place, written as in spec",
			eips:  []EgressIP{eip("e1", 0, []string{"fc00::33"}, it("node-b", "fc00:0::33"))},
			nodes: []Node{a6, b6},
			want:  map[string][]Item{"e1": {it("node-b", "fc00::33")}},
		},
		{
			name:  "garbage status items are dropped",
			eips:  []EgressIP{eip("e1", 0, []string{"172.18.0.33"}, it("node-b", "junk"), it("node-b", "172.18.0.33"), it("node-a", "172.18.0.33"))},
			nodes: []Node{a, b},
			want:  map[string][]Item{"e1": {it("node-b", "172.18.0.33")}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Assign(tc.eips, tc.nodes)
			checkStatus(t, got.Status, tc.want)
			var gotProblems []problem
			for _, p := range got.Problems {
				gotProblems = append(gotProblems, problem{p.EgressIP, p.IP, p.Reason})
				if p.Message == "" {
					t.Errorf("problem %+v has no message", p)
				}
			}
			if !reflect.DeepEqual(gotProblems, tc.problems) {
				t.Errorf("problems:\n got  %v\n want %v", gotProblems, tc.problems)
			}
			checkKept(t, tc.eips, tc.nodes, got)
		})
	}
}

// checkKept: Kept gives each EgressIP exactly its spec entries that Assign does not
// refuse (not an IP, a duplicate, unsupported, a node's address, claimed by another
// EgressIP), parsed, in spec order; every IP Assign places is among them.
func checkKept(t *testing.T, eips []EgressIP, nodes []Node, res Result) {
	t.Helper()
	refused := map[string]map[int]bool{}
	for _, p := range res.Problems {
		switch p.Cause {
		case CauseNotAnIP, CauseDuplicate, CauseUnsupported, CauseNodeAddress, CauseClaimed:
			if refused[p.EgressIP] == nil {
				refused[p.EgressIP] = map[int]bool{}
			}
			refused[p.EgressIP][p.Index] = true
		}
	}
	kept := Kept(eips, nodes)
	for _, e := range eips {
		var want []netip.Addr
		for i, raw := range e.Spec {
			if !refused[e.Name][i] {
				want = append(want, netip.MustParseAddr(raw))
			}
		}
		if got := kept[e.Name]; !reflect.DeepEqual(got, want) {
			t.Errorf("Kept[%s] = %v, want %v (the spec entries Assign does not refuse)", e.Name, got, want)
		}
		for _, item := range res.Status[e.Name] {
			if a := netip.MustParseAddr(item.EgressIP); !slices.Contains(kept[e.Name], a) {
				t.Errorf("%s placed %s, which Kept does not give it: %v", e.Name, a, kept[e.Name])
			}
		}
	}
}

func checkStatus(t *testing.T, got, want map[string][]Item) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("status has %d EgressIPs, want %d: %v", len(got), len(want), got)
	}
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			t.Errorf("no status for %s", name)
			continue
		}
		if len(g) != len(w) || (len(w) > 0 && !reflect.DeepEqual(g, w)) {
			t.Errorf("status of %s:\n got  %v\n want %v", name, g, w)
		}
	}
}

// TestAssignDeterministic checks that input order does not matter and that a
// second run over the first run's output changes nothing.
func TestAssignDeterministic(t *testing.T) {
	nodes := []Node{node("n1", "172.18.0.11/16", "fc00::11/64"), node("n2", "172.18.0.12/16", "fc00::12/64"), node("n3", "172.18.0.13/16")}
	eips := []EgressIP{
		eip("e1", 0, []string{"172.18.0.31", "fc00::31"}),
		eip("e2", 0, []string{"172.18.0.32", "172.18.0.33", "172.18.0.34"}),
		eip("e3", 2, []string{"172.18.0.31", "fc00::35"}),
		eip("e4", 1, []string{"172.18.0.36"}),
	}
	first := Assign(eips, nodes)
	for i := 0; i < 10; i++ {
		rev := make([]EgressIP, len(eips))
		for j := range eips {
			rev[len(eips)-1-j] = eips[(j+i)%len(eips)]
		}
		nrev := []Node{nodes[(i+2)%3], nodes[(i+1)%3], nodes[i%3]}
		got := Assign(rev, nrev)
		if !reflect.DeepEqual(got, first) {
			t.Fatalf("permutation %d changed the result:\n got  %+v\n want %+v", i, got, first)
		}
	}
	// Feed the result back as status: a fixed point.
	again := make([]EgressIP, len(eips))
	for i, e := range eips {
		e.Status = first.Status[e.Name]
		again[i] = e
	}
	if got := Assign(again, nodes); !reflect.DeepEqual(got.Status, first.Status) {
		t.Fatalf("second pass moved IPs:\n got  %v\n want %v", got.Status, first.Status)
	}
	// Sanity: the placement itself.
	want := map[string][]Item{
		"e1": {it("n1", "172.18.0.31"), it("n2", "fc00::31")},
		"e2": {it("n3", "172.18.0.32"), it("n1", "172.18.0.33"), it("n2", "172.18.0.34")},
		"e3": {it("n1", "fc00::35")},
		"e4": {it("n3", "172.18.0.36")},
	}
	checkStatus(t, first.Status, want)
}

// TestNodeSelector: an EgressIP's node selector restricts its holders (ANDed with
// the egress-assignable label); a selector edit moves only the IPs whose holder it
// no longer selects; a selector that does not compile places nothing.
func TestNodeSelector(t *testing.T) {
	zone := func(z string) func(*Node) { return func(n *Node) { n.Labels = map[string]string{"zone": z} } }
	a := with(node("node-a", "172.18.0.11/16"), zone("a"))
	b := with(node("node-b", "172.18.0.12/16"), zone("b"))
	c := with(node("node-c", "172.18.0.13/16"), zone("b"))
	d := with(node("node-d", "172.18.0.14/16"), func(n *Node) { n.Labels = map[string]string{"zone": "a"}; n.Labelled = false })
	nodes := []Node{a, b, c, d}
	sel := func(z string) labels.Selector { return labels.SelectorFromSet(labels.Set{"zone": z}) }

	inA := eip("in-a", 0, []string{"172.18.0.50", "172.18.0.51"})
	inA.NodeSelector = sel("a")
	inB := eip("in-b", 1, []string{"172.18.0.60", "172.18.0.61"})
	inB.NodeSelector = sel("b")
	res := Assign([]EgressIP{inA, inB}, nodes)
	if want := []Item{it("node-a", "172.18.0.50")}; !reflect.DeepEqual(res.Status["in-a"], want) {
		t.Errorf("in-a: %v, want %v (node-d is in zone a but not labelled)", res.Status["in-a"], want)
	}
	if want := []Item{it("node-b", "172.18.0.60"), it("node-c", "172.18.0.61")}; !reflect.DeepEqual(res.Status["in-b"], want) {
		t.Errorf("in-b: %v, want %v", res.Status["in-b"], want)
	}
	if len(res.Problems) != 1 || res.Problems[0].IP != "172.18.0.51" || res.Problems[0].Cause != CauseCapacity {
		t.Errorf("problems %+v, want 172.18.0.51 NoCapacity (one IP per node)", res.Problems)
	}

	// Swap the selectors: every IP moves to the other zone.
	inA.Status, inB.Status = res.Status["in-a"], res.Status["in-b"]
	inA.NodeSelector, inB.NodeSelector = sel("b"), sel("a")
	res = Assign([]EgressIP{inA, inB}, nodes)
	for _, it := range res.Status["in-a"] {
		if it.Node == "node-a" {
			t.Errorf("in-a kept %v on a node its selector no longer selects", it)
		}
	}
	if want := []Item{it("node-a", "172.18.0.60")}; !reflect.DeepEqual(res.Status["in-b"], want) {
		t.Errorf("in-b after the swap: %v, want %v", res.Status["in-b"], want)
	}

	// Widening the selector keeps what is valid.
	inB.Status = res.Status["in-b"]
	inB.NodeSelector = nil
	res = Assign([]EgressIP{inB}, nodes)
	if got := res.Status["in-b"]; len(got) != 2 || got[0] != it("node-a", "172.18.0.60") {
		t.Errorf("widened: %v, want 172.18.0.60 kept on node-a and 172.18.0.61 placed", got)
	}

	bad := eip("bad", 0, []string{"172.18.0.70"})
	bad.NodeSelectorErr = errors.New("bad operator")
	res = Assign([]EgressIP{bad}, nodes)
	if len(res.Status["bad"]) != 0 || len(res.Problems) != 1 || res.Problems[0].Cause != CauseInvalidSelector {
		t.Errorf("invalid selector: status %v problems %+v", res.Status["bad"], res.Problems)
	}
}
