// Package scale runs the egress IP master at scale on real parts and measures it:
// a real kube-apiserver + etcd (test/apiserver), a real NB ovsdb-server
// (test/nbserver) holding the topology of N simulated nodes (test/cluster), and
// the master as its own process (the ovnkube binary of this checkout, built once
// per run, --init-master), read through its /metrics endpoint. Nodes are simulated
// the way kwok simulates them: Node objects with a Ready condition and the egress
// facts a node daemon would publish; pods are Pod objects with a node and a pod IP
// in that node's subnet. Nothing sends packets: the data path is proven by
// test/e2e; this package measures how fast and how economically the master
// converges the API and NB under load and churn.
//
// Convergence is detected cheaply, without re-reading the cluster: the harness'
// NB monitor hands every event on the master's rows, stamped with its arrival
// time, to a tracker that keeps per pod IP the reroute and SNAT contents and the
// set of pod IPs that differ from what EgressIP status (from an informer) asks for
// (tracker.go). A phase's time runs from its last API write to the arrival of the
// NB or status event that completed convergence. Then, once, the full check
// (converged.go) verifies independently: every spec egress IP is in status exactly
// once, on an egress-assignable node that is not lost, and NB holds exactly one
// reroute policy per served pod (next hops: the join IPs of the EgressIP's nodes)
// and one SNAT per served pod and egress IP on GR_<node> (shared gateway mode).
//
//	go test ./test/scale/ -run '^$' -bench . -benchtime 1x     (100 nodes, 5000 pods; see BenchmarkScale)
package scale

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipclient "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/metrics"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// Config is the size of a run.
type Config struct {
	// Nodes simulated (1..cluster.MaxNodes), all egress-assignable.
	Nodes int
	// Namespaces, each with one EgressIP selecting every pod in it.
	Namespaces int
	// PodsPerNamespace, spread round robin over the nodes (251 pod IPs per node).
	PodsPerNamespace int
	// IPsPerEgressIP is the length of each EgressIP's spec.egressIPs.
	IPsPerEgressIP int
	// AddPods are created one at a time into the converged cluster in the pod-add phase.
	AddPods int
	// LostNodes are unlabelled in the node-loss phase (their egress IPs move).
	LostNodes int
	// ChurnPods are deleted and as many created (same namespaces) in the pod-churn phase.
	ChurnPods int
	// FloorRuns is how many times the raw floor is measured (0 = 3, negative = none; the median is compared).
	FloorRuns int
	// Ovnkube is the ovnkube binary to run as the master ("" = build this checkout's).
	Ovnkube string
	// Timeout bounds each phase (default 5 min).
	Timeout time.Duration
	// RealZones (interconnect layout) are the sampled zones run for real, by node
	// index (sampleLost, sampleTaker, samplePods); the others are simulated. Nil: all three.
	RealZones []int
}

// Phase is what one phase measured.
type Phase struct {
	Name string
	// Converged is the time from the change (its last API write) until the tracker
	// saw the converged state arrive (the NB or status event that completed it).
	Converged time.Duration
	// Change is how long the change's API writes took (first to last).
	Change time.Duration
	// Checks is how many full checks it took to confirm (1 unless the tracker was early).
	Checks int
	// NBTransactions and StatusUpdates the master made during the phase (its metrics).
	NBTransactions float64
	StatusUpdates  float64
	// Syncs the master started during the phase.
	Syncs float64
	// Moved is how many egress IPs changed node.
	Moved int
	// CPU used from the start of the change until convergence was detected (for
	// idle: until the master was idle again).
	CPU CPU
	// PodAdd: per pod, from the response to its status update (the pod has its IP)
	// until its reroute policy and SNATs were in NB (0 if they arrived before the
	// response); APIWrites: how long the status update itself took.
	PodAdd, APIWrites []time.Duration
	// SyncDurations (idle): the master's sync duration histogram's count and sum over
	// the phase by kind; nil when the master does not export it.
	SyncDurations map[string]metrics.Histo
	// MasterCommit: the master's own measure over the phase, from the first event of a
	// sync's batch to its NB commit, for the syncs that assigned or moved egress IPs
	// (its assign latency histogram; Count 0 when none did). It leaves out what the
	// tracker's measure includes after the commit: NB delivering the rows to a client.
	MasterCommit metrics.Histo
}

// Result is what a run measured.
type Result struct {
	Config Config
	// Pods, EgressIPs and EgressIPAddrs in the cluster at the start.
	Pods, EgressIPs, EgressIPAddrs int
	// NBRows owned by the master once the assign phase converged.
	NBRows int
	Phases []Phase
	// Master is the master process' memory (its /metrics) once the assign phase
	// converged and it was idle; MasterPeak the largest of each figure seen over the
	// run (scraped every second and at each phase's start and end).
	Master, MasterPeak memory
	// MasterStagePeaks splits MasterPeak by what the harness was doing (the
	// master's start-up, then each phase).
	MasterStagePeaks []stagePeak
	// HarnessHeapInuse is this process' heap in use after a GC at the same moment
	// (API clients, informer, NB monitor with its copy of NB).
	HarnessHeapInuse uint64
	// Floor is the raw libovsdb commit of the assign phase's rows: the run with the
	// median Seen of FloorRuns runs (each into a fresh NB); FloorSeen is every run's.
	Floor     Floor
	FloorSeen []time.Duration
	// MoveFloor is the raw libovsdb commit of the node-loss phase's changes (of
	// the rows the floor holds): the run with the median Seen; MoveFloorSeen is
	// every run's.
	MoveFloor     MoveFloor
	MoveFloorSeen []time.Duration
	// DroppedEvents counts NB events libovsdb dropped in the harness' monitor (each
	// drop makes the tracker re-read the cache; times are then upper bounds).
	DroppedEvents int64
}

// Phase returns the phase called name (zero Phase when absent).
func (r Result) Phase(name string) Phase {
	return named(r.Phases, name, func(p Phase) string { return p.Name })
}

// named returns the first of ps whose nameOf is name (the zero P when none).
func named[P any](ps []P, name string, nameOf func(P) string) P {
	for _, p := range ps {
		if nameOf(p) == name {
			return p
		}
	}
	var zero P
	return zero
}

const mib = 1 << 20

// String renders r, one line per phase, for logs and benchmark output.
func (r Result) String() string {
	var b strings.Builder
	fp := r.Floor
	rows := "" // counted by the floor
	if len(r.FloorSeen) > 0 {
		rows = fmt.Sprintf(" (%d policies, %d SNATs, %d address sets)", fp.Policies, fp.NATs, fp.AddressSets)
	}
	fmt.Fprintf(&b, "SCALE %d nodes, %d pods, %d EgressIPs (%d egress IPs), %d NB rows owned%s\n",
		r.Config.Nodes, r.Pods, r.EgressIPs, r.EgressIPAddrs, r.NBRows, rows)
	fmt.Fprintf(&b, "SCALE memory: master after assign: %s; master, largest seen in the run: %s; harness heap in use %.1f MiB (its own process)\n",
		r.Master, r.MasterPeak, float64(r.HarnessHeapInuse)/mib)
	if len(r.MasterStagePeaks) > 0 {
		b.WriteString("SCALE memory: master, largest seen while the harness was in")
		for i, sp := range r.MasterStagePeaks {
			sep := ";"
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&b, "%s %s: heap in use %.1f MiB (live %.1f MiB)", sep, sp.Stage, sp.Peak.HeapInuse/mib, sp.Peak.HeapLive/mib)
		}
		b.WriteString("\n")
	}
	for _, p := range r.Phases {
		counts := fmt.Sprintf("%v NB transactions, %v status updates, %v syncs", p.NBTransactions, p.StatusUpdates, p.Syncs)
		switch {
		case p.Name == "pod-add":
			fmt.Fprintf(&b, "SCALE %-10s %d pods one at a time, pod status with its IP written -> its reroute + SNATs in NB: p50 %v, p99 %v, max %v; the first three %s (not counted: the status write itself, p50 %v); %s\n",
				p.Name, len(p.PodAdd), pct(p.PodAdd, 50), pct(p.PodAdd, 99), pct(p.PodAdd, 100), firstOf(p.PodAdd, 3), pct(p.APIWrites, 50), counts)
		case p.Name == "idle":
			fmt.Fprintf(&b, "SCALE %-10s a pod label change no EgressIP reads: %s; no-op sync duration: %s\n", p.Name, counts, syncDurations(p.SyncDurations))
		default:
			fmt.Fprintf(&b, "SCALE %-10s converged in %v after the last of its API writes (which took %v): %s, %d egress IPs moved (%d full checks)%s\n",
				p.Name, p.Converged.Round(time.Millisecond), p.Change.Round(time.Millisecond), counts, p.Moved, p.Checks, masterCommit(p.MasterCommit))
		}
		fmt.Fprintf(&b, "SCALE %-10s %v\n", "", p.CPU)
	}
	if len(r.FloorSeen) > 0 {
		var runs []string
		for _, d := range r.FloorSeen {
			runs = append(runs, d.Round(time.Millisecond).String())
		}
		ratio := "n/a"
		if fp.Seen > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.Phase("assign").Converged)/float64(fp.Seen))
		}
		fmt.Fprintf(&b, "SCALE %-10s the assign phase's %d rows by plain libovsdb in ONE transaction (%d ops) into a fresh NB: ops built in %v, committed after %v, all in an NB monitor after %v (machine CPU meanwhile %v; median of runs %s); assign / floor = %s\n",
			"floor", fp.Policies+fp.NATs+fp.AddressSets, fp.Ops, fp.Build.Round(time.Millisecond), fp.Commit.Round(time.Millisecond),
			fp.Seen.Round(time.Millisecond), fp.Machine.Round(10*time.Millisecond), strings.Join(runs, " "), ratio)
	}
	if mf := r.MoveFloor; mf.Seen > 0 {
		var runs []string
		for _, d := range r.MoveFloorSeen {
			runs = append(runs, d.Round(time.Millisecond).String())
		}
		fmt.Fprintf(&b, "SCALE %-10s then the node-loss phase's changes to those rows (%d policies' next hops, %d SNATs to other gateway routers) by plain libovsdb in ONE transaction (%d ops): committed after %v, all next hops in an NB monitor after %v (median of runs %s); node-loss / floor = %.2f\n",
			"floor", mf.Nexthops, mf.NATs, mf.Ops, mf.Commit.Round(time.Millisecond), mf.Seen.Round(time.Millisecond),
			strings.Join(runs, " "), float64(r.Phase("node-loss").Converged)/float64(mf.Seen))
	}
	if r.DroppedEvents > 0 {
		fmt.Fprintf(&b, "SCALE the harness' NB monitor dropped %d events (libovsdb buffer full): its times are upper bounds\n", r.DroppedEvents)
	}
	return b.String()
}

// firstOf renders the first n of ds (the pods added right after the bulk assign
// transaction, whose NB transactions are the slowest: see docs/egressip.md "Scale").
func firstOf(ds []time.Duration, n int) string {
	var out []string
	for _, d := range ds[:min(n, len(ds))] {
		out = append(out, d.Round(100*time.Microsecond).String())
	}
	return strings.Join(out, " ")
}

// pct is the q-th percentile (nearest rank) of ds.
func pct(ds []time.Duration, q int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (q*len(s)+99)/100 - 1
	return s[min(max(i, 0), len(s)-1)].Round(100 * time.Microsecond)
}

func syncDurations(hs map[string]metrics.Histo) string {
	if hs == nil {
		return "n/a (" + metricSyncDuration + " not exported)"
	}
	var parts []string
	for _, kind := range sortedKeys(hs) {
		h := hs[kind]
		if h.Count == 0 {
			continue
		}
		mean := time.Duration(h.Sum / float64(h.Count) * float64(time.Second))
		parts = append(parts, fmt.Sprintf("%s %d x mean %v", kind, h.Count, mean.Round(100*time.Microsecond)))
	}
	if len(parts) == 0 {
		return "none recorded"
	}
	return strings.Join(parts, ", ")
}

// egressIPAddr is the k-th egress IP (0-based): 172.18.64.0 + k, outside every node
// and gateway router address of the layout (docs/local-cluster.md).
func egressIPAddr(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{172, 18, byte(64 + k/256), byte(k % 256)})
}

func namespaceName(i int) string { return fmt.Sprintf("scale-%03d", i) }

// harness is one run's environment.
type harness struct {
	t      testing.TB
	cfg    Config
	kube   kubernetes.Interface
	eips   eipclient.Interface
	nb     *nbMonitor // monitors every NB table, reads only
	tr     *tracker
	master *masterProc
	nodes  []cluster.NodeAddrs
	byName map[string]cluster.NodeAddrs
	probe  string // the pod poke relabels (never churned)
	// nodeHook, when set, changes the Node object of node index i (0-based) before
	// layout creates it.
	nodeHook func(n *corev1.Node, i int)

	mu       sync.Mutex
	nextSlot int         // fresh pod addresses handed out
	fromTop  map[int]int // node index -> addresses freshSlotOn handed out from the top of its subnet
	nextName int         // pod names handed out
	pokes    int
}

// Run starts the environment, lays out cfg and runs the phases: "assign" (every
// EgressIP created at once), "pod-add" (cfg.AddPods pods one at a time),
// "node-loss" (cfg.LostNodes unlabelled), "pod-churn" (cfg.ChurnPods pods
// replaced) and "idle" (an event that changes nothing: no NB transaction and no
// status update are expected); then the raw floor. Failures are fatal to t.
func Run(t testing.TB, cfg Config) Result {
	t.Helper()
	h, ctx := start(t, cfg)
	cfg = h.cfg
	res := Result{Config: cfg, EgressIPs: cfg.Namespaces, EgressIPAddrs: cfg.Namespaces * cfg.IPsPerEgressIP}
	pods, _ := h.tr.expected()
	res.Pods = len(pods)

	res.Phases = append(res.Phases, h.phase(ctx, "assign", func() { h.createEgressIPs(ctx) }))
	cur, err := h.nb.readCurrent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res.NBRows = cur.Rows.Len()
	floorRows := snapshotRows(cur)
	h.memory(ctx, &res)
	h.settle(ctx) // pod-add starts on a quiet cluster

	if cfg.AddPods > 0 {
		res.Phases = append(res.Phases, h.podAdd(ctx))
	}
	var mv moves
	if cfg.LostNodes > 0 {
		victims := h.holders(cfg.LostNodes)
		before, err := h.nb.readCurrent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res.Phases = append(res.Phases, h.phase(ctx, "node-loss", func() { h.unlabel(ctx, victims) }))
		after, err := h.nb.readCurrent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mv = movesBetween(before, after)
	}
	if cfg.ChurnPods > 0 {
		victims := h.churnVictims(cfg.ChurnPods)
		res.Phases = append(res.Phases, h.phase(ctx, "pod-churn", func() {
			h.parallel(len(victims), func(i int) error { return h.replace(ctx, victims[i]) })
		}))
	}
	res.Phases = append(res.Phases, h.idle(ctx))

	var floors []Floor
	for i := 0; i < cfg.FloorRuns; i++ {
		f, err := runFloor(ctx, t, h.nodes, floorRows, mv)
		if err != nil {
			t.Fatalf("scale: %v", err)
		}
		floors = append(floors, f)
		res.FloorSeen = append(res.FloorSeen, f.Seen)
		res.MoveFloorSeen = append(res.MoveFloorSeen, f.Move.Seen)
	}
	if len(floors) > 0 {
		sort.Slice(floors, func(i, j int) bool { return floors[i].Move.Seen < floors[j].Move.Seen })
		res.MoveFloor = floors[len(floors)/2].Move
		sort.Slice(floors, func(i, j int) bool { return floors[i].Seen < floors[j].Seen })
		res.Floor = floors[len(floors)/2]
	}
	res.DroppedEvents = h.nb.drops.Load()
	res.MasterPeak = h.master.peak()
	res.MasterStagePeaks = h.master.peaksByStage()
	return res
}

// start validates cfg, starts the API server, the NB server with the topology, the
// harness' NB monitor and EgressIP informer, lays the cluster out and starts the
// master, waiting for its start-up sync.
func start(t testing.TB, cfg Config) (*harness, context.Context) {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.FloorRuns == 0 {
		cfg.FloorRuns = 3
	}
	if cfg.Nodes < 1 || cfg.Nodes > cluster.MaxNodes || cfg.LostNodes >= cfg.Nodes || cfg.Namespaces < 1 || cfg.PodsPerNamespace < 1 {
		t.Fatalf("scale: %d nodes (%d lost), %d namespaces of %d pods: out of range", cfg.Nodes, cfg.LostNodes, cfg.Namespaces, cfg.PodsPerNamespace)
	}
	if cfg.Namespaces*cfg.PodsPerNamespace+cfg.AddPods > podsPerNode*cfg.Nodes {
		t.Fatalf("scale: %d pods + %d added: more than the %d node subnets hold (%d)",
			cfg.Namespaces*cfg.PodsPerNamespace, cfg.AddPods, cfg.Nodes, podsPerNode*cfg.Nodes)
	}
	h, ctx, api, bin := newHarness(t, cfg)
	nbs := nbserver.Start(t)
	if err := cluster.WriteNBTopology(ctx, nbs.Addr, h.nodes, gwmode.Shared); err != nil {
		t.Fatal(err)
	}
	h.nb = startMonitor(ctx, t, nbs.Addr, h.tr.applyRows, func(rows map[string]model.Model) { h.tr.resetRows(rows, time.Now()) })
	h.nb.dbFile = nbs.DBFile()
	if err := watchEgressIPs(ctx, h.eips, h.tr.setEgressIP); err != nil {
		t.Fatalf("scale: %v", err)
	}
	h.layout(ctx)

	h.master = startMaster(t, bin, api.Kubeconfig, nbs.Addr)
	h.master.nbPid = nbs.Pid()
	go h.master.sampleMemory(ctx, time.Second)
	// The master is up once its start-up sync ran (over an empty cluster: no EgressIP yet).
	if err := h.waitMetric(ctx, metricSyncs, 1, cfg.Timeout); err != nil {
		t.Fatalf("scale: the master's start-up sync: %v", err)
	}
	h.settle(ctx)
	return h, ctx
}

// newHarness builds ovnkube (unless cfg.Ovnkube names one), starts the API server
// and returns a harness with its clients, cfg's node addresses and a tracker of
// cfg.Namespaces EgressIPs, the run's context (cancelled at cleanup), the API
// server and the ovnkube binary.
func newHarness(t testing.TB, cfg Config) (*harness, context.Context, *apiserver.Env, string) {
	t.Helper()
	bin := cfg.Ovnkube
	if bin == "" {
		var err error
		if bin, err = buildOvnkube(t.TempDir()); err != nil {
			t.Fatalf("scale: %v", err)
		}
	}
	api := apiserver.Start(t)
	// Cleanups run last first: the harness' watches and NB monitor end before the
	// servers stop (kube-apiserver waits for open watches when it stops).
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	rc := rest.CopyConfig(api.Config)
	rc.QPS, rc.Burst = 2000, 4000
	h := &harness{
		t: t, cfg: cfg,
		kube: kubernetes.NewForConfigOrDie(rc), eips: eipclient.NewForConfigOrDie(rc),
		byName: map[string]cluster.NodeAddrs{},
	}
	joinIPs := map[string]string{}
	for i := 1; i <= cfg.Nodes; i++ {
		a, err := cluster.AddrsFor(i)
		if err != nil {
			t.Fatal(err)
		}
		h.nodes = append(h.nodes, a)
		h.byName[a.Name] = a
		joinIPs[a.Name] = a.JoinIP.String()
	}
	h.tr = newTracker(joinIPs, cfg.Namespaces)
	return h, ctx, api, bin
}

// createEgressIPs creates every EgressIP at once: EgressIP i selects namespace i.
func (h *harness) createEgressIPs(ctx context.Context) {
	h.parallel(h.cfg.Namespaces, func(i int) error {
		var ips []string
		for j := 0; j < h.cfg.IPsPerEgressIP; j++ {
			ips = append(ips, egressIPAddr(i*h.cfg.IPsPerEgressIP+j).String())
		}
		_, err := h.eips.K8sV1().EgressIPs().Create(ctx, &egressipv1.EgressIP{
			ObjectMeta: metav1.ObjectMeta{Name: namespaceName(i)},
			Spec: egressipv1.EgressIPSpec{
				EgressIPs:         ips,
				NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespaceName(i)}},
			},
		}, metav1.CreateOptions{})
		return err
	})
}

// holders returns the first n nodes (by index) holding egress IPs.
func (h *harness) holders(n int) []string {
	holds := map[string]bool{}
	for _, node := range h.tr.assignments() {
		holds[node] = true
	}
	var out []string
	for _, a := range h.nodes {
		if holds[a.Name] && len(out) < n {
			out = append(out, a.Name)
		}
	}
	return out
}

// unlabel removes the egress-assignable label from nodes (the tracker knows first).
func (h *harness) unlabel(ctx context.Context, nodes []string) {
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, annotations.EgressAssignableLabel))
	h.parallel(len(nodes), func(i int) error {
		h.tr.loseNode(nodes[i], time.Now())
		_, err := h.kube.CoreV1().Nodes().Patch(ctx, nodes[i], types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
}

// String renders the memory figures in MiB.
func (m memory) String() string {
	live := "n/a"
	if m.HeapLive >= 0 {
		live = fmt.Sprintf("%.1f MiB", m.HeapLive/mib)
	}
	return fmt.Sprintf("heap in use %.1f MiB (live after its last GC %s), RSS %.1f MiB", m.HeapInuse/mib, live, m.RSS/mib)
}

// masterCommit describes the master's own event -> NB commit measure of a phase ("" when no sync assigned or moved
// an IP).
func masterCommit(h metrics.Histo) string {
	if h.Count == 0 {
		return ""
	}
	return fmt.Sprintf("; the master's own measure, first event of a sync -> its NB commit: mean %v over %d syncs that assigned or moved IPs",
		time.Duration(h.Sum/float64(h.Count)*float64(time.Second)).Round(time.Millisecond), h.Count)
}
