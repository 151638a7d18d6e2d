package master

import (
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	eipinformers "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/informers/externalversions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
)

// TestNodeParser: a node is parsed again whenever it may have changed (new
// resourceVersion or UID, or no resourceVersion at all), reachability is asked
// on every call, and nodes that went are forgotten.
func TestNodeParser(t *testing.T) {
	reach := newFakeReach()
	p := newNodeParser(factsLayout{mode: gwmode.Shared}, reach)
	versioned := func(i int, rv string, uid types.UID) *corev1.Node {
		n := node(i, true)
		n.ResourceVersion, n.UID = rv, uid
		return n
	}
	n1 := versioned(1, "10", "u1")
	f := p.parse([]*corev1.Node{n1})
	if !f[0].assign.Reachable || f[0].assign.ConfigErr != nil || len(f[0].nb.JoinIPs) != 1 {
		t.Fatalf("first parse: %+v", f[0])
	}
	want := parseNode(n1, gwmode.Shared, reach)
	if !reflect.DeepEqual(f[0], want) {
		t.Fatalf("cached facts differ from a parse:\n got  %+v\n want %+v", f[0], want)
	}

	// Same version: same facts, but reachability is asked again.
	reach.set("node1", false)
	if f = p.parse([]*corev1.Node{n1}); f[0].assign.Reachable {
		t.Fatalf("reachability not asked again: %+v", f[0].assign)
	}
	reach.set("node1", true)

	broken := func(n *corev1.Node) *corev1.Node {
		n.Annotations[annotations.GatewayRouterLRPIfAddr] = "not json"
		return n
	}
	cases := []struct {
		name     string
		beforeRV string // the version parsed first (UID u1, annotations fine)
		n        *corev1.Node
	}{
		{"new resourceVersion", "10", broken(versioned(1, "11", "u1"))},
		{"node deleted and created again with the same resourceVersion", "10", broken(versioned(1, "10", "u2"))},
		{"no resourceVersion (a client that does not version)", "", broken(versioned(1, "", "u1"))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newNodeParser(factsLayout{mode: gwmode.Shared}, reach)
			if f := p.parse([]*corev1.Node{versioned(1, tc.beforeRV, "u1")}); f[0].assign.ConfigErr != nil {
				t.Fatalf("first parse: %v", f[0].assign.ConfigErr)
			}
			if f := p.parse([]*corev1.Node{tc.n}); f[0].assign.ConfigErr == nil {
				t.Fatalf("the changed node was not parsed again: %+v", f[0].assign)
			}
		})
	}

	p.parse([]*corev1.Node{versioned(2, "5", "u3")})
	if _, ok := p.seen["node1"]; ok {
		t.Fatalf("node1 went and is still cached")
	}
}

// TestAssignMemo: the memo answers assign.Assign's result for equal inputs and
// computes again for any difference.
func TestAssignMemo(t *testing.T) {
	var m assignMemo
	nodes := []assign.Node{decideNode("node1"), decideNode("node2")}
	eips := func(holder string) []assign.EgressIP {
		e := assign.EgressIP{Name: "e1", Spec: []string{"172.18.0.100"}}
		if holder != "" {
			e.Status = []assign.Item{{EgressIP: "172.18.0.100", Node: holder}}
		}
		return []assign.EgressIP{e}
	}
	check := func(in []assign.EgressIP, nodes []assign.Node) assign.Result {
		t.Helper()
		got, want := m.assign(in, nodes), assign.Assign(in, nodes)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("memo %+v, assign %+v", got, want)
		}
		return got
	}
	check(eips(""), nodes)
	check(eips(""), nodes)
	if r := check(eips("node2"), nodes); r.Status["e1"][0].Node != "node2" {
		t.Fatalf("status held on node2 not kept: %+v", r)
	}
	down := []assign.Node{decideNode("node1"), decideNode("node2")}
	down[1].Reachable = false
	if r := check(eips("node2"), down); r.Status["e1"][0].Node != "node1" {
		t.Fatalf("node2 unreachable, IP not moved: %+v", r)
	}
}

// TestSnapshotNodeOrder: every snapshot lists the nodes in name order, whatever
// order the lister returns (assignment's memo compares its inputs in order: a
// lister order that changed from sync to sync made it compute again every time).
func TestSnapshotNodeOrder(t *testing.T) {
	kubeInf := informers.NewSharedInformerFactory(kubefake.NewSimpleClientset(), 0)
	eipInf := eipinformers.NewSharedInformerFactory(eipfake.NewSimpleClientset(), 0)
	c, err := newController(settings{mode: gwmode.Shared, Params: Params{Reachability: newFakeReach()}},
		nil, newMetrics(prometheus.NewRegistry()), kubeInf, eipInf)
	if err != nil {
		t.Fatal(err)
	}
	idx := kubeInf.Core().V1().Nodes().Informer().GetIndexer()
	var want []string
	for i := 1; i <= 40; i++ {
		n := node(i, true)
		want = append(want, n.Name)
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(want)
	for range 5 {
		s, err := c.snapshot()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, n := range s.nodes {
			got = append(got, n.Name)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("snapshot nodes %v, want %v", got, want)
		}
	}
}

// TestSelectionSigCache: an EgressIP's selection signature is the uncached one
// whatever changed: selectors (new resourceVersion), status, or the object
// (deleted and created again, same resourceVersion, new UID).
func TestSelectionSigCache(t *testing.T) {
	s := newServing()
	e := egressIP("e1", 0, []string{"172.18.0.100"}, prodNS, web)
	e.ResourceVersion = "1"
	check := func(what string, e *egressipv1.EgressIP) selectionSig {
		t.Helper()
		got, want := s.sigOf(e), sigOf(e)
		if got != want {
			t.Fatalf("%s: cached signature %+v, want %+v", what, got, want)
		}
		return got
	}
	first := check("first", e)
	check("again", e)

	edited := e.DeepCopy()
	edited.ResourceVersion = "2"
	edited.Spec.PodSelector.MatchLabels = map[string]string{"app": "db"}
	if check("selector edited", edited) == first {
		t.Fatalf("a selector edit left the signature unchanged")
	}
	assigned := edited.DeepCopy()
	assigned.ResourceVersion = "3"
	assigned.Status.Items = items("172.18.0.100", "node1")
	if !check("status written", assigned).assigned {
		t.Fatalf("assigned not set")
	}
	recreated := egressIP("e1", 0, []string{"172.18.0.100"}, prodNS, map[string]string{"app": "api"})
	recreated.ResourceVersion, recreated.UID = "3", "uid-other"
	check("deleted and created again", recreated)
}
