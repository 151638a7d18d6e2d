package conditions

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func node(name, network string, f ...func(*assign.Node)) assign.Node {
	p := netip.MustParsePrefix(network)
	n := assign.Node{Name: name, Labelled: true, Ready: true, Reachable: true, Labels: map[string]string{"zone": "a"},
		Addresses: []netip.Addr{p.Addr()},
		Egress:    annotations.EgressConfig{Network: annotations.DualPrefix{V4: p}, CapacityV4: -1, CapacityV6: -1, CapacityTotal: -1}}
	for _, g := range f {
		g(&n)
	}
	return n
}

func notLabelled(n *assign.Node) { n.Labelled = false }
func notReady(n *assign.Node)    { n.Ready = false }
func unreachable(n *assign.Node) { n.Reachable = false }
func zoneB(n *assign.Node)       { n.Labels = map[string]string{"zone": "b"} }
func noRoom(n *assign.Node)      { n.Egress.CapacityV4 = 0 }
func badConfig(n *assign.Node) {
	n.ConfigErr = errors.New("annotation k8s.ovn.org/node-gateway-router-lrp-ifaddr missing")
}

// TestConditionReasons runs assignment and Compute on one requested IP per case and
// checks the IP's condition reason and the Ready condition.
func TestConditionReasons(t *testing.T) {
	zoneA := labels.SelectorFromSet(labels.Set{"zone": "a"})
	tests := []struct {
		name       string
		spec       []string
		nodes      []assign.Node
		selector   labels.Selector
		selErr     error
		other      []string // spec of an older EgressIP
		notProg    map[string]string
		wantReason string // reason of the last spec entry's condition
		wantType   string
		wantReady  string
	}{
		{"assigned and programmed", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, nil, nil,
			ReasonAssigned, "Assigned-172.18.0.50", ReasonProgrammed},
		{"assigned, not programmed", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, nil,
			map[string]string{"172.18.0.50": "node has not reported it ready"}, ReasonAssigned, "Assigned-172.18.0.50", ReasonNotProgrammed},
		{"not an IP", []string{"not-an-ip"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, nil, nil,
			string(assign.CauseNotAnIP), "Assigned-entry0", ReasonNotAssigned},
		{"unsupported", []string{"127.0.0.1"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, nil, nil,
			string(assign.CauseUnsupported), "Assigned-127.0.0.1", ReasonNotAssigned},
		{"duplicate written two ways", []string{"fd00::1", "fd00:0::1"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, nil, nil,
			string(assign.CauseDuplicate), "Assigned-entry1", ReasonNotAssigned},
		{"equal to a node address", []string{"172.18.0.11"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, nil, nil,
			string(assign.CauseNodeAddress), "Assigned-172.18.0.11", ReasonNotAssigned},
		{"claimed by another EgressIP", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, []string{"172.18.0.50"}, nil,
			string(assign.CauseClaimed), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"no node with a matching network", []string{"10.99.0.1"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, nil, nil,
			string(assign.CauseNoMatchingNetwork), "Assigned-10.99.0.1", ReasonNotAssigned},
		{"candidates not labelled", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16", notLabelled), node("n2", "172.18.0.12/16", notLabelled)}, nil, nil, nil, nil,
			string(assign.CauseNodesNotLabelled), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"candidates excluded by the node selector", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16", zoneB)}, zoneA, nil, nil, nil,
			string(assign.CauseNodesExcluded), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"invalid node selector", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, errors.New("bad operator"), nil, nil,
			string(assign.CauseInvalidSelector), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"candidates NotReady", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16", notReady)}, nil, nil, nil, nil,
			string(assign.CauseNodesNotReady), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"candidates unreachable", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16", unreachable)}, nil, nil, nil, nil,
			string(assign.CauseNodesUnreachable), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"candidates misconfigured", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16", badConfig)}, nil, nil, nil, nil,
			string(assign.CauseNodesConfigInvalid), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"candidates excluded for different reasons", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16", notReady), node("n2", "172.18.0.12/16", unreachable)}, nil, nil, nil, nil,
			string(assign.CauseNoEligibleNode), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"capacity", []string{"172.18.0.50"}, []assign.Node{node("n1", "172.18.0.11/16", noRoom)}, nil, nil, nil, nil,
			string(assign.CauseCapacity), "Assigned-172.18.0.50", ReasonNotAssigned},
		{"one IP per node", []string{"172.18.0.50", "172.18.0.51"}, []assign.Node{node("n1", "172.18.0.11/16")}, nil, nil, nil, nil,
			string(assign.CauseCapacity), "Assigned-172.18.0.51", ReasonNotAssigned},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := assign.EgressIP{Name: "e", Created: t0.Add(time.Second), Spec: tc.spec, NodeSelector: tc.selector, NodeSelectorErr: tc.selErr}
			in := []assign.EgressIP{e}
			if tc.other != nil {
				in = append(in, assign.EgressIP{Name: "older", Created: t0, Spec: tc.other})
			}
			res := assign.Assign(in, tc.nodes)
			var items []egressipv1.EgressIPStatusItem
			for _, it := range res.Status["e"] {
				items = append(items, egressipv1.EgressIPStatusItem{Node: it.Node, EgressIP: it.EgressIP})
			}
			var problems []assign.Problem
			for _, p := range res.Problems {
				if p.EgressIP == "e" {
					problems = append(problems, p)
				}
			}
			summary, conds := Compute(Input{Generation: 7, Spec: tc.spec, Items: items, Problems: problems, NotProgrammed: tc.notProg})
			if len(conds) != len(tc.spec)+1 {
				t.Fatalf("conditions %+v, want Ready + one per entry", conds)
			}
			last := conds[len(conds)-1]
			if last.Type != tc.wantType || last.Reason != tc.wantReason {
				t.Errorf("condition %s/%s (%s), want %s/%s", last.Type, last.Reason, last.Message, tc.wantType, tc.wantReason)
			}
			ready := conds[0]
			if ready.Type != TypeReady || ready.Reason != tc.wantReady {
				t.Errorf("Ready %s/%s (%s), want reason %s", ready.Type, ready.Reason, ready.Message, tc.wantReady)
			}
			if (ready.Status == metav1.ConditionTrue) != (tc.wantReady == ReasonProgrammed) {
				t.Errorf("Ready status %s with reason %s", ready.Status, ready.Reason)
			}
			for _, c := range conds {
				if c.ObservedGeneration != 7 || c.Message == "" {
					t.Errorf("condition %+v: want observedGeneration 7 and a message", c)
				}
				if errs := metav1ValidateType(c.Type); errs != "" {
					t.Errorf("condition type %q invalid: %s", c.Type, errs)
				}
			}
			wantAssigned := len(items)
			if !strings.HasPrefix(summary, string(rune('0'+wantAssigned))+"/") {
				t.Errorf("summary %q with %d items", summary, wantAssigned)
			}
		})
	}
}

func TestAssignedType(t *testing.T) {
	for raw, want := range map[string]string{
		"172.18.0.33": "Assigned-172.18.0.33",
		"fd00::1":     "Assigned-fd00--1",
		"fd00:0::1":   "Assigned-fd00--1",
		"fd00::":      "Assigned-fd00--0",
		"::1":         "Assigned---1",
		"bogus":       "Assigned-entry3",
	} {
		if got := AssignedType(raw, 3); got != want {
			t.Errorf("AssignedType(%q) = %q, want %q", raw, got, want)
		}
		if errs := metav1ValidateType(want); errs != "" {
			t.Errorf("%q: %s", want, errs)
		}
	}
}

func TestMergeWritesOnlyOnChange(t *testing.T) {
	_, want := Compute(Input{Generation: 1, Spec: []string{"172.18.0.50"},
		Items: []egressipv1.EgressIPStatusItem{{Node: "n1", EgressIP: "172.18.0.50"}}})
	t1 := metav1.NewTime(t0)
	first, changed := Merge(nil, want, t1)
	if !changed || !first[0].LastTransitionTime.Equal(&t1) {
		t.Fatalf("first merge: changed=%v %+v", changed, first)
	}
	t2 := metav1.NewTime(t0.Add(time.Minute))
	again, changed := Merge(first, want, t2)
	if changed || !again[0].LastTransitionTime.Equal(&t1) {
		t.Errorf("same content: changed=%v, LTT %v (want %v kept)", changed, again[0].LastTransitionTime, t1)
	}
	// Message change only: written, transition time kept.
	_, moved := Compute(Input{Generation: 1, Spec: []string{"172.18.0.50"},
		Items: []egressipv1.EgressIPStatusItem{{Node: "n2", EgressIP: "172.18.0.50"}}})
	m, changed := Merge(first, moved, t2)
	if !changed || !m[1].LastTransitionTime.Equal(&t1) {
		t.Errorf("moved: changed=%v, LTT %v", changed, m[1].LastTransitionTime)
	}
	// Status flip: new transition time.
	_, lost := Compute(Input{Generation: 1, Spec: []string{"172.18.0.50"},
		Problems: []assign.Problem{{Index: 0, Cause: assign.CauseNodesNotReady, Message: "x"}}})
	l, changed := Merge(first, lost, t2)
	if !changed || !l[0].LastTransitionTime.Equal(&t2) || l[0].Status != metav1.ConditionFalse {
		t.Errorf("lost: changed=%v, %+v", changed, l[0])
	}
}

// metav1ValidateType applies the apiserver's rule for condition types (a
// qualified name).
func metav1ValidateType(typ string) string {
	return strings.Join(validation.IsQualifiedName(typ), "; ")
}
