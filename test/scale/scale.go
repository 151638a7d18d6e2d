// Package scale runs the egress IP master at scale on real parts and measures it:
// a real kube-apiserver + etcd (test/apiserver), a real NB ovsdb-server
// (test/nbserver) holding the topology of N simulated nodes (test/cluster), and
// the master (go-controller/pkg/master) in this process. Nodes are simulated the
// way kwok simulates them: Node objects with a Ready condition and the egress
// facts a node daemon would publish; pods are Pod objects with a node and a pod
// IP in that node's subnet. Nothing sends packets: the data path is proven by
// test/e2e; this package measures how fast and how economically the master
// converges the API and NB under load and churn.
//
// Every phase ends when the cluster is converged, checked independently of the
// master's own logic: every spec egress IP is in status exactly once, on an
// egress-assignable node that is not lost, and NB holds exactly one reroute
// policy per served pod (next hops: the join IPs of the EgressIP's nodes) and one
// SNAT per served pod and egress IP on GR_<node> (shared gateway mode).
//
//	go test ./test/scale/ -run '^$' -bench . -benchtime 1x     (100 nodes, 5000 pods; see BenchmarkScale)
package scale

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipclient "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// Config is the size of a run.
type Config struct {
	// Nodes simulated (1..cluster.MaxNodes), all egress-assignable.
	Nodes int
	// Namespaces, each with one EgressIP selecting every pod in it.
	Namespaces int
	// PodsPerNamespace, spread round robin over the nodes (at most 250 per node).
	PodsPerNamespace int
	// IPsPerEgressIP is the length of each EgressIP's spec.egressIPs.
	IPsPerEgressIP int
	// LostNodes are unlabelled in the node-loss phase (their egress IPs move).
	LostNodes int
	// ChurnPods are deleted and as many created (same namespaces) in the pod-churn phase.
	ChurnPods int
	// StatusWriters is passed to the master (master.Params.StatusWriters; 0 = its default).
	StatusWriters int
	// Timeout bounds each phase (default 5 min).
	Timeout time.Duration
}

// Phase is what one phase measured.
type Phase struct {
	Name string
	// Converged is the time from the change (its last API write) until the cluster
	// was seen converged; polled every PollInterval, so it is accurate to that.
	Converged time.Duration
	// NBTransactions and StatusUpdates the master made during the phase (its metrics).
	NBTransactions float64
	StatusUpdates  float64
	// Syncs the master ran during the phase.
	Syncs float64
	// Moved is how many egress IPs changed node.
	Moved int
}

// Result is what a run measured.
type Result struct {
	Config Config
	// Pods, EgressIPs and EgressIPAddrs in the cluster at the start.
	Pods, EgressIPs, EgressIPAddrs int
	// NBRows owned by the master once converged at the start (policies, NAT, address sets).
	NBRows int
	Phases []Phase
	// HeapInUse is this process' Go heap in use after a GC, once converged, with the
	// master, its informer caches and NB cache, and the harness' own clients (bytes).
	HeapInUse uint64
}

// String renders r as one line per phase, for logs and benchmark output.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "SCALE %d nodes, %d pods, %d EgressIPs (%d egress IPs), %d NB rows owned; heap in use %.1f MiB\n",
		r.Config.Nodes, r.Pods, r.EgressIPs, r.EgressIPAddrs, r.NBRows, float64(r.HeapInUse)/(1<<20))
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "SCALE %-12s converged in %v (±%v): %v NB transactions, %v status updates, %v syncs, %d egress IPs moved\n",
			p.Name, p.Converged.Round(time.Millisecond), PollInterval, p.NBTransactions, p.StatusUpdates, p.Syncs, p.Moved)
	}
	return b.String()
}

// PollInterval is how often convergence is checked.
const PollInterval = 50 * time.Millisecond

// Metric names read from the master's registry (see go-controller/pkg/master/metrics.go).
const (
	metricNBTransactions = "ovnkube_master_egress_ip_nb_transactions_total"
	metricStatusUpdates  = "ovnkube_master_egress_ip_status_updates_total"
	metricSyncs          = "ovnkube_master_egress_ip_syncs_total"
)

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
	nb     client.Client // monitors every NB table, reads only
	reg    *prometheus.Registry
	nodes  []cluster.NodeAddrs
	byName map[string]cluster.NodeAddrs
	lost   map[string]bool

	mu     sync.Mutex
	pods   map[string]netip.Addr // "namespace/name" -> pod IP
	nextID int                   // pods created so far (names and IPs)
}

// Run starts the environment, lays out cfg and runs the phases: "assign" (every
// EgressIP created at once), "node-loss" (cfg.LostNodes unlabelled), "pod-churn"
// (cfg.ChurnPods pods replaced) and "idle" (a resync with nothing changed: no NB
// transaction and no status update are expected). Failures are fatal to t.
func Run(t testing.TB, cfg Config) Result {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Nodes < 1 || cfg.Nodes > cluster.MaxNodes || cfg.LostNodes >= cfg.Nodes {
		t.Fatalf("scale: %d nodes (%d lost) out of range", cfg.Nodes, cfg.LostNodes)
	}
	if cfg.Namespaces*cfg.PodsPerNamespace+cfg.ChurnPods > 250*cfg.Nodes {
		t.Fatalf("scale: more pods than the node subnets hold")
	}
	api := apiserver.Start(t)
	rc := rest.CopyConfig(api.Config)
	rc.QPS, rc.Burst = 2000, 4000
	h := &harness{
		t: t, cfg: cfg,
		kube: kubernetes.NewForConfigOrDie(rc), eips: eipclient.NewForConfigOrDie(rc),
		reg: prometheus.NewRegistry(), byName: map[string]cluster.NodeAddrs{}, lost: map[string]bool{},
		pods: map[string]netip.Addr{},
	}
	nbs := nbserver.Start(t)
	for i := 1; i <= cfg.Nodes; i++ {
		a, err := cluster.AddrsFor(i)
		if err != nil {
			t.Fatal(err)
		}
		h.nodes = append(h.nodes, a)
		h.byName[a.Name] = a
	}
	ctx := context.Background()
	if err := cluster.WriteNBTopology(ctx, nbs.Addr, h.nodes, cluster.GatewayShared); err != nil {
		t.Fatal(err)
	}
	h.nb = nbs.Client(t)
	h.layout(ctx)

	mctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- master.Run(mctx, master.Params{
			Kube: h.kube, EgressIP: h.eips, NBAddress: nbs.Addr, GatewayMode: "shared",
			ClusterSubnets: []netip.Prefix{netip.MustParsePrefix(cluster.ClusterCIDR)},
			JoinSubnets:    []netip.Prefix{netip.MustParsePrefix(cluster.JoinCIDR)},
			Metrics:        h.reg,
			StatusWriters:  cfg.StatusWriters,
		})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("master: %v", err)
		}
	})

	// The master is up once its start-up sync ran (over an empty cluster: no EgressIP yet).
	for deadline := time.Now().Add(cfg.Timeout); h.metric(metricSyncs) < 1; time.Sleep(PollInterval) {
		if time.Now().After(deadline) {
			t.Fatalf("scale: the master did not sync within %v", cfg.Timeout)
		}
	}

	res := Result{Config: cfg, Pods: len(h.pods), EgressIPs: cfg.Namespaces, EgressIPAddrs: cfg.Namespaces * cfg.IPsPerEgressIP}
	before := h.assignments(ctx)

	// assign: every EgressIP at once.
	res.Phases = append(res.Phases, h.phase(ctx, "assign", func() {
		h.parallel(cfg.Namespaces, func(i int) error {
			var ips []string
			for j := 0; j < cfg.IPsPerEgressIP; j++ {
				ips = append(ips, egressIPAddr(i*cfg.IPsPerEgressIP+j).String())
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
	}, before))
	res.NBRows = h.ownedRows(ctx)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapInUse = ms.HeapInuse

	// node-loss: the first LostNodes nodes holding egress IPs lose the label.
	if cfg.LostNodes > 0 {
		before := h.assignments(ctx)
		holders := map[string]bool{}
		for _, node := range before {
			holders[node] = true
		}
		var victims []string
		for _, n := range h.nodes {
			if holders[n.Name] && len(victims) < cfg.LostNodes {
				victims = append(victims, n.Name)
			}
		}
		res.Phases = append(res.Phases, h.phase(ctx, "node-loss", func() {
			h.parallel(len(victims), func(i int) error {
				h.mu.Lock()
				h.lost[victims[i]] = true
				h.mu.Unlock()
				patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, annotations.EgressAssignableLabel))
				_, err := h.kube.CoreV1().Nodes().Patch(ctx, victims[i], "application/merge-patch+json", patch, metav1.PatchOptions{})
				return err
			})
		}, before))
	}

	// pod-churn: ChurnPods pods deleted, as many created in their namespaces.
	if cfg.ChurnPods > 0 {
		before := h.assignments(ctx)
		h.mu.Lock()
		var victims []string
		for key := range h.pods {
			victims = append(victims, key)
		}
		h.mu.Unlock()
		sort.Strings(victims)
		victims = victims[:min(cfg.ChurnPods, len(victims))]
		res.Phases = append(res.Phases, h.phase(ctx, "pod-churn", func() {
			h.parallel(len(victims), func(i int) error {
				ns, name, _ := strings.Cut(victims[i], "/")
				if err := h.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
					return err
				}
				h.mu.Lock()
				delete(h.pods, victims[i])
				h.mu.Unlock()
				return h.createPod(ctx, ns)
			})
		}, before))
	}

	// idle: nothing changes; a full resync (a node annotation the master does not
	// read) must write nothing.
	before = h.assignments(ctx)
	res.Phases = append(res.Phases, h.phase(ctx, "idle", func() {
		patch := []byte(`{"metadata":{"annotations":{"scale.ovn-egressip/touch":"1"}}}`)
		if _, err := h.kube.CoreV1().Nodes().Patch(ctx, h.nodes[0].Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // several sync intervals
	}, before))
	return res
}

// layout creates the nodes, namespaces and pods.
func (h *harness) layout(ctx context.Context) {
	h.parallel(len(h.nodes), func(i int) error {
		n := cluster.SimulatedNode(h.nodes[i], true)
		st := n.Status
		created, err := h.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		created.Status = st
		_, err = h.kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		return err
	})
	h.parallel(h.cfg.Namespaces, func(i int) error {
		_, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceName(i)}}, metav1.CreateOptions{})
		return err
	})
	h.parallel(h.cfg.Namespaces*h.cfg.PodsPerNamespace, func(i int) error {
		return h.createPod(ctx, namespaceName(i%h.cfg.Namespaces))
	})
}

// createPod creates a running pod in ns, on the next node round robin, with the
// next free IP of that node's subnet.
func (h *harness) createPod(ctx context.Context, ns string) error {
	h.mu.Lock()
	id := h.nextID
	h.nextID++
	h.mu.Unlock()
	node := h.nodes[id%len(h.nodes)]
	ip, ok := cluster.PodIP(node.Subnet, id/len(h.nodes))
	if !ok {
		return fmt.Errorf("node %s subnet full", node.Name)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", id), Namespace: ns, Labels: map[string]string{"app": "scale"}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "c", Image: "scale.invalid/pause"}},
			TerminationGracePeriodSeconds: new(int64)},
	}
	created, err := h.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}
	if _, err := h.kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return err
	}
	h.mu.Lock()
	h.pods[ns+"/"+pod.Name] = ip
	h.mu.Unlock()
	return nil
}

// parallel runs f(0..n-1), 32 at a time; any error is fatal.
func (h *harness) parallel(n int, f func(i int) error) {
	h.t.Helper()
	var g errgroup.Group
	g.SetLimit(32)
	for i := 0; i < n; i++ {
		g.Go(func() error { return f(i) })
	}
	if err := g.Wait(); err != nil {
		h.t.Fatal(err)
	}
}

// phase runs change, then polls until converged, and returns the measurements.
// before maps egress IP -> node before the change (for Moved).
func (h *harness) phase(ctx context.Context, name string, change func(), before map[string]string) Phase {
	h.t.Helper()
	txns, updates, syncs := h.metric(metricNBTransactions), h.metric(metricStatusUpdates), h.metric(metricSyncs)
	change()
	start := time.Now()
	deadline := start.Add(h.cfg.Timeout)
	for {
		problem := h.converged(ctx)
		if problem == "" {
			break
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("scale: phase %s not converged after %v: %s", name, h.cfg.Timeout, problem)
		}
		time.Sleep(PollInterval)
	}
	p := Phase{Name: name, Converged: time.Since(start)}
	time.Sleep(300 * time.Millisecond) // let the master's last sync finish before reading its counters
	if h.converged(ctx) != "" {
		h.t.Fatalf("scale: phase %s: converged state did not hold: %s", name, h.converged(ctx))
	}
	p.NBTransactions = h.metric(metricNBTransactions) - txns
	p.StatusUpdates = h.metric(metricStatusUpdates) - updates
	p.Syncs = h.metric(metricSyncs) - syncs
	for ip, node := range h.assignments(ctx) {
		if was, ok := before[ip]; ok && was != node {
			p.Moved++
		}
	}
	return p
}

// assignments maps every assigned egress IP to its node, from EgressIP status.
func (h *harness) assignments(ctx context.Context) map[string]string {
	h.t.Helper()
	list, err := h.eips.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range list.Items {
		for _, it := range e.Status.Items {
			out[it.EgressIP] = it.Node
		}
	}
	return out
}

// converged returns "" when the API and NB show the converged state, else what is
// missing or wrong (the first few differences).
func (h *harness) converged(ctx context.Context) string {
	list, err := h.eips.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	h.mu.Lock()
	lost := make(map[string]bool, len(h.lost))
	for k := range h.lost {
		lost[k] = true
	}
	pods := make(map[string]netip.Addr, len(h.pods))
	for k, v := range h.pods {
		pods[k] = v
	}
	h.mu.Unlock()

	// Expected rows, from status alone.
	wantReroute := map[string]string{} // pod IP -> sorted next hops
	var wantSNAT []string              // "GR_x external <- logical"
	if len(list.Items) != h.cfg.Namespaces {
		return fmt.Sprintf("%d EgressIPs, want %d", len(list.Items), h.cfg.Namespaces)
	}
	for _, e := range list.Items {
		seen := map[string]bool{}
		var hops []string
		for _, it := range e.Status.Items {
			n, ok := h.byName[it.Node]
			if !ok || lost[it.Node] || seen[it.EgressIP] || !slices.Contains(e.Spec.EgressIPs, it.EgressIP) {
				return fmt.Sprintf("EgressIP %s: bad status item %s@%s", e.Name, it.EgressIP, it.Node)
			}
			seen[it.EgressIP] = true
			hops = append(hops, n.JoinIP.String())
		}
		if len(seen) != len(e.Spec.EgressIPs) {
			return fmt.Sprintf("EgressIP %s: %d of %d egress IPs assigned", e.Name, len(seen), len(e.Spec.EgressIPs))
		}
		sort.Strings(hops)
		for key, ip := range pods {
			if ns, _, _ := strings.Cut(key, "/"); ns != e.Name {
				continue
			}
			wantReroute[ip.String()] = strings.Join(hops, " ")
			for _, it := range e.Status.Items {
				wantSNAT = append(wantSNAT, fmt.Sprintf("%s %s <- %s", nbstate.GatewayRouter(it.Node), it.EgressIP, ip))
			}
		}
	}

	cur, err := nbstate.ReadCurrent(ctx, h.nb)
	if err != nil {
		return err.Error()
	}
	if len(cur.Stale) > 0 {
		return fmt.Sprintf("%d stale NB rows", len(cur.Stale))
	}
	gotReroute := map[string]string{}
	for k, p := range cur.Rows.Policies {
		if k.IDs.Rule != nbstate.RuleReroute {
			continue
		}
		src, ok := strings.CutPrefix(p.Match, "ip4.src == ")
		if !ok {
			return fmt.Sprintf("reroute policy with match %q", p.Match)
		}
		hops := slices.Clone(p.Nexthops)
		sort.Strings(hops)
		if _, dup := gotReroute[src]; dup {
			return "two reroute policies for " + src
		}
		gotReroute[src] = strings.Join(hops, " ")
	}
	var gotSNAT []string
	for k, n := range cur.Rows.NATs {
		gotSNAT = append(gotSNAT, fmt.Sprintf("%s %s <- %s", k.Router, n.ExternalIP, n.LogicalIP))
	}
	sort.Strings(wantSNAT)
	sort.Strings(gotSNAT)
	var diffs []string
	for ip, want := range wantReroute {
		if got := gotReroute[ip]; got != want {
			diffs = append(diffs, fmt.Sprintf("reroute %s: nexthops %q, want %q", ip, got, want))
		}
	}
	for ip := range gotReroute {
		if _, ok := wantReroute[ip]; !ok {
			diffs = append(diffs, "reroute for "+ip+" that no served pod has")
		}
	}
	if !slices.Equal(gotSNAT, wantSNAT) {
		diffs = append(diffs, fmt.Sprintf("%d SNAT rows, want %d (or different)", len(gotSNAT), len(wantSNAT)))
	}
	sort.Strings(diffs)
	if len(diffs) > 3 {
		diffs = append(diffs[:3], fmt.Sprintf("... %d more", len(diffs)-3))
	}
	return strings.Join(diffs, "; ")
}

// ownedRows counts the NB rows the master owns.
func (h *harness) ownedRows(ctx context.Context) int {
	cur, err := nbstate.ReadCurrent(ctx, h.nb)
	if err != nil {
		h.t.Fatal(err)
	}
	return cur.Rows.Len()
}

// metric reads a counter from the master's registry (0 when not yet exported).
func (h *harness) metric(name string) float64 {
	h.t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}
