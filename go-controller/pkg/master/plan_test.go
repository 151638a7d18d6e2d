package master

import (
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// TestPlanTouchesWhatChanged: each sync computes rows for the pods its change
// concerns and no others; the rows are those of a full computation.
func TestPlanTouchesWhatChanged(t *testing.T) {
	cache := objectCache{pods: map[string]*corev1.Pod{}, namespaces: map[string]*corev1.Namespace{}}
	addPod := func(ns, name, ip string, lbl map[string]string) {
		cache.pods[ns+"/"+name] = pod(ns, name, ip, lbl)
	}
	cache.namespaces["a"] = namespace("a", prodNS)
	cache.namespaces["b"] = namespace("b", map[string]string{"env": "dev"})
	addPod("a", "p1", "10.244.1.5", web)
	addPod("a", "p2", "10.244.1.6", web)
	addPod("a", "p3", "10.244.1.7", map[string]string{"app": "db"})
	addPod("b", "q1", "10.244.2.5", web)
	nodes := map[string]nbstate.Node{
		"node1": {Name: "node1", JoinIPs: []netip.Addr{netip.MustParseAddr("100.64.0.2")}},
		"node2": {Name: "node2", JoinIPs: []netip.Addr{netip.MustParseAddr("100.64.0.3")}},
	}
	withStatus := func(e *egressipv1.EgressIP, node string) *egressipv1.EgressIP {
		e.Status.Items = []egressipv1.EgressIPStatusItem{{Node: node, EgressIP: e.Spec.EgressIPs[0]}}
		return e
	}
	e1 := withStatus(egressIP("e1", 1, []string{"172.18.0.33"}, prodNS, web), "node1")
	eips := []*egressipv1.EgressIP{e1}

	s := newServing()
	steps := []struct {
		name   string
		change func() dirty
		full   bool
		want   []string // pods whose rows were computed
	}{
		{"full: every selected pod", func() dirty { return newDirty() }, true, []string{"a/p1", "a/p2"}},
		{"nothing changed", func() dirty { return newDirty() }, false, nil},
		{"pod added", func() dirty {
			addPod("a", "p4", "10.244.1.8", web)
			d := newDirty()
			d.pods["a/p4"] = true
			return d
		}, false, []string{"a/p4"}},
		{"pod of no EgressIP relabelled, still not selected", func() dirty {
			addPod("a", "p3", "10.244.1.7", map[string]string{"app": "cache"})
			d := newDirty()
			d.pods["a/p3"] = true
			return d
		}, false, nil},
		{"namespace relabelled into the selection", func() dirty {
			cache.namespaces["b"] = namespace("b", map[string]string{"env": "prod", "kubernetes.io/metadata.name": "b"})
			d := newDirty()
			d.namespaces["b"] = true
			return d
		}, false, []string{"b/q1"}},
		{"holder moved: every pod of that EgressIP", func() dirty {
			eips = []*egressipv1.EgressIP{withStatus(egressIP("e1", 1, []string{"172.18.0.33"}, prodNS, web), "node2")}
			return newDirty()
		}, false, []string{"a/p1", "a/p2", "a/p4", "b/q1"}},
		{"pod deleted", func() dirty {
			delete(cache.pods, "a/p2")
			d := newDirty()
			d.pods["a/p2"] = true
			return d
		}, false, []string{"a/p2"}},
		{"an older EgressIP for namespace b: the pods it takes", func() dirty {
			e0 := withStatus(egressIP("e0", 0, []string{"172.18.0.44"}, nil, web), "node1")
			e0.Spec.NamespaceSelector = metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "b"}}
			eips = append(eips, e0)
			return newDirty()
		}, false, []string{"b/q1"}},
	}
	for _, st := range steps {
		d := st.change()
		rank := selection.Rank(eips)
		in := nbstate.Input{Mode: gwmode.Shared, ClusterSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, Nodes: nodes}
		r, _, err := plan(s, planInput{dirty: d, full: st.full, nb: in, eips: eips, rank: rank, now: time.Now(), cache: cache})
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		got := slices.Sorted(maps.Keys(r.pods))
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: rows computed for %v, want %v", st.name, got, st.want)
		}
		// The memory now gives, for every pod, the rows a full computation gives, and
		// the rows computed are those of the full computation.
		all := newServing()
		fr, _, err := plan(all, planInput{full: true, nb: in, eips: eips, rank: rank, now: time.Now(), cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		want := reroutesOf(fr.desired)
		for _, got := range reroutesOf(r.desired) {
			if !slices.Contains(want, got) {
				t.Errorf("%s: planned %q, not a row of the full plan\n %v", st.name, got, want)
			}
		}
		if mem := memoryReroutes(s); !slices.Equal(mem, servedOf(want)) {
			t.Errorf("%s: memory serves %v, want %v", st.name, mem, servedOf(want))
		}
	}
}

func reroutesOf(st nbstate.State) []string {
	var out []string
	for k, p := range st.Policies {
		if k.IDs.Rule == nbstate.RuleReroute {
			out = append(out, k.IDs.Pod+" "+k.IDs.Name+" "+p.Match+" "+strings.Join(p.Nexthops, ","))
		}
	}
	sort.Strings(out)
	return out
}

func servedOf(reroutes []string) []string {
	var out []string
	for _, r := range reroutes {
		f := strings.Fields(r)
		out = append(out, f[0]+" "+f[1])
	}
	return out
}

// memoryReroutes lists, from the serving memory, the pods with rows and their EgressIP.
func memoryReroutes(s *serving) []string {
	var out []string
	for k := range s.servedIPs {
		out = append(out, k+" "+s.pods[k].eip)
	}
	sort.Strings(out)
	return out
}
