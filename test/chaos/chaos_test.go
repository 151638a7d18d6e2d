// Package chaos runs ovnkube on the local cluster (test/cluster) under a stream of random changes and faults, with
// served pods probing the external host all the time, and checks the cluster against the documented semantics after
// every round (see docs/chaos.md). Root only; it drives the one OVS data plane of the machine (take the lock).
package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

var (
	flagDuration = flag.Duration("chaos.duration", 10*time.Minute, "how long to inject changes and faults")
	flagNB       = flag.String("chaos.nb", cluster.NBRaft, "NB layout: raft or standalone (centralized layout; the interconnect layout's zone NBs are standalone)")
	flagLayout   = flag.String("chaos.layout", cluster.LayoutCentralized, "OVN layout: centralized (a master, one NB) or interconnect (a cluster manager, one zone per node)")
	flagSeed     = flag.Int64("chaos.seed", 0, "random seed (0: from the clock; printed)")
	flagRace     = flag.Bool("chaos.race", false, "build ovnkube with the race detector (about 5x the CPU and memory)")
	flagMode     = flag.String("chaos.gateway-mode", cluster.GatewayShared, "gateway mode: shared or local (local also checks each node's host state)")
	flagReach    = flag.Duration("chaos.reachability-timeout", 0, "ovnkube --egressip-reachability-total-timeout (0: ovnkube's default; see docs/reliability.md)")
	flagKeepLogs = flag.Bool("chaos.keep-logs", false, "keep the processes' logs (in <dir>-logs) when the test passes too")
	flagTell     = flag.Duration("chaos.tell-after", 30*time.Second, "a check not converged after this long logs what it waits for")
	flagConverge = flag.Duration("chaos.converge", 90*time.Second, "how long a check waits for convergence before it counts rows as stale/missing")
)

var ovnkubeBin string

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Println("chaos: skipped: needs root (network namespaces, OVS); CI runs it as root")
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "oeip-chaos-bin")
	if err != nil {
		panic(err)
	}
	ovnkubeBin = filepath.Join(dir, "ovnkube")
	args := []string{"build", "-o", ovnkubeBin, "./go-controller/cmd/ovnkube"}
	if *flagRace {
		args = []string{"build", "-race", "-o", ovnkubeBin, "./go-controller/cmd/ovnkube"}
	}
	build := exec.Command("go", args...)
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Printf("chaos: building ovnkube failed: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Fault kinds.
const (
	faultNone      = "none"
	faultMaster    = "kill -9 master"
	faultNode      = "kill -9 node daemon"
	faultNBLeader  = "kill -9 NB leader"
	faultAPIServer = "apiserver restart"
	faultLinks     = "node links cut"
	// The interconnect layout's: the cluster manager takes the master's place (its kill is faultCM); a zone
	// controller (the per-node process, as faultNode) killed and restarted after a random delay of 1 to 9 s, within
	// or beyond the release linger; one zone's NB and SB ovsdb-servers killed and started again 0 to 3 s later.
	faultCM     = "kill -9 cluster manager"
	faultZone   = "kill -9 zone controller"
	faultZoneDB = "zone NB+SB restart"
)

// Change kinds.
const (
	chEIPCreate = "EgressIP created"
	chEIPEdit   = "EgressIP edited"
	chEIPDelete = "EgressIP deleted"
	chPodAdd    = "pod added"
	chPodDel    = "pod removed"
	chNSLabel   = "namespace relabelled"
	chNodeLabel = "node labelled/unlabelled"
)

const (
	maxEIPs    = 3
	maxPods    = 8
	namespaces = 4
)

// eipPool is EgressIP i's own address pool (i = 1..maxEIPs): no two EgressIPs ever ask for one address.
func eipPool(i int) []string {
	var out []string
	for k := 0; k < 4; k++ {
		out = append(out, fmt.Sprintf("172.18.0.%d", 50+10*i+k))
	}
	return out
}

// probeStat counts probe results.
type probeStat struct {
	ok, insideWindow, outsideWindow, failedInside, failedOutside int
	outside                                                      []string // details of unexpected sources outside the window
}

type probeResult struct {
	pod        string
	start, end time.Time
	src        netip.Addr
	err        error
}

type harness struct {
	t   *testing.T
	ctx context.Context
	c   *cluster.Cluster
	eip egressipclientset.Interface
	sup *supervisor
	chk *checker
	rnd *rand.Rand
	log *os.File
	// leader is the supervised name of the leader-elected process: "master" or "cluster-manager" (interconnect).
	leader string

	mu       sync.Mutex
	cut      map[string]bool
	pods     map[string]*podProbe // namespace/name -> prober
	window   bool                 // changes or faults not yet seen converged
	windows  int                  // windows opened so far
	pending  []probeResult        // probes made inside the window, classified at convergence
	expected map[string][]netip.Addr
	probes   probeStat

	faults      map[string]int
	longest     map[string]time.Duration
	changeCount map[string]int
	checks      int
	badCheck    []string
	// hostPending counts polls that found some node's host state (local gateway mode) not yet as it must be
	// (the checker did look); hostExample is the first such finding.
	hostPending int
	hostExample string
	samples     map[string][]sample
	podSeq      int
	deck        []string // fault kinds still to come in this cycle
}

type podProbe struct {
	stop chan struct{}
	done chan struct{}
}

func (h *harness) logf(format string, args ...any) {
	line := fmt.Sprintf(time.Now().Format("15:04:05 ")+format, args...)
	h.t.Log(line)
	fmt.Fprintln(h.log, line)
}

func TestChaos(t *testing.T) {
	seed := *flagSeed
	if seed == 0 {
		seed = time.Now().UnixNano()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *flagDuration+30*time.Minute)
	defer cancel()
	dir := filepath.Join(repoRoot(), "_output", "chaos")
	_ = cluster.Down(ctx, dir)
	nb := *flagNB
	if *flagLayout == cluster.LayoutInterconnect {
		nb = cluster.NBStandalone // one NB per zone
	}
	c, err := cluster.Up(ctx, cluster.Config{StateDir: dir, Nodes: 3, GatewayMode: *flagMode, NB: nb, Layout: *flagLayout,
		RepoRoot: repoRoot(), Logf: t.Logf})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	logDir := filepath.Join(dir, "log")
	resultsName := "chaos-results-" + c.GatewayMode() + ".txt"
	if c.Layout() == cluster.LayoutInterconnect {
		resultsName = "chaos-results-interconnect-" + c.GatewayMode() + ".txt"
	}
	results, err := os.Create(filepath.Join(repoRoot(), "_output", resultsName))
	if err != nil {
		t.Fatal(err)
	}
	defer results.Close()
	h := &harness{t: t, ctx: ctx, c: c, rnd: rand.New(rand.NewSource(seed)), log: results,
		sup: newSupervisor(logDir), cut: map[string]bool{}, pods: map[string]*podProbe{},
		faults: map[string]int{}, longest: map[string]time.Duration{}, changeCount: map[string]int{}, samples: map[string][]sample{}}
	t.Cleanup(func() {
		h.stopProbes()
		h.sup.stop()
		for n := range h.cut {
			_ = c.SetNodeLinks(context.Background(), n, true)
		}
		if t.Failed() || *flagKeepLogs {
			keep := dir + "-logs"
			_ = os.RemoveAll(keep)
			if out, err := exec.Command("cp", "-a", logDir, keep).CombinedOutput(); err == nil {
				t.Logf("logs kept in %s", keep)
			} else {
				t.Logf("could not keep logs: %v %s", err, out)
			}
		}
		c.Close()
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer dcancel()
		if err := cluster.Down(dctx, dir); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	if h.interconnect() {
		h.leader = "cluster-manager"
		h.logf("chaos: seed %d, duration %s, %s gateway mode, interconnect layout (one zone per node, NB of zone <node> %s)",
			seed, *flagDuration, c.GatewayMode(), c.ZoneNBAddress("<node>"))
	} else {
		h.leader = "master"
		h.logf("chaos: seed %d, duration %s, %s gateway mode, NB %s (%s)", seed, *flagDuration, c.GatewayMode(), nb, c.NBAddress())
	}
	rc, err := c.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	h.eip = egressipclientset.NewForConfigOrDie(rc)
	h.chk = &checker{kube: c.Client(), eip: h.eip, nb: map[string]client.Client{}, c: c, isCut: h.isCut}
	if h.interconnect() {
		for _, n := range c.Nodes() {
			h.chk.nb[n.Name] = h.dialNB(c.ZoneNBAddress(n.Name))
		}
	} else {
		h.chk.nb[""] = h.dialNB(c.NBAddress())
	}
	h.startOvnkube()
	h.setup()
	h.run(*flagDuration)
	h.report()
}

func (h *harness) isCut(node string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cut[node]
}

// interconnect reports whether the cluster runs one OVN zone per node.
func (h *harness) interconnect() bool { return h.c.Layout() == cluster.LayoutInterconnect }

// dialNB is the checker's own client of one NB (comma-separated members: leader only), reconnecting.
func (h *harness) dialNB(address string) client.Client {
	dbm, err := model.NewClientDBModel("OVN_Northbound", map[string]model.Model{
		nbdb.LogicalRouterTable: &nbdb.LogicalRouter{}, nbdb.LogicalRouterPolicyTable: &nbdb.LogicalRouterPolicy{},
		nbdb.NATTable: &nbdb.NAT{}, nbdb.AddressSetTable: &nbdb.AddressSet{}})
	if err != nil {
		h.t.Fatal(err)
	}
	nb := nbserver.Connect(h.ctx, h.t, address, dbm, 30*time.Second, nbserver.Reconnect(10*time.Second, 50*time.Millisecond, time.Second))
	cctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	if _, err := nb.MonitorAll(cctx); err != nil {
		h.t.Fatal(err)
	}
	return nb
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startOvnkube starts the layout's processes with the local cluster's command lines (cluster.OvnkubeLeaderArgs,
// OvnkubeNodeArgs): the master (centralized) or cluster manager (interconnect), and one process per node in its
// netns: the node daemon, with the node's zone controller in the interconnect layout.
func (h *harness) startOvnkube() {
	master := &proc{name: h.leader, metrics: freePort(h.t)}
	leader := h.c.Ovnkube(h.c.Kubeconfig(), "2", h.c.OvnkubeLeaderArgs()...)
	leader.Metrics = master.metrics
	if *flagReach > 0 {
		leader.Extra = []string{"--egressip-reachability-total-timeout", flagReach.String()}
	}
	master.argv = append([]string{ovnkubeBin}, leader.Args()...)
	if err := h.sup.add(master); err != nil {
		h.t.Fatal(err)
	}
	for i, n := range h.c.Nodes() {
		ns, err := h.c.NodeNetns(n.Name)
		if err != nil {
			h.t.Fatal(err)
		}
		p := &proc{name: "node-" + n.Name, netns: ns, metrics: fmt.Sprintf("127.0.0.1:%d", 29200+i)}
		daemon := h.c.Ovnkube(h.c.Kubeconfig(), "2", h.c.OvnkubeNodeArgs(n.Name)...)
		daemon.Metrics = p.metrics
		p.argv = append([]string{ovnkubeBin}, daemon.Args()...)
		if err := h.sup.add(p); err != nil {
			h.t.Fatal(err)
		}
	}
}

// setup: namespaces ns1..ns4 (team=t1..t4), two egress-assignable nodes, one EgressIP, four pods: two that eip1
// serves whatever its pod selector (ns1, app=web), on node1 (no egress node: in the interconnect layout a zone
// that reroutes over the transit switch) and node2 (an egress node), and two at random.
func (h *harness) setup() {
	for i := 1; i <= namespaces; i++ {
		h.must(h.ensureNamespace(fmt.Sprintf("ns%d", i), fmt.Sprintf("t%d", i)))
	}
	h.must(h.labelNode("node2", true))
	h.must(h.labelNode("node3", true))
	h.must(h.createEIP(1))
	h.must(h.addPodAt("node1", "ns1", "web"))
	h.must(h.addPodAt("node2", "ns1", "web"))
	for i := 0; i < 2; i++ {
		h.must(h.addPod())
	}
	start := time.Now()
	if v, ok := h.converge(false); !ok {
		h.t.Fatalf("the initial state did not converge in %s: %v", *flagConverge, v)
	}
	h.logf("setup converged in %.1fs", time.Since(start).Seconds())
}

func (h *harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

// retry retries an API call while the apiserver is away (a restart injected by the harness itself).
func retry(ctx context.Context, f func() error) error {
	var err error
	for i := 0; i < 120; i++ {
		if err = f(); err == nil || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return err
}

func (h *harness) ensureNamespace(name, team string) error {
	return retry(h.ctx, func() error {
		ns, err := h.c.Client().CoreV1().Namespaces().Get(h.ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = h.c.Client().CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: name, Labels: map[string]string{"team": team}}}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		ns.Labels = map[string]string{"team": team}
		_, err = h.c.Client().CoreV1().Namespaces().Update(h.ctx, ns, metav1.UpdateOptions{})
		return err
	})
}

func (h *harness) labelNode(node string, on bool) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, annotations.EgressAssignableLabel)
	if on {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, annotations.EgressAssignableLabel)
	}
	return retry(h.ctx, func() error {
		_, err := h.c.Client().CoreV1().Nodes().Patch(h.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	})
}

func (h *harness) pickIPs(i int) []string {
	pool := eipPool(i)
	h.rnd.Shuffle(len(pool), func(a, b int) { pool[a], pool[b] = pool[b], pool[a] })
	ips := pool[:1+h.rnd.Intn(2)]
	sort.Strings(ips)
	return ips
}

func (h *harness) podSelector() metav1.LabelSelector {
	if h.rnd.Intn(2) == 0 {
		return metav1.LabelSelector{}
	}
	return metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
}

// createEIP creates eip<i>: namespaces of team t<i>, its own address pool.
func (h *harness) createEIP(i int) error {
	e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("eip%d", i)},
		Spec: egressipv1.EgressIPSpec{EgressIPs: h.pickIPs(i),
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", i)}},
			PodSelector:       h.podSelector()}}
	return retry(h.ctx, func() error {
		_, err := h.eip.K8sV1().EgressIPs().Create(h.ctx, e, metav1.CreateOptions{})
		return err
	})
}

func (h *harness) eipNames() []int {
	var out []int
	list, err := h.eip.K8sV1().EgressIPs().List(h.ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	for _, e := range list.Items {
		var i int
		if _, err := fmt.Sscanf(e.Name, "eip%d", &i); err == nil {
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out
}

func (h *harness) addPod() error {
	node := h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
	ns := fmt.Sprintf("ns%d", 1+h.rnd.Intn(namespaces))
	app := []string{"web", "db"}[h.rnd.Intn(2)]
	return h.addPodAt(node, ns, app)
}

// addPodAt adds a pod app=app on node in namespace ns and starts probing from it.
func (h *harness) addPodAt(node, ns, app string) error {
	h.podSeq++
	name := fmt.Sprintf("p%d", h.podSeq)
	// The apiserver may be restarting: 30 s of tries.
	err := waitfor.Retry(context.Background(), 30*time.Second, 500*time.Millisecond, func() error {
		_, err := h.c.CreatePod(h.ctx, cluster.PodSpec{Namespace: ns, Name: name, Node: node,
			Labels: map[string]string{"app": app}})
		return err
	})
	if err != nil {
		return fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	h.startProbe(ns + "/" + name)
	return nil
}

func (h *harness) deletePod(key string) error {
	h.stopProbe(key)
	ns, name, _ := strings.Cut(key, "/")
	return retry(h.ctx, func() error { return h.c.DeletePod(h.ctx, ns, name) })
}

// change applies one random change and returns its kind.
func (h *harness) change() (string, error) {
	eips := h.eipNames()
	h.mu.Lock()
	var pods []string
	for k := range h.pods {
		pods = append(pods, k)
	}
	h.mu.Unlock()
	sort.Strings(pods)
	switch h.rnd.Intn(7) {
	case 0:
		for i := 1; i <= maxEIPs; i++ {
			if !slices.Contains(eips, i) {
				return chEIPCreate, h.createEIP(i)
			}
		}
		fallthrough
	case 1:
		if len(eips) > 0 {
			i := eips[h.rnd.Intn(len(eips))]
			return chEIPEdit, retry(h.ctx, func() error {
				e, err := h.eip.K8sV1().EgressIPs().Get(h.ctx, fmt.Sprintf("eip%d", i), metav1.GetOptions{})
				if err != nil {
					return err
				}
				if h.rnd.Intn(2) == 0 {
					e.Spec.EgressIPs = h.pickIPs(i)
				} else {
					e.Spec.PodSelector = h.podSelector()
				}
				_, err = h.eip.K8sV1().EgressIPs().Update(h.ctx, e, metav1.UpdateOptions{})
				return err
			})
		}
		return h.change()
	case 2:
		if len(eips) > 1 {
			i := eips[h.rnd.Intn(len(eips))]
			return chEIPDelete, retry(h.ctx, func() error {
				return h.eip.K8sV1().EgressIPs().Delete(h.ctx, fmt.Sprintf("eip%d", i), metav1.DeleteOptions{})
			})
		}
		return h.change()
	case 3:
		if len(pods) < maxPods {
			return chPodAdd, h.addPod()
		}
		fallthrough
	case 4:
		if len(pods) > 2 {
			return chPodDel, h.deletePod(pods[h.rnd.Intn(len(pods))])
		}
		return chPodAdd, h.addPod()
	case 5:
		i := 1 + h.rnd.Intn(namespaces)
		return chNSLabel, h.ensureNamespace(fmt.Sprintf("ns%d", i), fmt.Sprintf("t%d", 1+h.rnd.Intn(maxEIPs+1)))
	default:
		n := h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
		return chNodeLabel, h.labelNode(n, h.rnd.Intn(3) > 0)
	}
}

// changes applies 1 to 3 random changes.
func (h *harness) changes(round int) []string {
	var what []string
	for i, n := 0, 1+h.rnd.Intn(3); i < n; i++ {
		kind, err := h.change()
		if err != nil {
			h.t.Fatalf("round %d: %s: %v", round, kind, err)
		}
		h.changeCount[kind]++
		what = append(what, kind)
	}
	return what
}

// fault injects the next fault of a shuffled deck of every kind, makes the round's changes while it lasts (before it, for an apiserver restart,
// since nothing can be changed while the apiserver is away), and heals it: the supervisor restarts a killed ovnkube
// process (as the kubelet would), a killed NB member is restarted 2 to 5 s later, a node's links are restored once
// the checker has seen its egress IPs move away. It returns the fault's kind, the changes and when the fault began.
func (h *harness) fault(round int) (string, []string, time.Time, error) {
	if len(h.deck) == 0 {
		// A shuffled deck of every kind: each one comes up once before any comes up again, so that even a short
		// run injects them all.
		h.deck = []string{faultNone, faultMaster, faultNode, faultAPIServer, faultLinks}
		if h.c.NBRaft() {
			h.deck = append(h.deck, faultNBLeader)
		}
		if h.interconnect() {
			h.deck = []string{faultNone, faultCM, faultNode, faultZone, faultZoneDB, faultAPIServer, faultLinks}
		}
		h.rnd.Shuffle(len(h.deck), func(i, j int) { h.deck[i], h.deck[j] = h.deck[j], h.deck[i] })
	}
	kind := h.deck[0]
	h.deck = h.deck[1:]
	t0 := time.Now()
	switch kind {
	case faultMaster, faultCM:
		if err := h.sup.kill9(h.leader, restartDelay); err != nil {
			return kind, nil, t0, err
		}
		what := h.changes(round) // while no master runs (the new one waits for the Lease to expire)
		return kind, what, t0, h.waitServing(h.leader)
	case faultNode, faultZone:
		n := "node-" + h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
		delay := restartDelay
		if kind == faultZone {
			delay = time.Duration(1+h.rnd.Intn(9)) * time.Second
		}
		if err := h.sup.kill9(n, delay); err != nil {
			return kind, nil, t0, err
		}
		what := h.changes(round) // while the process is down: moves its zone has yet to see
		if kind == faultZone {
			h.logf("round %d: %s killed, restarted %s later", round, n, delay)
		}
		return kind, what, t0, h.waitServing(n)
	case faultZoneDB:
		n := h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
		if err := h.c.StopZoneDatabases(h.ctx, n, false); err != nil {
			return kind, nil, t0, err
		}
		// The zone's controller, northd and ovn-controller lose their databases; the databases come back after down
		// whatever the changes do meanwhile (the harness' own pod wiring in that zone waits for them, and retries).
		down := time.Duration(h.rnd.Intn(4)) * time.Second
		started := make(chan error, 1)
		go func() {
			select {
			case <-h.ctx.Done():
			case <-time.After(down):
			}
			started <- h.c.StartZoneDatabases(h.ctx, n, false)
		}()
		what := h.changes(round)
		err := <-started
		h.logf("round %d: zone %s's NB and SB down %s", round, n, down)
		return kind, what, t0, err
	case faultNBLeader:
		l, err := h.c.NBLeader(h.ctx)
		if err != nil {
			return kind, nil, t0, err
		}
		if err := h.c.KillNBMember(l); err != nil {
			return kind, nil, t0, err
		}
		what := h.changes(round) // the master's syncs fail until it has found the new leader
		//nolint:forbidigo // the fault's length: the old NB leader stays down 2-5 s while the changes go on
		time.Sleep(time.Duration(2+h.rnd.Intn(4)) * time.Second)
		return kind, what, t0, h.c.StartNBMember(h.ctx, l)
	case faultAPIServer:
		what := h.changes(round)
		t0 = time.Now()
		return kind, what, t0, h.c.RestartAPIServer(h.ctx, time.Duration(h.rnd.Intn(3))*time.Second)
	case faultLinks:
		n := h.c.Nodes()[h.rnd.Intn(len(h.c.Nodes()))].Name
		h.mu.Lock()
		h.cut[n] = true
		h.mu.Unlock()
		if err := h.c.SetNodeLinks(h.ctx, n, false); err != nil {
			return kind, nil, t0, err
		}
		what := h.changes(round)
		// The master must find the node unreachable and move its IPs (checked; with no other egress node left to
		// answer, it keeps them: the checker's held), then the links come back.
		// In the interconnect layout the cut node's zone controller cannot hear the apiserver either: its zone and
		// its Node's annotations stay as they were until the links are back, so only status is checked then, and
		// the window stays open (the check after the links are back is the round's).
		if v, ok := h.converge(h.interconnect()); !ok {
			h.badCheck = append(h.badCheck, fmt.Sprintf("round %d, while %s's links were cut: %v", round, n, v))
		}
		h.openWindow() // the node comes back: an EgressIP short of nodes gets its other IPs
		h.mu.Lock()
		delete(h.cut, n)
		h.mu.Unlock()
		return kind, what, t0, h.c.SetNodeLinks(h.ctx, n, true)
	}
	return kind, h.changes(round), t0, nil
}

// waitServing waits until the restarted process answers on its metrics address (it is up again).
func (h *harness) waitServing(name string) error {
	h.sup.mu.Lock()
	p := h.sup.procs[name]
	h.sup.mu.Unlock()
	if err := waitfor.Until(context.Background(), 60*time.Second, 100*time.Millisecond, func() (bool, error) {
		return scrape(h.ctx, p).goroutines >= 0, nil
	}); err != nil {
		return fmt.Errorf("%s does not serve metrics 60 s after it was killed", name)
	}
	return nil
}

// converge polls the checker until the cluster is what it must be (true) or flagConverge passes (false, with the
// last verdict). On success, it classifies the probes made inside the window and closes the window; on failure the
// window stays open until a later check converges. statusOnly checks EgressIP status alone and leaves the window
// open (interconnect layout, while a node is cut off: its zone cannot follow until its links are back).
//
// A check counts only when a master leads and its sync queue was idle before the check and still is after it, with
// nothing added meanwhile (workqueue metrics, metricsutil): the state checked is then the master's answer to every
// fault and change so far, not a state it has yet to react to. (Without that, a check made while no master led, say
// a new master waiting out the Lease after an apiserver restart, saw the old rows still right; the master then
// found a node killed meanwhile unreachable and moved its IP, after the window had closed.) In the interconnect
// layout the same holds for the cluster manager and for every zone controller (the same queue, in each node's
// process), each with the same pid before and after.
func (h *harness) converge(statusOnly bool) (verdict, bool) {
	start := time.Now()
	deadline := start.Add(*flagConverge)
	var v verdict
	var err error
	told := false
	converged := false
	_ = waitfor.Until(context.Background(), 0, 250*time.Millisecond, func() (bool, error) { // returns when done
		pid0, q0 := h.masterQueue()
		z0 := h.zoneQueues(statusOnly)
		v, err = h.chk.check(h.ctx, statusOnly)
		if err == nil && !statusOnly {
			h.countHostPending(v)
		}
		if err == nil && v.ok() && !h.masterQuiet(q0) {
			err = fmt.Errorf("master not idle, or finds a node unreachable that is not cut (%s)", q0)
		}
		if err == nil && v.ok() {
			err = zonesQuiet(z0, nil)
		}
		if !told && time.Since(start) > *flagTell && (err != nil || !v.ok()) {
			told = true // what a long re-convergence is waiting for
			h.logf("not converged after %s (err %v): %v", *flagTell, err, v)
		}
		if err == nil && v.ok() {
			// Status and NB are right; OVN carries NB to the data path (northd to SB, ovn-controller to
			// OpenFlow): wait for it, as ovn-nbctl --wait=hv does, before the probes must see it.
			if !statusOnly {
				err = h.c.WaitDataPath(h.ctx, time.Until(deadline))
			}
			if err == nil {
				pid1, q1 := h.masterQueue()
				err = zonesQuiet(h.zoneQueues(statusOnly), z0)
				if err == nil && pid1 == pid0 && h.masterQuiet(q1) && q1.adds == q0.adds {
					if !statusOnly {
						h.closeWindow(v)
					}
					converged = true
					return true, nil
				}
				if err == nil {
					err = fmt.Errorf("master synced during the check (before %s, after %s)", q0, q1)
				}
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				v.statusErrs = append(v.statusErrs, "check: "+err.Error())
			}
			return true, nil // the window stays open: the failed check is reported, not the probes
		}
		return false, nil
	})
	return v, converged
}

// zoneQueue is a zone controller's sync queue as read once, with the pid of its process.
type zoneQueue struct {
	pid int
	q   queueState
}

// zoneQueues reads every zone controller's sync queue (interconnect layout; nil in the centralized one), skipping
// the zones of nodes whose links are cut when skipCut.
func (h *harness) zoneQueues(skipCut bool) map[string]zoneQueue {
	if !h.interconnect() {
		return nil
	}
	out := map[string]zoneQueue{}
	for _, n := range h.c.Nodes() {
		if skipCut && h.isCut(n.Name) {
			continue
		}
		name := "node-" + n.Name
		h.sup.mu.Lock()
		p := h.sup.procs[name]
		h.sup.mu.Unlock()
		zq := zoneQueue{pid: h.sup.pid(name)}
		if q, err := readQueue(h.ctx, p, "egressip-master"); err == nil {
			zq.q = q
		}
		out[name] = zq
	}
	return out
}

// zonesQuiet: every zone controller's queue is idle; with before, also the same process with nothing added since.
func zonesQuiet(now, before map[string]zoneQueue) error {
	for name, z := range now {
		if !z.q.idle() {
			return fmt.Errorf("zone controller %s not idle (%s)", name, z.q)
		}
		if b, ok := before[name]; before != nil && (!ok || b.pid != z.pid || b.q.adds != z.q.adds) {
			return fmt.Errorf("zone controller %s synced during the check (before %s pid %d, after %s pid %d)", name, b.q, b.pid, z.q, z.pid)
		}
	}
	return nil
}

// masterQuiet: the master leads, its sync queue is idle, and its health check finds every node reachable but
// those whose links are cut (a node it has yet to find reachable again would make it sync: an EgressIP short of
// nodes gets its other IPs).
func (h *harness) masterQuiet(q queueState) bool {
	if !q.idle() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range q.unreachable {
		if !h.cut[n] {
			return false
		}
	}
	return true
}

// masterQueue reads the master's (cluster manager's) pid and its sync queue's metrics (absent while it stands by).
func (h *harness) masterQueue() (int, queueState) {
	h.sup.mu.Lock()
	p := h.sup.procs[h.leader]
	h.sup.mu.Unlock()
	pid := h.sup.pid(h.leader)
	if p == nil {
		return pid, queueState{}
	}
	q, err := readQueue(h.ctx, p, "egressip-master")
	if err != nil {
		return pid, queueState{}
	}
	return pid, q
}

// countHostPending counts a poll whose verdict has host items (local gateway mode).
func (h *harness) countHostPending(v verdict) {
	for _, l := range append(slices.Clone(v.missing), v.stale...) {
		if strings.HasPrefix(l, "host ") {
			h.hostPending++
			if h.hostExample == "" {
				h.hostExample = l
			}
			return
		}
	}
}

func (h *harness) openWindow() {
	h.mu.Lock()
	h.window = true
	h.windows++
	h.mu.Unlock()
}

// closeWindow counts the probes of the window against the converged state's sources.
func (h *harness) closeWindow(v verdict) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.pending {
		switch {
		case r.err != nil:
			h.probes.failedInside++
		case slices.Contains(v.sources[r.pod], r.src):
			h.probes.ok++
		default:
			h.probes.insideWindow++
		}
	}
	h.pending = nil
	h.expected = v.sources
	h.window = false
}

func (h *harness) startProbe(key string) {
	p := &podProbe{stop: make(chan struct{}), done: make(chan struct{})}
	h.mu.Lock()
	h.pods[key] = p
	h.mu.Unlock()
	ns, name, _ := strings.Cut(key, "/")
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			h.mu.Lock()
			inWindow, gen := h.window, h.windows
			h.mu.Unlock()
			start := time.Now()
			src, err := h.c.Request(h.ctx, ns, name, "tcp", 2*time.Second)
			h.record(probeResult{pod: key, start: start, end: time.Now(), src: src, err: err}, inWindow, gen)
		}
	}()
}

// record counts a probe. A probe that started and ended outside a window, with no window opened meanwhile (the
// cluster seen converged, no change or fault since), must leave with the expected source.
func (h *harness) record(r probeResult, startedInWindow bool, gen int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if startedInWindow || h.window || gen != h.windows || h.expected == nil {
		h.pending = append(h.pending, r)
		return
	}
	switch {
	case r.err != nil:
		h.probes.failedOutside++
		h.probes.outside = append(h.probes.outside, fmt.Sprintf("%s %s: %v", r.start.Format("15:04:05.000"), r.pod, r.err))
	case slices.Contains(h.expected[r.pod], r.src):
		h.probes.ok++
	default:
		h.probes.outsideWindow++
		h.probes.outside = append(h.probes.outside, fmt.Sprintf("%s %s: source %s, want one of %v",
			r.start.Format("15:04:05.000"), r.pod, r.src, h.expected[r.pod]))
	}
}

func (h *harness) stopProbe(key string) {
	h.mu.Lock()
	p := h.pods[key]
	delete(h.pods, key)
	h.mu.Unlock()
	if p != nil {
		close(p.stop)
		<-p.done
	}
}

func (h *harness) stopProbes() {
	h.mu.Lock()
	var keys []string
	for k := range h.pods {
		keys = append(keys, k)
	}
	h.mu.Unlock()
	for _, k := range keys {
		h.stopProbe(k)
	}
}

// sampleAll records memory and goroutines of every ovnkube process and the RSS of every cluster daemon.
func (h *harness) sampleAll() {
	for _, name := range h.sup.names() {
		h.sup.mu.Lock()
		p := h.sup.procs[name]
		h.sup.mu.Unlock()
		s := scrape(h.ctx, p)
		if s.rss < 0 {
			s.rss = rssOf(h.sup.pid(name))
		}
		h.samples["ovnkube "+name] = append(h.samples["ovnkube "+name], s)
	}
	for name, pid := range h.c.DaemonPids() {
		if name == "agent" || name == "echo" {
			continue
		}
		h.samples[name] = append(h.samples[name], sample{goroutines: -1, heapLive: -1, rss: rssOf(pid)})
	}
}

// run injects rounds until d has passed: 1 to 3 random changes and one random fault, then a check that waits for
// convergence, then 2 s of quiet in which every probe must leave with the expected source. Resources are sampled
// every 30 s.
func (h *harness) run(d time.Duration) {
	end := time.Now().Add(d)
	lastSample := time.Time{}
	for round := 1; time.Now().Before(end); round++ {
		if time.Since(lastSample) >= 30*time.Second {
			h.sampleAll()
			lastSample = time.Now()
		}
		h.openWindow()
		kind, what, tf, err := h.fault(round)
		if err != nil {
			h.t.Fatalf("round %d: fault %s: %v", round, kind, err)
		}
		h.faults[kind]++
		v, ok := h.converge(false)
		took := time.Since(tf)
		h.checks++
		if took > h.longest[kind] {
			h.longest[kind] = took
		}
		if !ok {
			h.badCheck = append(h.badCheck, fmt.Sprintf("round %d (%v, %s): %v", round, what, kind, v))
			h.logf("round %d: NOT converged %s after %s (%v): %v", round, *flagConverge, kind, what, v)
		} else {
			h.logf("round %d: %s + %v: converged %.1fs after the fault began, %d pods, %d rows (reroutes, SNATs, served-pods addresses)", round, kind, what,
				took.Seconds(), len(v.sources), v.rows)
		}
		//nolint:forbidigo // a quiet time of the soak: 2 s with no fault and no change, whose probes must all be as expected
		time.Sleep(2 * time.Second)
	}
	h.sampleAll()
	// The final check, all faults healed.
	h.openWindow()
	v, ok := h.converge(false)
	h.checks++
	if !ok {
		h.badCheck = append(h.badCheck, fmt.Sprintf("final: %v", v))
	}
}

func (h *harness) report() {
	h.logf("== chaos results")
	var kinds []string
	for k := range h.faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		h.logf("fault %-24s injected %3d  longest re-convergence %5.1fs", k, h.faults[k], h.longest[k].Seconds())
	}
	var chs []string
	for k, n := range h.changeCount {
		chs = append(chs, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(chs)
	h.logf("changes: %s", strings.Join(chs, ", "))
	h.mu.Lock()
	p := h.probes
	h.mu.Unlock()
	h.logf("probes: %d as expected; unexpected source inside the window %d, outside the window %d; failed inside %d, outside %d",
		p.ok, p.insideWindow, p.outsideWindow, p.failedInside, p.failedOutside)
	h.logf("checks: %d, with stale/missing rows or wrong status: %d", h.checks, len(h.badCheck))
	if b, err := os.ReadFile(filepath.Join(h.sup.dir, "ovnkube-"+h.leader+".log")); err == nil {
		// The master's health check verdicts over every run of it (its log is appended to across restarts).
		h.logf("health check: nodes declared unreachable %d, held because no node answered (the master suspected itself) %d",
			strings.Count(string(b), "is unreachable (no health answer"), strings.Count(string(b), "the master suspects itself"))
	}
	// The userspace datapath of Debian bookworm's OVS 3.1 (the fallback when contrib/build-ovs.sh's OVS is not built)
	// sometimes aborts (a conntrack assertion) and its monitor restarts it: the data plane stops for about a second
	// (test/e2e reruns a failover case when it happens). Listed so that a failed probe can be matched with one.
	// (The interconnect layout has one more ovs-vswitchd per chassis: log/<node>-ovs-vswitchd.log.)
	if logs, _ := filepath.Glob(filepath.Join(h.c.StateDir(), "log", "*ovs-vswitchd.log")); len(logs) > 0 {
		var crashes []string
		for _, f := range logs {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, " died, killed ") {
					ts, _, _ := strings.Cut(l, "|")
					crashes = append(crashes, strings.TrimSuffix(filepath.Base(f), "ovs-vswitchd.log")+ts)
				}
			}
		}
		h.logf("ovs-vswitchd crashes (restarted by its monitor): %d %v", len(crashes), crashes)
	}
	if h.c.GatewayMode() == cluster.GatewayLocal {
		h.logf("host state: %d polls found a node's host not yet as it must be (first: %s)", h.hostPending, h.hostExample)
	}
	var names []string
	for n := range h.samples {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ss := h.samples[n]
		h.logf("trend %-26s %s", n, trend(ss))
	}
	h.sup.mu.Lock()
	for _, n := range h.sup.names2() {
		pr := h.sup.procs[n]
		h.logf("process %-14s restarts %d", n, pr.restarts)
	}
	h.sup.mu.Unlock()
	for _, b := range h.badCheck {
		h.t.Errorf("check failed: %s", b)
	}
	if p.outsideWindow > 0 || p.failedOutside > 0 {
		h.t.Errorf("%d probes left with an unexpected source and %d failed outside the window: %v", p.outsideWindow,
			p.failedOutside, p.outside)
	}
}

func (s *supervisor) names2() []string {
	var out []string
	for n := range s.procs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// trend prints first -> max -> last of RSS, live heap and goroutines over the samples.
func trend(ss []sample) string {
	pick := func(f func(sample) float64, scale float64, unit string) string {
		var vals []float64
		for _, s := range ss {
			if v := f(s); v >= 0 {
				vals = append(vals, v/scale)
			}
		}
		if len(vals) == 0 {
			return ""
		}
		return fmt.Sprintf("%s %.0f -> max %.0f -> %.0f%s  ", unit, vals[0], slices.Max(vals), vals[len(vals)-1], "")
	}
	return pick(func(s sample) float64 { return s.rss }, 1<<20, "RSS MiB") +
		pick(func(s sample) float64 { return s.heapLive }, 1<<20, "heap MiB") +
		pick(func(s sample) float64 { return s.goroutines }, 1, "goroutines")
}
