package scale

// The interconnect layout at scale (make scale-ic, docs/interconnect.md "Scale"):
// one real kube-apiserver, N simulated nodes with the interconnect node facts, the
// real cluster manager process (no NB) and a SAMPLE of real zones, each with its
// own real ovsdb-server holding that node's topology and a real zone controller
// process (--init-ovnkube-controller NODE). The sample is three zones:
//
//	node1 (sampleLost)  holds egress IPs after assign and is unlabelled in node-loss;
//	node2 (sampleTaker) is labelled egress-assignable only after assign, so it holds
//	                    none and the cluster manager (fewest first) gives it moved IPs;
//	node3 (samplePods)  is never egress-assignable: its zone has only pods (pod-add
//	                    adds its pods there).
//
// Every other zone is simulated: the harness publishes, on each of those Nodes,
// egress-ips-snat-ready = the egress IPs the EgressIP status gives it (following
// its EgressIP informer), as a zone controller would once its SNAT rows are in.
//
// Convergence of a sampled zone: the harness' expectations are met by what its
// informers see (every EgressIP's status complete and off lost nodes, every holder
// listing its IPs SNAT-ready, the pods it created with their IPs), and the zone's
// NB, as the harness' libovsdb monitor of it holds it (nbstate.ReadCurrent), has
// no difference (nbstate.Diff) from what master.PlannedRows (the zone controller's
// own planning, as explain and migrate run it) computes for that zone from those
// informers' EgressIPs, pods, namespaces and nodes: the product's own rules and
// comparison, not a copy of them. It is checked on change only: on an event of one
// of the zone monitors or informers, or a change of the harness' expectations.

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8scache "k8s.io/client-go/tools/cache"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/metrics"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// The sampled zones (node indexes, 1-based): see the package comment above.
const (
	sampleLost  = 1
	sampleTaker = 2
	samplePods  = 3
)

// ICPhase is what one phase measured in the interconnect layout.
type ICPhase struct {
	Name string
	// Zones, in sample order.
	Zones []ZonePhase
	// EndToEnd is from the change (its last API write) to the last sampled zone converged.
	EndToEnd time.Duration
	// StatusFirst and StatusLast: from the change to the first and the last EgressIP
	// status change the harness' informer saw (0: none).
	StatusFirst, StatusLast time.Duration
	// StatusUpdates, Syncs: the cluster manager's, over the phase (its metrics).
	StatusUpdates, Syncs float64
	// CM is the cluster manager's memory after the phase.
	CM memory
	// Moved egress IPs (status before and after).
	Moved int
	// PodAdd (pod-add): per pod, from its status write with its IP returning until its
	// zone (samplePods) converged; APIWrites: how long that write took. Empty when
	// that zone is simulated.
	PodAdd, APIWrites []time.Duration
	// SimPublished: from the change to the last batch of the harness' writes of
	// the simulated zones' egress-ips-snat-ready done before the pods-only zone
	// converged (0: none, or that zone is simulated).
	SimPublished time.Duration
}

// ZonePhase is what one sampled zone did in a phase.
type ZonePhase struct {
	Node string
	// Converged: from the change to the arrival of the zone's last NB event before
	// the check found it converged (its rows final from then on); NoChange: its NB
	// did not change (Converged 0).
	Converged time.Duration
	NoChange  bool
	// NBTransactions and Syncs its zone controller made (its metrics).
	NBTransactions, Syncs float64
	// Rows: the rows it owns in its NB after the phase; LargestTxn: the most rows one
	// of the phase's transactions in that NB changed (from the NB database file;
	// every transaction of the phase, the gateway and cluster routers' rows included).
	Rows, LargestTxn, Txns int
	// Mem is its zone controller's memory after the phase; Peak the largest seen
	// during it.
	Mem, Peak memory
}

// ICResult is what an interconnect run measured.
type ICResult struct {
	Config                         Config
	Pods, EgressIPs, EgressIPAddrs int
	Sample                         []string // the sampled zones' nodes
	Phases                         []ICPhase
	// CMPeak is the largest memory seen of the cluster manager over the run.
	CMPeak memory
}

// Phase returns the phase called name (zero ICPhase when absent).
func (r ICResult) Phase(name string) ICPhase {
	return named(r.Phases, name, func(p ICPhase) string { return p.Name })
}

// Targets of the interconnect issue, printed beside the figures (nothing asserted on time).
const (
	targetNodeLoss  = 300 * time.Millisecond
	targetPodAddP99 = 10 * time.Millisecond
	targetZoneHeap  = 60 // MiB, at 20,000 pods
	targetCMStatus  = 100 * time.Millisecond
)

// String renders r: per phase, the cluster manager's line, one line per sampled zone and the end to end figure.
func (r ICResult) String() string {
	var b strings.Builder
	var sample []string
	for _, n := range r.Sample {
		sample = append(sample, n+" ("+sampleRole(n)+")")
	}
	fmt.Fprintf(&b, "SCALE-IC %d nodes (one zone each), %d pods, %d EgressIPs (%d egress IPs); real zones sampled: %s; the other %d zones simulated\n",
		r.Config.Nodes, r.Pods, r.EgressIPs, r.EgressIPAddrs, strings.Join(sample, ", "), r.Config.Nodes-len(r.Sample))
	fmt.Fprintf(&b, "SCALE-IC targets: node-loss last zone converged <= %v; pod-add p99 in its zone <= %v; zone controller heap at 20,000 pods <= %d MiB; cluster manager's status writes done <= %v after its decision; per-zone cost flat from 5,000 to 50,000 pods\n",
		targetNodeLoss, targetPodAddP99, targetZoneHeap, targetCMStatus)
	fmt.Fprintf(&b, "(converged: from the change's last API write to the zone's last NB event before it was found converged; NB txns and syncs: the zone controller's metrics; rows: owned in its NB after the phase; largest: rows one NB transaction of the phase changed; heap: go_memstats_heap_inuse_bytes after the phase, and the largest seen during it)\n")
	fmt.Fprintf(&b, "%-10s %-8s %12s %8s %6s %6s %8s %10s %10s\n", "phase", "zone", "converged", "NB txns", "syncs", "rows", "largest", "heap MiB", "peak MiB")
	for _, p := range r.Phases {
		for _, z := range p.Zones {
			conv := "-" // pod-add: per pod, below; no-op: nothing to converge
			switch {
			case p.Name == "pod-add" || p.Name == "no-op":
			case z.NoChange:
				conv = "no change"
			default:
				conv = z.Converged.Round(100 * time.Microsecond).String()
			}
			fmt.Fprintf(&b, "%-10s %-8s %12s %8v %6v %6d %8d %10.1f %10.1f\n", p.Name, z.Node, conv,
				z.NBTransactions, z.Syncs, z.Rows, z.LargestTxn, z.Mem.HeapInuse/mib, z.Peak.HeapInuse/mib)
		}
		status := "no status change"
		if p.StatusLast > 0 {
			status = fmt.Sprintf("status changes seen %v .. %v after the change (first -> last %v)", p.StatusFirst.Round(100*time.Microsecond),
				p.StatusLast.Round(100*time.Microsecond), (p.StatusLast - p.StatusFirst).Round(100*time.Microsecond))
		}
		fmt.Fprintf(&b, "%-10s %-8s %s; %v status updates, %v syncs, %d egress IPs moved; heap %.1f MiB\n", p.Name, "cm", status, p.StatusUpdates, p.Syncs, p.Moved, p.CM.HeapInuse/mib)
		switch p.Name {
		case "pod-add":
			if len(p.PodAdd) == 0 {
				fmt.Fprintf(&b, "%-10s %-8s pods added one at a time on %s; not measured: its zone is simulated\n", p.Name, "e2e", cluster.NodeName(samplePods))
				break
			}
			fmt.Fprintf(&b, "%-10s %-8s %d pods one at a time on %s, status with IP written -> its zone converged: p50 %v, p99 %v (target %v), max %v (the status write itself: p50 %v); slowest: %s\n",
				p.Name, "e2e", len(p.PodAdd), cluster.NodeName(samplePods), pct(p.PodAdd, 50), pct(p.PodAdd, 99), targetPodAddP99, pct(p.PodAdd, 100), pct(p.APIWrites, 50), slowest(p.PodAdd, 3))
		case "node-loss":
			fmt.Fprintf(&b, "%-10s %-8s last sampled zone converged %v after the change (target %v); cluster manager first -> last status write %v (target %v)\n",
				p.Name, "e2e", p.EndToEnd.Round(100*time.Microsecond), targetNodeLoss, (p.StatusLast - p.StatusFirst).Round(100*time.Microsecond), targetCMStatus)
		case "no-op":
			fmt.Fprintf(&b, "%-10s %-8s a label on a simulated node: NB transactions in the sampled zones and status updates above (expected: none)\n", p.Name, "e2e")
		default:
			fmt.Fprintf(&b, "%-10s %-8s last sampled zone converged %v after the change\n", p.Name, "e2e", p.EndToEnd.Round(100*time.Microsecond))
		}
	}
	fmt.Fprintf(&b, "SCALE-IC cluster manager, largest heap seen in the run: %.1f MiB; zone controllers' target %d MiB at 20,000 pods\n", r.CMPeak.HeapInuse/mib, targetZoneHeap)
	return b.String()
}

// sampleRole is what the sampled zone of node does in the run ("" for another node).
func sampleRole(node string) string {
	switch node {
	case cluster.NodeName(sampleLost):
		return "holder lost in node-loss"
	case cluster.NodeName(sampleTaker):
		return "takes IPs in node-loss"
	case cluster.NodeName(samplePods):
		return "pods only"
	}
	return ""
}

// slowest renders the n largest of ds with their 0-based positions ("#12 91ms").
func slowest(ds []time.Duration, n int) string {
	idx := make([]int, len(ds))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(ds[b], ds[a]) })
	var out []string
	for _, i := range idx[:min(n, len(idx))] {
		out = append(out, fmt.Sprintf("#%d %v", i, ds[i].Round(100*time.Microsecond)))
	}
	return strings.Join(out, ", ")
}

// zoneWatch is one sampled zone: its NB server, the harness' monitor of it, its
// zone controller, and what the convergence check last found.
type zoneWatch struct {
	node   cluster.NodeAddrs
	nbs    *nbserver.Server
	nb     client.Client
	proc   *masterProc
	lastNB time.Time // arrival of its last NB event (guarded by icHarness.mu)

	// Guarded by icHarness.mu.
	converged bool
	at        time.Time
	problem   string
}

// icHarness is one interconnect run's environment; it reuses the single-NB
// harness for the API objects (layout, pods, EgressIPs, tracker of expectations).
type icHarness struct {
	*harness
	cm      *masterProc
	zones   []*zoneWatch
	sampled map[string]bool

	nodes corelisters.NodeLister
	pods  corelisters.PodLister
	nss   corelisters.NamespaceLister

	wake chan struct{}

	mu         sync.Mutex
	inAt       time.Time // arrival of the last input event (informers, expectations)
	inGen      int       // input events so far
	checks     int       // convergence checks run
	checkBegan time.Time // when the last check run began
	changed    chan struct{}
	// Status changes seen by the informer (EgressIP status items differing).
	statusSeen []time.Time
	items      map[string][]egressipv1.EgressIPStatusItem

	// expectRows: the EgressIPs were created (before, settle waits for idle only:
	// the expectations are not met while no EgressIP is).
	expectRows bool

	pubMu     sync.Mutex
	published map[string]string // simulated node -> its snat-ready as last written
	pubTimes  []time.Time       // when each batch of those writes was done
}

// RunInterconnect lays out cfg in the interconnect layout and runs the phases:
// assign (every EgressIP at once), node-loss (cfg.LostNodes unlabelled, the first
// sampled zone's node among them), pod-add (cfg.AddPods, one at a time on the
// pods-only sampled zone's node), pod-churn (cfg.ChurnPods replaced) and no-op (a
// label on a simulated node: no NB transaction in any zone, no status write).
func RunInterconnect(t testing.TB, cfg Config) ICResult {
	t.Helper()
	ic, ctx := startIC(t, cfg)
	cfg = ic.cfg
	res := ICResult{Config: cfg, EgressIPs: cfg.Namespaces, EgressIPAddrs: cfg.Namespaces * cfg.IPsPerEgressIP}
	for _, z := range ic.zones {
		res.Sample = append(res.Sample, z.node.Name)
	}
	pods, _ := ic.tr.expected()
	res.Pods = len(pods)

	res.Phases = append(res.Phases, ic.phase(ctx, "assign", func() {
		ic.expectRows = true
		ic.createEgressIPs(ctx)
	}))
	// The taker joins now: it holds nothing, so moved IPs go to it first.
	taker := cluster.NodeName(sampleTaker)
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, annotations.EgressAssignableLabel))
	if _, err := ic.kube.CoreV1().Nodes().Patch(ctx, taker, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	ic.settle(ctx)

	if cfg.LostNodes > 0 {
		// The lost holder's node, then the holders of the pods-only zone's
		// EgressIPs (so that its pods' next hops move), then holders by index.
		victims := []string{cluster.NodeName(sampleLost)}
		for _, n := range append(ic.holdersFor(cluster.NodeName(samplePods)), ic.holders(cfg.Nodes)...) {
			if len(victims) < cfg.LostNodes && !ic.sampled[n] && !slices.Contains(victims, n) {
				victims = append(victims, n)
			}
		}
		res.Phases = append(res.Phases, ic.phase(ctx, "node-loss", func() { ic.unlabel(ctx, victims) }))
	}
	if cfg.AddPods > 0 {
		res.Phases = append(res.Phases, ic.podAdd(ctx))
	}
	if cfg.ChurnPods > 0 {
		victims := ic.churnVictims(cfg.ChurnPods)
		res.Phases = append(res.Phases, ic.phase(ctx, "pod-churn", func() {
			ic.parallel(len(victims), func(i int) error { return ic.replace(ctx, victims[i]) })
		}))
	}
	res.Phases = append(res.Phases, ic.noop(ctx))
	res.CMPeak = ic.cm.peak()
	return res
}

// holdersFor returns the nodes holding the egress IPs of the EgressIPs that serve
// pods of node (each EgressIP selects the namespace of its name), sorted.
func (ic *icHarness) holdersFor(node string) []string {
	pods, _ := ic.tr.expected()
	nss := map[string]bool{}
	for key, ip := range pods {
		if ns, _, _ := strings.Cut(key, "/"); ic.slotOf(ip).node.Name == node {
			nss[ns] = true
		}
	}
	var out []string
	for _, e := range ic.tr.egressIPs() {
		for _, it := range e.Status.Items {
			if nss[e.Name] && !slices.Contains(out, it.Node) {
				out = append(out, it.Node)
			}
		}
	}
	slices.Sort(out)
	return out
}

// startIC starts the API server, the sampled zones' NB servers and monitors, the
// informers, lays the cluster out, starts the cluster manager and the sampled
// zone controllers and waits until every one ran its start-up sync.
func startIC(t testing.TB, cfg Config) (*icHarness, context.Context) {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Nodes < samplePods+1 || cfg.Nodes > cluster.MaxNodes || cfg.LostNodes >= cfg.Nodes-samplePods || cfg.Namespaces < 1 || cfg.PodsPerNamespace < 1 ||
		cfg.IPsPerEgressIP < 1 {
		t.Fatalf("scale-ic: %d nodes (%d lost), %d namespaces of %d pods: out of range (at least %d nodes, fewer lost than nodes beside the sample)",
			cfg.Nodes, cfg.LostNodes, cfg.Namespaces, cfg.PodsPerNamespace, samplePods+1)
	}
	if cfg.Namespaces*cfg.PodsPerNamespace+cfg.AddPods > podsPerNode*cfg.Nodes {
		t.Fatalf("scale-ic: %d pods + %d added: more than the node subnets hold", cfg.Namespaces*cfg.PodsPerNamespace, cfg.AddPods)
	}
	h, ctx, api, bin := newHarness(t, cfg)
	ic := &icHarness{harness: h, sampled: map[string]bool{}, wake: make(chan struct{}, 1), changed: make(chan struct{}),
		items: map[string][]egressipv1.EgressIPStatusItem{}, published: map[string]string{}}
	// The interconnect node facts: node-id index+1 (the gateway router join IP
	// 100.64.0.(index+1) of the address plan), the transit switch address; the
	// taker and the pods-only node start unlabelled.
	h.nodeHook = func(n *corev1.Node, i int) {
		n.Annotations[annotations.NodeID] = fmt.Sprint(i + 2)
		n.Annotations[annotations.NodeTransitSwitchPortIfAddr] = fmt.Sprintf(`{"ipv4":"100.88.%d.%d/16"}`, (i+2)/256, (i+2)%256)
		n.Annotations[annotations.NodeChassisID] = fmt.Sprintf("chassis-%s", n.Name)
		n.Annotations[annotations.NodeEncapIPs] = fmt.Sprintf(`[%q]`, h.nodes[i].NodeIP)
		delete(n.Annotations, annotations.GatewayRouterLRPIfAddr)
		if i+1 == sampleTaker || i+1 == samplePods {
			delete(n.Labels, annotations.EgressAssignableLabel)
		}
	}
	realZones := cfg.RealZones
	if realZones == nil {
		realZones = []int{sampleLost, sampleTaker, samplePods}
	}
	for _, idx := range realZones {
		if idx < sampleLost || idx > samplePods {
			t.Fatalf("scale-ic: real zone %d: not a sampled zone (%d..%d)", idx, sampleLost, samplePods)
		}
		z := &zoneWatch{node: h.nodes[idx-1], nbs: nbserver.Start(t)}
		if err := cluster.WriteNBTopology(ctx, z.nbs.Addr, []cluster.NodeAddrs{z.node}, gwmode.Shared); err != nil {
			t.Fatal(err)
		}
		ic.monitorZone(ctx, z)
		ic.zones = append(ic.zones, z)
		ic.sampled[z.node.Name] = true
	}
	if err := watchEgressIPs(ctx, h.eips, ic.setEgressIP); err != nil {
		t.Fatalf("scale-ic: %v", err)
	}
	ic.startInformers(ctx)
	go ic.checker(ctx)
	go ic.publisher(ctx)
	h.layout(ctx)

	ic.cm = startProc(t, bin, "ovnkube-cluster-manager", ovnkube(api.Kubeconfig,
		"--init-cluster-manager", "--leader-elect=false", "--egressip-reachability-total-timeout", "0")...)
	go ic.cm.sampleMemory(ctx, time.Second)
	for _, z := range ic.zones {
		z.proc = startProc(t, bin, "ovnkube-zone-"+z.node.Name, ovnkube(api.Kubeconfig,
			"--init-ovnkube-controller", z.node.Name, "--nb-address", z.nbs.Addr)...)
		go z.proc.sampleMemory(ctx, time.Second)
	}
	for _, p := range ic.procs() {
		if err := waitMetricOf(ctx, p, metricSyncs, 1, cfg.Timeout); err != nil {
			t.Fatalf("scale-ic: start-up sync: %v", err)
		}
	}
	ic.settle(ctx)
	return ic, ctx
}

// procs are the cluster manager and the sampled zone controllers.
func (ic *icHarness) procs() []*masterProc {
	out := []*masterProc{ic.cm}
	for _, z := range ic.zones {
		out = append(out, z.proc)
	}
	return out
}

// monitorZone connects the harness' monitor to z's NB: every column of the tables
// nbstate.ReadCurrent reads (a zone's NB is small); each event notes its arrival
// and wakes the checker.
func (ic *icHarness) monitorZone(ctx context.Context, z *zoneWatch) {
	clientModel, err := nbdb.FullDatabaseModel()
	if err != nil {
		ic.t.Fatal(err)
	}
	c := connectNB(ctx, ic.t, z.nbs.Addr, clientModel, logr.Discard())
	note := func(table string) {
		switch table {
		case nbdb.LogicalRouterTable, nbdb.LogicalRouterPolicyTable, nbdb.NATTable, nbdb.AddressSetTable:
		default:
			return
		}
		ic.mu.Lock()
		z.lastNB = time.Now()
		ic.mu.Unlock()
		ic.poke()
	}
	c.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(table string, _ model.Model) { note(table) },
		UpdateFunc: func(table string, _, _ model.Model) { note(table) },
		DeleteFunc: func(table string, _ model.Model) { note(table) },
	})
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := c.Monitor(mctx, c.NewMonitor(
		client.WithTable(&nbdb.LogicalRouter{}), client.WithTable(&nbdb.LogicalRouterPolicy{}),
		client.WithTable(&nbdb.NAT{}), client.WithTable(&nbdb.AddressSet{}),
	)); err != nil {
		ic.t.Fatalf("scale-ic: monitor NB %s: %v", z.nbs.Addr, err)
	}
	z.nb = c
}

// startInformers runs the Node, Pod and Namespace informers the check reads; each
// event notes its arrival and wakes the checker.
func (ic *icHarness) startInformers(ctx context.Context) {
	f := informers.NewSharedInformerFactory(ic.kube, 0)
	handler := k8scache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { ic.input(time.Now()) },
		UpdateFunc: func(any, any) { ic.input(time.Now()) },
		DeleteFunc: func(any) { ic.input(time.Now()) },
	}
	nodes, pods, nss := f.Core().V1().Nodes(), f.Core().V1().Pods(), f.Core().V1().Namespaces()
	for _, inf := range []k8scache.SharedIndexInformer{nodes.Informer(), pods.Informer(), nss.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			ic.t.Fatal(err)
		}
	}
	ic.nodes, ic.pods, ic.nss = nodes.Lister(), pods.Lister(), nss.Lister()
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			ic.t.Fatalf("scale-ic: %v informer not synced", typ)
		}
	}
	go func() {
		<-ctx.Done()
		f.Shutdown()
	}()
}

// setEgressIP feeds the tracker (expectations) and notes status changes.
func (ic *icHarness) setEgressIP(name string, e *egressipv1.EgressIP, at time.Time) {
	ic.tr.setEgressIP(name, e, at)
	ic.mu.Lock()
	var items []egressipv1.EgressIPStatusItem
	if e != nil {
		items = e.Status.Items
	}
	if old, ok := ic.items[name]; ok && !slices.Equal(old, items) || !ok && len(items) > 0 {
		ic.statusSeen = append(ic.statusSeen, at)
	}
	ic.items[name] = slices.Clone(items)
	ic.mu.Unlock()
	ic.input(at)
}

// input notes an input event (informers, expectations) at at and wakes the checker.
func (ic *icHarness) input(at time.Time) {
	ic.mu.Lock()
	if at.After(ic.inAt) {
		ic.inAt = at
	}
	ic.inGen++
	ic.mu.Unlock()
	ic.poke()
}

func (ic *icHarness) poke() {
	select {
	case ic.wake <- struct{}{}:
	default:
	}
}

// checker runs the convergence check of every sampled zone on each wake-up (an
// event of a zone monitor, an informer or the tracker's expectations). The planned
// rows are computed again only when an input changed; an NB event alone costs a
// read of that small zone's cache and a Diff.
func (ic *icHarness) checker(ctx context.Context) {
	var (
		lastGen = -1
		why     string
		desired []nbstate.State
	)
	for {
		_, _, _, trChanged := ic.tr.state()
		select {
		case <-ctx.Done():
			return
		case <-ic.wake:
		case <-trChanged:
			ic.input(time.Now())
			continue
		}
		began := time.Now()
		ic.mu.Lock()
		gen := ic.inGen
		ic.mu.Unlock()
		if gen != lastGen {
			lastGen, desired = gen, nil
			var in master.ExplainInput
			if in, why = ic.desiredInput(); why == "" {
				desired, why = ic.planned(in)
			}
		}
		problems := make([]string, len(ic.zones))
		for i, z := range ic.zones {
			if why != "" {
				problems[i] = why
				continue
			}
			cur, err := nbstate.ReadCurrent(ctx, z.nb)
			if err != nil {
				problems[i] = err.Error()
				continue
			}
			problems[i] = planProblem(nbstate.Diff(desired[i], cur), cur)
		}
		ic.mu.Lock()
		// A converged zone's rows are final since its last NB event: that is when it
		// converged (before the change: it had nothing to change).
		ic.checks++
		ic.checkBegan = began
		for i, z := range ic.zones {
			if problems[i] == "" && !z.converged {
				z.converged, z.at = true, z.lastNB
			}
			if problems[i] != "" {
				z.converged = false
			}
			z.problem = problems[i]
		}
		close(ic.changed)
		ic.changed = make(chan struct{})
		ic.mu.Unlock()
	}
}

// planProblem describes what a plan would change ("" when nothing).
func planProblem(p nbstate.Plan, cur nbstate.Current) string {
	if len(p.Changes) == 0 && len(cur.Stale) == 0 {
		return ""
	}
	var parts []string
	for _, c := range p.Changes[:min(3, len(p.Changes))] {
		parts = append(parts, fmt.Sprintf("%v %v", c.Op, c.Key))
	}
	ins, upd, del := p.Counts()
	return fmt.Sprintf("NB differs from the planned rows: %d inserts, %d updates, %d deletes, %d stale (%s)", ins, upd, del, len(cur.Stale), strings.Join(parts, "; "))
}

// planned is the rows of each sampled zone (in ic.zones' order) as master.PlannedRows
// plans them from in, or why not.
func (ic *icHarness) planned(in master.ExplainInput) ([]nbstate.State, string) {
	zones := make([]string, len(ic.zones))
	for i, z := range ic.zones {
		zones[i] = z.node.Name
	}
	rows, _, err := master.PlannedRows(in, zones) // drift: the cluster manager's concern, not the zones'
	if err != nil {
		return nil, err.Error()
	}
	out := make([]nbstate.State, len(zones))
	for i, z := range zones {
		out[i] = rows[z]
	}
	return out, ""
}

// desiredInput is what the rows are planned from (the API objects, as explain
// reads them in the interconnect layout, shared gateway mode) from the informers,
// or why the harness' expectations are not met yet.
func (ic *icHarness) desiredInput() (master.ExplainInput, string) {
	if !ic.tr.statusComplete() {
		return master.ExplainInput{}, "EgressIP status not complete (or on a lost node)"
	}
	want, _ := ic.tr.expected()
	podList, err := ic.pods.List(labels.Everything())
	if err != nil {
		return master.ExplainInput{}, err.Error()
	}
	seen := 0
	var pods []*corev1.Pod
	for _, p := range podList {
		if !selection.PodServable(p) {
			continue
		}
		pods = append(pods, p)
		ip, ok := want[p.Namespace+"/"+p.Name]
		if !ok || p.Status.PodIP != ip.String() {
			return master.ExplainInput{}, fmt.Sprintf("pod %s/%s not as the harness made it", p.Namespace, p.Name)
		}
		seen++
	}
	if seen != len(want) {
		return master.ExplainInput{}, fmt.Sprintf("%d of %d pods seen with their IPs", seen, len(want))
	}
	nodeList, err := ic.nodes.List(labels.Everything())
	if err != nil {
		return master.ExplainInput{}, err.Error()
	}
	snatReady := map[string]map[netip.Addr]bool{}
	for _, n := range nodeList {
		if snatReady[n.Name], err = annotations.ParseIPList(n, annotations.EgressIPsSNATReady); err != nil {
			return master.ExplainInput{}, fmt.Sprintf("node %s: %v", n.Name, err)
		}
	}
	eips := ic.tr.egressIPs()
	for _, e := range eips {
		for _, it := range e.Status.Items {
			if ip, err := netip.ParseAddr(it.EgressIP); err == nil && !snatReady[it.Node][ip] {
				return master.ExplainInput{}, fmt.Sprintf("%s not SNAT-ready on its holder %s yet", ip, it.Node)
			}
		}
	}
	nss, err := ic.nss.List(labels.Everything())
	if err != nil {
		return master.ExplainInput{}, err.Error()
	}
	return master.ExplainInput{Mode: gwmode.Shared, ClusterSubnets: []netip.Prefix{netip.MustParsePrefix(cluster.ClusterCIDR)},
		JoinSubnets: []netip.Prefix{netip.MustParsePrefix(cluster.JoinCIDR)}, EgressIPs: eips, Nodes: nodeList, Namespaces: nss, Pods: pods,
		ZoneNB: map[string]*nbstate.Current{}}, ""
}

// publisher plays the simulated zones: on every EgressIP status change it writes,
// on each non-sampled Node, egress-ips-snat-ready = the IPs the status gives it.
func (ic *icHarness) publisher(ctx context.Context) {
	for {
		ic.mu.Lock()
		changed := ic.changed
		ic.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		held := map[string]map[netip.Addr]bool{}
		for ip, node := range ic.tr.assignments() {
			if held[node] == nil {
				held[node] = map[netip.Addr]bool{}
			}
			if a, err := netip.ParseAddr(ip); err == nil {
				held[node][a] = true
			}
		}
		type write struct{ node, value string }
		var writes []write
		ic.pubMu.Lock()
		for _, n := range ic.harness.nodes {
			if ic.sampled[n.Name] {
				continue
			}
			v := annotations.FormatEgressIPsReady(held[n.Name])
			last, ok := ic.published[n.Name]
			if !ok {
				last = annotations.FormatEgressIPsReady(nil)
			}
			if v != last {
				writes = append(writes, write{n.Name, v})
				ic.published[n.Name] = v
			}
		}
		ic.pubMu.Unlock()
		if len(writes) == 0 {
			continue
		}
		// Not ic.parallel: this goroutine may not end the test (t.Fatal).
		var g errgroup.Group
		g.SetLimit(32)
		for _, w := range writes {
			g.Go(func() error {
				body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotations.EgressIPsSNATReady: w.value}}})
				if err == nil {
					_, err = ic.kube.CoreV1().Nodes().Patch(ctx, w.node, types.MergePatchType, body, metav1.PatchOptions{})
				}
				if err != nil {
					return fmt.Errorf("publish %s on %s: %w", annotations.EgressIPsSNATReady, w.node, err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil && ctx.Err() == nil {
			ic.t.Errorf("scale-ic: %v", err)
		}
		ic.pubMu.Lock()
		ic.pubTimes = append(ic.pubTimes, time.Now())
		ic.pubMu.Unlock()
	}
}

// zonesState returns whether every sampled zone is converged (as the last check
// found), when that check began, a zone's problem and a channel closed on the next check.
func (ic *icHarness) zonesState() (all bool, began time.Time, problem string, changed <-chan struct{}) {
	ic.mu.Lock()
	defer ic.mu.Unlock()
	all = true
	for _, z := range ic.zones {
		if !z.converged {
			all = false
			problem = z.node.Name + ": " + z.problem
		}
	}
	return all, ic.checkBegan, problem, ic.changed
}

// waitZones waits until a check that began after now found every sampled zone
// converged, and returns each zone's convergence time.
func (ic *icHarness) waitZones(ctx context.Context, what string) []time.Time {
	ic.t.Helper()
	t0 := time.Now()
	ic.poke()
	deadline := time.NewTimer(ic.cfg.Timeout)
	defer deadline.Stop()
	for {
		all, began, problem, changed := ic.zonesState()
		if all && began.After(t0) {
			ic.mu.Lock()
			defer ic.mu.Unlock()
			var out []time.Time
			for _, z := range ic.zones {
				out = append(out, z.at)
			}
			return out
		}
		for _, p := range ic.procs() {
			if err := p.alive(); err != nil {
				ic.t.Fatalf("scale-ic: %s: %v", what, err)
			}
		}
		select {
		case <-changed:
		case <-time.After(time.Second):
		case <-deadline.C:
			ic.t.Fatalf("scale-ic: %s: not converged within %v: %s", what, ic.cfg.Timeout, problem)
		case <-ctx.Done():
			ic.t.Fatal(ctx.Err())
		}
	}
}

// settle waits until every sampled zone is converged, no Node lists an IP as
// lingering (a released IP's rows are gone) and every process is idle.
func (ic *icHarness) settle(ctx context.Context) {
	ic.t.Helper()
	deadline := time.Now().Add(ic.cfg.Timeout)
	for ic.expectRows {
		ic.waitZones(ctx, "settle")
		lingering := ""
		nodes, err := ic.nodes.List(labels.Everything())
		if err != nil {
			ic.t.Fatalf("scale: %v", err)
		}
		for _, n := range nodes {
			if v := n.Annotations[annotations.EgressIPsLingering]; v != "" && v != "[]" {
				lingering = n.Name
			}
		}
		if lingering == "" {
			break
		}
		if time.Now().After(deadline) {
			ic.t.Fatalf("scale-ic: %s still lists egress IPs lingering after %v", lingering, ic.cfg.Timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var pids []int
	for _, z := range ic.zones {
		pids = append(pids, z.nbs.Pid())
	}
	if !waitIdle(ctx, ic.t, ic.procs(), pids, 30*time.Second) {
		ic.t.Logf("scale-ic: not idle within 30 s; counters may still move")
	}
	if ic.expectRows {
		ic.waitZones(ctx, "settle") // the rows of a linger's end are gone too
	}
}

// icMark is what a phase reads before its change.
type icMark struct {
	at      time.Time
	metrics []metrics.Set // per proc
	dbSize  []int64       // per zone: its NB file's size
	status  int           // status changes seen so far
	before  map[string]string
}

func (ic *icHarness) mark(ctx context.Context, name string) icMark {
	ic.t.Helper()
	quiet()
	m := icMark{before: ic.tr.assignments()}
	for _, p := range ic.procs() {
		p.setStage(name)
		ms, err := p.scrape(ctx)
		if err != nil {
			ic.t.Fatalf("scale-ic: %v", err)
		}
		m.metrics = append(m.metrics, ms)
	}
	for _, z := range ic.zones {
		st, err := os.Stat(z.nbs.DBFile())
		if err != nil {
			ic.t.Fatal(err)
		}
		m.dbSize = append(m.dbSize, st.Size())
	}
	ic.mu.Lock()
	m.status = len(ic.statusSeen)
	ic.mu.Unlock()
	m.at = time.Now()
	return m
}

// finish fills p after the change returned at start and the zones converged at
// (nil: not measured), once settled.
func (ic *icHarness) finish(ctx context.Context, p *ICPhase, m icMark, start time.Time, at []time.Time) {
	ic.t.Helper()
	ic.settle(ctx)
	var ms []metrics.Set
	for _, proc := range ic.procs() {
		s, err := proc.scrape(ctx)
		if err != nil {
			ic.t.Fatalf("scale-ic: %v", err)
		}
		proc.notePeak(memoryOf(s))
		ms = append(ms, s)
	}
	delta := func(i int, name string) float64 { return ms[i].Sum(name) - m.metrics[i].Sum(name) }
	p.StatusUpdates, p.Syncs, p.CM = delta(0, metricStatusUpdates), delta(0, metricSyncs), memoryOf(ms[0])
	for i, z := range ic.zones {
		zp := ZonePhase{Node: z.node.Name, NBTransactions: delta(i+1, metricNBTransactions), Syncs: delta(i+1, metricSyncs),
			Mem: memoryOf(ms[i+1])}
		for _, sp := range z.proc.peaksByStage() {
			if sp.Stage == p.Name {
				zp.Peak = sp.Peak
			}
		}
		if at != nil {
			zp.Converged, zp.NoChange = max(0, at[i].Sub(start)), at[i].Before(m.at)
			p.EndToEnd = max(p.EndToEnd, zp.Converged)
		}
		cur, err := nbstate.ReadCurrentLive(ctx, z.nb, queryClient{z.nb})
		if err != nil {
			ic.t.Fatalf("scale-ic: %s: %v", z.node.Name, err)
		}
		zp.Rows = cur.Rows.Len()
		var errTx error
		zp.Txns, zp.LargestTxn, errTx = dbTransactions(z.nbs.DBFile(), m.dbSize[i])
		if errTx != nil {
			ic.t.Logf("scale-ic: %s: %v", z.node.Name, errTx)
		}
		p.Zones = append(p.Zones, zp)
	}
	ic.mu.Lock()
	seen := ic.statusSeen[m.status:]
	ic.mu.Unlock()
	if len(seen) > 0 {
		p.StatusFirst, p.StatusLast = max(0, seen[0].Sub(start)), max(0, seen[len(seen)-1].Sub(start))
	}
	for ip, node := range ic.tr.assignments() {
		if was, ok := m.before[ip]; ok && was != node {
			p.Moved++
		}
	}
}

// profile, when SCALE_IC_PROFILE_DIR names a directory, starts every process'
// CPU profile over the phase's first SCALE_CPU_PROFILE_SECONDS (default 3) and
// returns what saves their heap profiles (after a GC) at the phase's end: files
// <phase>-<process>.cpu and .heap there (a diagnosis, not a measurement: the
// profiles cost the processes some CPU).
func (ic *icHarness) profile(ctx context.Context, name string) func() {
	dir := os.Getenv("SCALE_IC_PROFILE_DIR")
	if dir == "" {
		return func() {}
	}
	d := 3 * time.Second
	if v, err := time.ParseDuration(os.Getenv("SCALE_CPU_PROFILE_SECONDS") + "s"); err == nil && v >= time.Second {
		d = v
	}
	names := []string{"cm"}
	for _, z := range ic.zones {
		names = append(names, z.node.Name)
	}
	for i, p := range ic.procs() {
		p.cpuProfile(ctx, ic.t, d, filepath.Join(dir, name+"-"+names[i]+".cpu"))
	}
	return func() {
		for i, p := range ic.procs() {
			if err := p.saveHeapProfile(ctx, filepath.Join(dir, name+"-"+names[i]+".heap")); err != nil {
				ic.t.Logf("scale-ic: heap profile of %s: %v", names[i], err)
			}
		}
	}
}

// phase runs change and measures until every sampled zone converged.
func (ic *icHarness) phase(ctx context.Context, name string, change func()) ICPhase {
	ic.t.Helper()
	m := ic.mark(ctx, name)
	heapProfiles := ic.profile(ctx, name)
	change()
	start := time.Now()
	at := ic.waitZones(ctx, name)
	p := ICPhase{Name: name}
	ic.finish(ctx, &p, m, start, at)
	heapProfiles()
	if zi := slices.IndexFunc(ic.zones, func(z *zoneWatch) bool { return z.node.Index == samplePods }); zi >= 0 {
		ic.pubMu.Lock()
		for _, t := range ic.pubTimes {
			if t.After(start) && !t.After(at[zi]) {
				p.SimPublished = max(p.SimPublished, t.Sub(start))
			}
		}
		ic.pubMu.Unlock()
	}
	return p
}

// podAdd adds cfg.AddPods pods one at a time on the pods-only sampled zone's node
// (namespaces round robin), each once every sampled zone converged on the last.
func (ic *icHarness) podAdd(ctx context.Context) ICPhase {
	ic.t.Helper()
	p := ICPhase{Name: "pod-add"}
	m := ic.mark(ctx, p.Name)
	defer ic.profile(ctx, p.Name)()
	zi := slices.IndexFunc(ic.zones, func(z *zoneWatch) bool { return z.node.Index == samplePods })
	for i := 0; i < ic.cfg.AddPods; i++ {
		s, ok := ic.freshSlotOn(samplePods - 1)
		if !ok {
			ic.t.Logf("scale-ic: pod-add: %s's subnet is full after %d pods", cluster.NodeName(samplePods), i)
			break
		}
		_, ipSet, write, err := ic.createPod(ctx, namespaceName(i%ic.cfg.Namespaces), s)
		if err != nil {
			ic.t.Fatalf("scale-ic: pod-add: %v", err)
		}
		at := ic.waitZones(ctx, p.Name)
		if zi >= 0 { // else that zone is simulated: the real ones only see the pod
			p.PodAdd = append(p.PodAdd, max(0, at[zi].Sub(ipSet)))
			p.APIWrites = append(p.APIWrites, write)
		}
	}
	ic.finish(ctx, &p, m, m.at, nil)
	return p
}

// noop changes a label of a simulated node no selector reads: every process looks
// at it, nothing is to be written.
func (ic *icHarness) noop(ctx context.Context) ICPhase {
	ic.t.Helper()
	p := ICPhase{Name: "no-op"}
	m := ic.mark(ctx, p.Name)
	patch := []byte(`{"metadata":{"labels":{"scale.ovn-egressip/touch":"1"}}}`)
	if _, err := ic.kube.CoreV1().Nodes().Patch(ctx, ic.harness.nodes[len(ic.harness.nodes)-1].Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		ic.t.Fatal(err)
	}
	for i, proc := range ic.procs() {
		if err := waitMetricOf(ctx, proc, metricSyncs, m.metrics[i].Sum(metricSyncs)+1, 10*time.Second); err != nil {
			ic.t.Logf("scale-ic: no-op: no sync after the node update: %v", err)
		}
	}
	ic.finish(ctx, &p, m, m.at, nil)
	return p
}

// waitMetricOf waits until p's metric name is at least v (scraping every 20 ms).
func waitMetricOf(ctx context.Context, p *masterProc, name string, v float64, timeout time.Duration) error {
	h := &harness{master: p}
	return h.waitMetric(ctx, name, v, timeout)
}

// queryClient runs read-only transactions on the server (nbstate.Querier): a zone's NB is small.
type queryClient struct{ client.Client }

func (q queryClient) Query(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	return q.Transact(ctx, ops...)
}

// dbTransactions reads the records an ovsdb-server appended to its standalone
// database file from offset on: how many and the most rows one changed. A file
// now shorter than offset was compacted: it reads it whole (its first two records,
// schema and snapshot, not counted).
func dbTransactions(path string, offset int64) (n, largest int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	skip := 0
	if int64(len(b)) < offset {
		offset, skip = 0, 2
	}
	rest := b[offset:]
	for len(rest) > 0 {
		var size int
		var hash string
		nl := strings.IndexByte(string(rest[:min(len(rest), 200)]), '\n')
		if nl < 0 {
			return n, largest, fmt.Errorf("%s: record header without newline", path)
		}
		if _, err := fmt.Sscanf(string(rest[:nl]), "OVSDB JSON %d %s", &size, &hash); err != nil {
			return n, largest, fmt.Errorf("%s: record header %q: %w", path, rest[:nl], err)
		}
		body := rest[nl+1 : min(len(rest), nl+1+size)]
		rest = rest[min(len(rest), nl+1+size):]
		if len(rest) > 0 && rest[0] == '\n' {
			rest = rest[1:]
		}
		if skip > 0 {
			skip--
			continue
		}
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(body, &rec); err != nil {
			return n, largest, fmt.Errorf("%s: record: %w", path, err)
		}
		rows := 0
		for table, v := range rec {
			if strings.HasPrefix(table, "_") {
				continue
			}
			var byUUID map[string]json.RawMessage
			if json.Unmarshal(v, &byUUID) == nil {
				rows += len(byUUID)
			}
		}
		n++
		largest = max(largest, rows)
	}
	return n, largest, nil
}
