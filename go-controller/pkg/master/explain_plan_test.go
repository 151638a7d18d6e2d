package master

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	eipinformers "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/informers/externalversions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// planScenario is a cluster as the API has it: what the sync of each role and explain both read.
type planScenario struct {
	name         string
	mode         gwmode.Mode
	interconnect bool // a zone controller per node (the zones are the nodes); else the centralized master
	nodes        []*corev1.Node
	eips         []*egressipv1.EgressIP
	pods         []*corev1.Pod
}

var (
	planSubnets = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
	planJoins   = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")}
)

// syncRows is what the sync of the writer of zone's rows ("" = the centralized master) plans from sc at now: a
// controller of that role, over informer caches holding sc's objects, runs the sync's stages before its planRows
// (readNodes, decide) and then plan as (*controller).planRows does, in a full sync at now-defaultDoubtGrace-1ms and
// again at now (a node claim not believed is reported once it lasted the grace).
func syncRows(t *testing.T, sc planScenario, zone string, now time.Time) nbstate.State {
	t.Helper()
	kubeInf := informers.NewSharedInformerFactory(kubefake.NewSimpleClientset(), 0)
	eipInf := eipinformers.NewSharedInformerFactory(eipfake.NewSimpleClientset(), 0)
	role := RoleMaster
	if sc.interconnect {
		role = RoleZone
	}
	s := settings{Params: Params{Role: role, Zone: zone, ClusterSubnets: planSubnets, JoinSubnets: planJoins,
		Recorder: record.NewFakeRecorder(1000), Reachability: allReachable{}, doubtGrace: defaultDoubtGrace},
		mode: sc.mode, interconnect: sc.interconnect, linger: defaultReleaseLinger,
		noNB: true} // no NB client here: statusInput reads no routers (they only decide conditions)
	c, err := newController(s, nil, newMetrics(prometheus.NewRegistry()), kubeInf, eipInf)
	if err != nil {
		t.Fatal(err)
	}
	add := func(idx interface{ Add(any) error }, obj any) {
		if err := idx.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range sc.nodes {
		add(kubeInf.Core().V1().Nodes().Informer().GetIndexer(), n)
	}
	for _, ns := range []*corev1.Namespace{namespace("prod", prodNS), namespace("dev", nil)} {
		add(kubeInf.Core().V1().Namespaces().Informer().GetIndexer(), ns)
	}
	for _, p := range sc.pods {
		add(kubeInf.Core().V1().Pods().Informer().GetIndexer(), p)
	}
	for _, e := range sc.eips {
		add(eipInf.K8s().V1().EgressIPs().Informer().GetIndexer(), e)
	}
	var rows nbRows
	for _, at := range []time.Time{now.Add(-defaultDoubtGrace - time.Millisecond), now} {
		r := &round{began: at, full: true, dirty: newDirty()}
		if r.snap, err = c.snapshot(); err != nil {
			t.Fatal(err)
		}
		c.readNodes(r)
		c.decide(r)
		if len(r.decision.writes) > 0 {
			t.Fatalf("%s: the status is not what assignment computes (%d writes): the scenario is not a settled cluster", sc.name, len(r.decision.writes))
		}
		if rows, _, err = plan(c.serving, c.planFor(r, r.written)); err != nil {
			t.Fatal(err)
		}
	}
	return rows.desired
}

// explainIn is the API objects of sc as `ovnkube egressip explain` reads them, with each zone's NB (or the one
// NB) holding the rows the sync planned.
func explainIn(sc planScenario, now time.Time, nb map[string]nbstate.State) ExplainInput {
	in := ExplainInput{Mode: sc.mode, ClusterSubnets: planSubnets, JoinSubnets: planJoins, EgressIPs: sc.eips, Nodes: sc.nodes,
		Namespaces: []*corev1.Namespace{namespace("prod", prodNS), namespace("dev", nil)}, Pods: sc.pods, Now: now}
	cur := func(st nbstate.State) *nbstate.Current { return &nbstate.Current{Rows: st} }
	if sc.interconnect {
		in.ZoneNB = map[string]*nbstate.Current{}
		for z, st := range nb {
			in.ZoneNB[z] = cur(st)
		}
	} else {
		in.NB = cur(nb[""])
	}
	return in
}

// TestExplainPlansAsTheSync: for each scenario, the rows explain (and `ovnkube egressip migrate`, PlannedRows)
// computes for the one NB or for each zone are the rows the sync of the master or of that zone's controller plans
// from the same API objects, and explain finds each EgressIP's rows in such an NB neither missing nor extra.
func TestExplainPlansAsTheSync(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	status := func(e *egressipv1.EgressIP, pairs ...string) *egressipv1.EgressIP {
		e.Status.Items = items(pairs...)
		return e
	}
	strict := func(e *egressipv1.EgressIP) *egressipv1.EgressIP { e.Spec.Strict = true; return e }
	on := func(p *corev1.Pod, node string, created time.Time) *corev1.Pod {
		p.Spec.NodeName, p.CreationTimestamp = node, metav1.NewTime(created)
		return p
	}
	anno := func(key, value string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Annotations[key] = value }
	}
	webPods := func() []*corev1.Pod {
		return []*corev1.Pod{on(pod("prod", "web1", "10.244.1.5", web), "node1", now), on(pod("prod", "web2", "10.244.3.6", web), "node3", now),
			on(pod("prod", "db", "10.244.2.7", map[string]string{"app": "db"}), "node2", now), on(pod("dev", "web3", "10.244.2.8", web), "node2", now)}
	}
	scenarios := []planScenario{
		{name: "shared: two EgressIPs, a pod selected by both", mode: gwmode.Shared,
			nodes: []*corev1.Node{node(1, true), node(2, true), node(3, false)},
			eips: []*egressipv1.EgressIP{status(egressIP("first", 0, []string{"172.18.0.33", "172.18.0.55"}, prodNS, web), "172.18.0.33", "node1", "172.18.0.55", "node2"),
				status(egressIP("second", 1, []string{"172.18.0.44"}, prodNS, nil), "172.18.0.44", "node1")},
			pods: webPods()},
		{name: "local: the holder is ready", mode: gwmode.Local,
			nodes: []*corev1.Node{withNode(node(1, true), ready("172.18.0.33")), node(2, false), node(3, false)},
			eips:  []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node1")},
			pods:  webPods()},
		{name: "local: the new holder is not ready, the old one lingers until the end it published", mode: gwmode.Local,
			nodes: []*corev1.Node{withNode(node(1, false), ready(), lingering(map[string]time.Time{"172.18.0.33": later})), withNode(node(2, true), ready()), node(3, false)},
			eips:  []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node2")},
			pods:  webPods()},
		{name: "local: the old holder still lists the moved IP ready and never publishes an end", mode: gwmode.Local,
			nodes: []*corev1.Node{withNode(node(1, false), ready("172.18.0.33")), withNode(node(2, true), ready()), node(3, false)},
			eips:  []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node2")},
			pods:  webPods()},
		{name: "shared: two pod objects share an IP, the newer owns it", mode: gwmode.Shared,
			nodes: []*corev1.Node{node(1, true), node(2, true), node(3, false)},
			eips: []*egressipv1.EgressIP{status(egressIP("web", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node1"),
				status(egressIP("db", 1, []string{"172.18.0.44"}, prodNS, map[string]string{"app": "db"}), "172.18.0.44", "node2")},
			pods: []*corev1.Pod{on(pod("prod", "old-web", "10.244.1.5", web), "node1", now.Add(-time.Hour)),
				on(pod("prod", "new-db", "10.244.1.5", map[string]string{"app": "db"}), "node1", now)}},
		{name: "shared: strict with no holder drops", mode: gwmode.Shared,
			nodes: []*corev1.Node{node(1, false), node(2, false), node(3, false)},
			eips:  []*egressipv1.EgressIP{strict(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web))},
			pods:  webPods()},
		{name: "shared: a node claims a held egress IP as a host address", mode: gwmode.Shared,
			nodes: []*corev1.Node{node(1, true), node(2, false), withNode(node(3, false), anno(annotations.HostCIDRs, `["172.18.0.33/16"]`))},
			eips:  []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node1")},
			pods:  webPods()},
		{name: "interconnect, shared: zones reroute to the holder's zone", mode: gwmode.Shared, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, true), anno(annotations.EgressIPsSNATReady, `["172.18.0.33"]`)), icNode(2, false), icNode(3, false)},
			eips:  []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node1")},
			pods:  webPods()},
		{name: "interconnect, shared: the old holder's zone lists the IP lingering until the end it published", mode: gwmode.Shared, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, false), lingering(map[string]time.Time{"172.18.0.33": later})),
				withNode(icNode(2, true), anno(annotations.EgressIPsSNATReady, `[]`)), icNode(3, false)},
			eips: []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node2")},
			pods: webPods()},
		{name: "interconnect, shared: past the published end, in the grace: the old holder's zone keeps its rows, nobody reroutes there", mode: gwmode.Shared, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, false), lingering(map[string]time.Time{"172.18.0.33": now.Add(-time.Second)})),
				withNode(icNode(2, true), anno(annotations.EgressIPsSNATReady, `[]`)), icNode(3, false)},
			eips: []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node2")},
			pods: webPods()},
		{name: "interconnect, local: the holder is ready in both halves", mode: gwmode.Local, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, true), ready("172.18.0.33"), anno(annotations.EgressIPsSNATReady, `["172.18.0.33"]`)), icNode(2, false), icNode(3, false)},
			eips:  []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node1")},
			pods:  webPods()},
		{name: "interconnect, local: the old holder lingers until the end it published", mode: gwmode.Local, interconnect: true,
			nodes: []*corev1.Node{withNode(icNode(1, false), ready(), lingering(map[string]time.Time{"172.18.0.33": later})),
				withNode(icNode(2, true), ready()), icNode(3, false)},
			eips: []*egressipv1.EgressIP{status(egressIP("eip", 0, []string{"172.18.0.33"}, prodNS, web), "172.18.0.33", "node2")},
			pods: webPods()},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			zones := []string{""}
			if sc.interconnect {
				zones = []string{"node1", "node2", "node3"}
			}
			synced := map[string]nbstate.State{}
			for _, z := range zones {
				synced[z] = syncRows(t, sc, z, now)
			}
			in := explainIn(sc, now, synced)
			var zoneArg []string
			if sc.interconnect {
				zoneArg = zones
			}
			planned, drift, err := PlannedRows(in, zoneArg)
			if err != nil {
				t.Fatal(err)
			}
			if len(drift) > 0 { // the master keeps this status (syncRows): explain's assignment must too
				t.Errorf("explain's assignment drifts from the status the master keeps: %v", drift)
			}
			for _, z := range zones {
				if got, want := nbstate.Dump(planned[z]), nbstate.Dump(synced[z]); !slices.Equal(got, want) {
					t.Errorf("zone %q: explain plans\n  %s\nthe sync plans\n  %s", z, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
			}
			for _, e := range sc.eips {
				r, err := ExplainEgressIP(in, e.Name)
				if err != nil {
					t.Fatal(err)
				}
				if r.NB == nil || len(r.NB.Missing)+len(r.NB.Extra) > 0 {
					t.Errorf("explain %s over the sync's rows: %s", e.Name, rowsReport(r.NB))
				}
			}
		})
	}
}

func rowsReport(r *RowsReport) string {
	if r == nil {
		return "rows not compared"
	}
	return fmt.Sprintf("missing %q, extra %q", r.Missing, r.Extra)
}
