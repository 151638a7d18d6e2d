// Package chaos runs ovnkube on the local cluster (test/cluster) under a stream of random changes and faults, with
// served pods probing the external host all the time, and checks the cluster against the documented semantics after
// every round (see docs/chaos.md). Root only; it drives the one OVS data plane of the machine (take the lock).
package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"

	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/repo"
)

var (
	flagDuration = flag.Duration("chaos.duration", 10*time.Minute, "how long to inject changes and faults")
	flagNB       = flag.String("chaos.nb", cluster.NBRaft, "NB layout: raft or standalone (centralized layout; the interconnect layout's zone NBs are standalone)")
	flagLayout   = flag.String("chaos.layout", cluster.LayoutCentralized, "OVN layout: centralized (a master, one NB) or interconnect (a cluster manager, one zone per node)")
	flagSeed     = flag.Int64("chaos.seed", 0, "random seed (0: from the clock; printed)")
	flagRace     = flag.Bool("chaos.race", false, "build ovnkube with the race detector (about 5x the CPU and memory)")
	flagMode     = flag.String("chaos.gateway-mode", string(gwmode.Shared), "gateway mode: shared or local (local also checks each node's host state)")
	flagReach    = flag.Duration("chaos.reachability-timeout", 0, "ovnkube --egressip-reachability-total-timeout (0: ovnkube's default; see docs/reliability.md)")
	flagKeepLogs = flag.Bool("chaos.keep-logs", false, "keep the processes' logs (in <dir>-logs) when the test passes too")
	flagTell     = flag.Duration("chaos.tell-after", 30*time.Second, "a check not converged after this long logs what it waits for")
	flagConverge = flag.Duration("chaos.converge", 90*time.Second, "how long a check waits for convergence before it counts rows as stale/missing")
)

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
	// own are the own sources (own.go) of every state the harness read in each window, by window count (the
	// converged state before it, the state after each change, the converged state that closed it); ownNow those of
	// the last converged state.
	own    map[int]ownSources
	ownNow ownSources
	// explained is explain's answer about each probing pod after the last check (at explainedAt), compared with
	// quietSeen, the sources the pod's probes saw since, when the next window opens; explain counts the comparisons.
	explained   map[string]podExplained
	explainedAt time.Time
	quietSeen   map[string]map[netip.Addr]int
	explain     explainStat

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
	dir := filepath.Join(repo.Root(), "_output", "chaos")
	if err := cluster.Down(ctx, dir); err != nil {
		t.Logf("tearing down what an earlier run left in %s: %v", dir, err)
	}
	nb := *flagNB
	if *flagLayout == cluster.LayoutInterconnect {
		nb = cluster.NBStandalone // one NB per zone
	}
	c, err := cluster.Up(ctx, cluster.Config{StateDir: dir, Nodes: 3, GatewayMode: gwmode.Mode(*flagMode), NB: nb, Layout: *flagLayout,
		RepoRoot: repo.Root(), Logf: t.Logf})
	if err != nil {
		t.Fatalf("cluster up: %v", err)
	}
	logDir := filepath.Join(dir, "log")
	resultsName := "chaos-results-" + string(c.GatewayMode()) + ".txt"
	if c.Layout() == cluster.LayoutInterconnect {
		resultsName = "chaos-results-interconnect-" + string(c.GatewayMode()) + ".txt"
	}
	results, err := os.Create(filepath.Join(repo.Root(), "_output", resultsName))
	if err != nil {
		t.Fatal(err)
	}
	defer results.Close()
	h := &harness{t: t, ctx: ctx, c: c, rnd: rand.New(rand.NewSource(seed)), log: results,
		sup: newSupervisor(logDir), cut: map[string]bool{}, pods: map[string]*podProbe{}, own: map[int]ownSources{},
		faults: map[string]int{}, longest: map[string]time.Duration{}, changeCount: map[string]int{}, samples: map[string][]sample{}}
	t.Cleanup(func() {
		h.stopProbes()
		h.sup.stop()
		for n := range h.cut {
			if err := c.SetNodeLinks(context.Background(), n, true); err != nil {
				t.Logf("restore the links of %s: %v", n, err)
			}
		}
		if t.Failed() || *flagKeepLogs {
			cluster.KeepLogs(t, logDir, dir+"-logs")
		}
		c.CloseAndDown(t, dir)
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

// interconnect reports whether the cluster runs one OVN zone per node.
func (h *harness) interconnect() bool { return h.c.Layout() == cluster.LayoutInterconnect }

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
