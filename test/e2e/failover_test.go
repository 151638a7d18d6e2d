package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/healthcheck"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/metrics"
	"github.com/ovn-egressip/ovn-egressip/test/repo"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// probe is one request from the pod to the echo server.
type probe struct {
	at  time.Time
	src netip.Addr
	err error
}

// prober sends a request every interval (each in its own goroutine, so a lost
// one does not delay the next) and records what the echo server saw.
type prober struct {
	mu     sync.Mutex
	probes []probe
	stop   chan struct{}
	once   sync.Once
	done   sync.WaitGroup
}

func startProber(e *env, ns, pod string, fam int, interval time.Duration) *prober {
	p := &prober{stop: make(chan struct{})}
	// A test that fails before finish must still stop dialing from the pod's
	// namespace before the cluster is torn down (cleanups run last-in first-out).
	e.t.Cleanup(func() { p.finish() })
	p.done.Add(1)
	go func() {
		defer p.done.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
			p.done.Add(1)
			go func(at time.Time) {
				defer p.done.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
				defer cancel()
				src, err := e.c.RequestFamily(ctx, ns, pod, fam, "tcp", 400*time.Millisecond)
				p.mu.Lock()
				p.probes = append(p.probes, probe{at: at, src: src, err: err})
				p.mu.Unlock()
			}(time.Now())
		}
	}()
	return p
}

func (p *prober) finish() []probe {
	p.once.Do(func() { close(p.stop) })
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]probe(nil), p.probes...)
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// gap is the longest time, after failAt, between two consecutive probes that
// reached the echo server with want as source; bad counts probes that arrived
// with another source.
func gap(probes []probe, failAt time.Time, want netip.Addr) (longest time.Duration, lost, bad int) {
	last := failAt
	for _, p := range probes {
		if p.at.Before(failAt) {
			if p.err == nil && p.src == want {
				last = p.at
			}
			continue
		}
		switch {
		case p.err != nil:
			lost++
		case p.src != want:
			bad++
		default:
			if d := p.at.Sub(last); d > longest {
				longest = d
			}
			last = p.at
		}
	}
	return longest, lost, bad
}

// otherSources lists, from failAt on, the probes that reached the echo server
// with a source other than want: when, relative to failAt, and the source.
func otherSources(probes []probe, failAt time.Time, want netip.Addr) string {
	var out []string
	for _, p := range probes {
		if !p.at.Before(failAt) && p.err == nil && p.src != want {
			out = append(out, fmt.Sprintf("%s at +%s", p.src, p.at.Sub(failAt).Round(time.Millisecond)))
		}
	}
	return strings.Join(out, ", ")
}

// vswitchdCrashes counts the crashes of ovs-vswitchd their monitors have logged
// in the cluster under dir (the root namespace's, and in the interconnect layout
// every chassis' <node>-ovs-vswitchd.log).
func vswitchdCrashes(t *testing.T, dir string) int {
	t.Helper()
	logs, err := filepath.Glob(filepath.Join(dir, "log", "*ovs-vswitchd.log"))
	if err != nil || len(logs) == 0 {
		t.Fatalf("ovs-vswitchd logs in %s: %v", dir, err)
	}
	n := 0
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatalf("ovs-vswitchd log: %v", err)
		}
		n += strings.Count(string(b), " died, killed ")
	}
	return n
}

// scrape is the sum of metric's series (every label set) at addr's /metrics.
func scrape(t *testing.T, addr, metric string) float64 {
	t.Helper()
	m, err := metrics.Scrape(context.Background(), nil, metrics.URL(addr))
	if err != nil {
		t.Fatal(err)
	}
	return m.Sum(metric)
}

// TestFailover kills the egress node's daemon, then cuts its links (management
// port and external interface, the daemon still running: a power-off as the
// network sees it), then (a planned move) unlabels it, while a served pod sends a
// request every 20 ms and holds one TCP connection to a server on the external
// host, sending a line every 50 ms and reading its echo. It measures the gap until
// requests arrive again with the same egress IP through the other node, and the
// longest time the held connection went without an echo, and prints both
// (targets: under 1 s and under 0.5 s; not asserted). It fails if any request
// leaves with another source, if the held connection is reset or loses a line, or
// if the server sees a source other than the egress IP. The recovered node
// rejoins the pool and takes a new IP, not the moved one.
// In IPv6-only and dual-stack clusters the IP that moves is the IPv6 one (the
// requests and the held connection are IPv6); in dual-stack the pod's IPv4
// requests run alongside and must keep their IPv4 egress IP throughout.
// Which gateway modes and families run: failoverMatrix.
//
// In the interconnect layout (IPv4, both modes) the pod's zone and the holders' zones are different OVN zones:
// the move crosses zones, and the held TCP connection with it.
func TestFailover(t *testing.T) {
	for _, layout := range e2eLayouts() {
		matrix, prefix := failoverMatrix(), ""
		if layout == cluster.LayoutInterconnect {
			matrix, prefix = nil, "interconnect/"
			for _, m := range e2eModes() {
				if slices.Contains(e2eFamilies(cluster.FamilyIPv4), cluster.FamilyIPv4) {
					matrix = append(matrix, modeFamily{m, cluster.FamilyIPv4})
				}
			}
		}
		for _, tc := range matrix {
			t.Run(prefix+string(tc.mode)+"/"+tc.family, func(t *testing.T) { runFailover(t, layout, tc.mode, tc.family) })
		}
	}
}

// modeFamily is one cluster of a test matrix: its gateway mode and IP family.
type modeFamily struct {
	mode   gwmode.Mode
	family string
}

// failoverMatrix is every gateway mode x family with E2E_MATRIX=full (make test-matrix), else IPv4 and IPv6-only
// in both modes (the failover cases take about a minute per cluster; dual-stack moves the same IPv6 path).
// E2E_GATEWAY_MODES and E2E_IP_FAMILIES narrow it.
func failoverMatrix() []modeFamily {
	fams := []string{cluster.FamilyIPv4, cluster.FamilyIPv6}
	if os.Getenv("E2E_MATRIX") == "full" {
		fams = append(fams, cluster.FamilyDual)
	}
	fams = e2eFamilies(fams...)
	var out []modeFamily
	for _, f := range fams {
		for _, m := range e2eModes() {
			out = append(out, modeFamily{m, f})
		}
	}
	return out
}

func runFailover(t *testing.T, layout string, mode gwmode.Mode, family string) {
	e := newEnvIn(t, layout, mode, family)
	e.prodWithWeb1()
	e.labelAllAssignable()
	e.applyEgressIP("prod", e.ips(eipA), map[string]string{"env": "prod"}, web)
	// The family whose egress IP moves, and (dual-stack) the one that must not notice.
	fam := e.fams[len(e.fams)-1]
	moving := eipA[fam]
	egress := netip.MustParseAddr(moving)
	e.waitStatus("prod", "assigned", func(it []egressipv1.EgressIPStatusItem) bool {
		return hasExactly(it, e.ips(eipA)) && onDistinctNodes(it, e.assignable)
	})
	e.eventuallyAll("prod", "web1", e.addrs(eipA))
	metrics := e.metrics["master-a"]
	lines := startLineServer(t)

	for _, failure := range []string{"kill-daemon", "cut-link", "unlabel"} {
		t.Run(failure, func(t *testing.T) {
			e.t = t
			// The userspace datapath of Debian's OVS 3.1 sometimes aborts on a conntrack
			// assertion (conn_update_state) and its monitor restarts it: the data plane
			// stops for about a second, every node looks unreachable and traffic is lost.
			// That is the test bed failing, not the product: a case during which
			// ovs-vswitchd crashed runs again (its findings are logged, not counted).
			for attempt := 1; ; attempt++ {
				// Every node reachable in the master's eyes first: a node whose daemon had not
				// finished its first sync (its health server answers only after it) would leave
				// the moving IP nowhere to go (CI saw it unassigned for 300 ms at the first case).
				e.waitMasterFindsReachable(metrics, e.assignable)
				crashes := vswitchdCrashes(t, e.dir)
				var problems []string
				fail := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
				items0 := e.getEgressIP("prod").Status.Items
				from := holder(items0, moving)
				unreachable0 := scrape(t, metrics, "ovnkube_master_egress_ips_node_unreachable_total")
				rebalance0 := scrape(t, metrics, "ovnkube_master_egress_ips_rebalance_total")
				_, _ = lines.take()
				p := startProber(e, "prod", "web1", fam, 20*time.Millisecond)
				var still *prober // dual-stack: the other family's requests
				var stillIP netip.Addr
				if len(e.fams) > 1 {
					stillIP = netip.MustParseAddr(eipA[e.fams[0]])
					still = startProber(e, "prod", "web1", e.fams[0], 50*time.Millisecond)
				}
				held := holdConn(e, "prod", "web1", fam, 50*time.Millisecond)
				//nolint:forbidigo // the prober's window: requests before the change are part of the measured gap
				time.Sleep(500 * time.Millisecond)
				failAt := time.Now()
				switch failure {
				case "kill-daemon":
					e.stopNode(from, syscall.SIGKILL)
				case "cut-link":
					e.inNode(from, "ip", "link", "set", "k8s-"+from, "down")
					e.inNode(from, "ip", "link", "set", "eth0", "down")
				case "unlabel":
					e.labelAssignable(from, false)
				}
				to := e.waitMovedOff(moving, from)
				moved := time.Since(failAt)
				//nolint:forbidigo // the prober's window: requests after the change are part of what is measured
				time.Sleep(2 * time.Second)
				probes := p.finish()
				longest, lost, bad := gap(probes, failAt, egress)
				line := fmt.Sprintf("FAILOVER %s/%s/%s: %s moved %s -> %s after %s; longest gap between requests seen with it: %s (lost %d, other source %d; target: gap under 1s)\n",
					mode, family, failure, moving, from, to, moved.Round(time.Millisecond), longest.Round(time.Millisecond), lost, bad)
				fmt.Print(line)
				recordResult(t, line)
				t.Logf("status moved after %s; gap %s; lost %d; wrong source %d", moved, longest, lost, bad)
				if bad > 0 {
					fail("%d requests left with a source other than the egress IP while another egress node was available: %s",
						bad, otherSources(probes, failAt, egress))
				}
				if still != nil {
					sp := still.finish()
					sgap, slost, sbad := gap(sp, failAt, stillIP)
					line := fmt.Sprintf("FAILOVER %s/%s/%s: meanwhile IPv%d requests with %s (not moving): longest gap %s (lost %d, other source %d)\n",
						mode, family, failure, e.fams[0], stillIP, sgap.Round(time.Millisecond), slost, sbad)
					fmt.Print(line)
					recordResult(t, line)
					if sbad > 0 {
						fail("IPv%d requests (egress IP %s, not moving): %d with another source: %s",
							e.fams[0], stillIP, sbad, otherSources(sp, failAt, stillIP))
					}
				}
				echoes, heldErr := held.finish()
				heldGap := echoGap(echoes, failAt)
				peers, serverErrs := lines.take()
				line = fmt.Sprintf("FAILOVER %s/%s/%s: one TCP connection held across the move: %s (longest time without an echo %s; a line sent every 50ms; target under 0.5s)\n",
					mode, family, failure, map[bool]string{true: "survived", false: "BROKEN"}[heldErr == nil && len(serverErrs) == 0], heldGap.Round(time.Millisecond))
				fmt.Print(line)
				recordResult(t, line)
				if heldErr != nil {
					fail("held connection: %v", heldErr)
				}
				if len(serverErrs) > 0 {
					fail("the server's end of the held connection failed: %v", serverErrs)
				}
				for _, src := range peers {
					if src != egress {
						fail("the line server accepted a connection from %s, want only the egress IP %s", src, egress)
					}
				}
				e.eventuallyAll("prod", "web1", e.addrs(eipA))
				// Exactly the failed node went unreachable (none for a planned move): a
				// healthy node declared unreachable on a busy machine is a false failover.
				want := 1.0
				if failure == "unlabel" {
					want = 0
				}
				if d := scrape(t, metrics, "ovnkube_master_egress_ips_node_unreachable_total") - unreachable0; d != want {
					fail("node unreachable counter moved by %v, want %v (a healthy node was declared unreachable?)", d, want)
				}
				if d := scrape(t, metrics, "ovnkube_master_egress_ips_rebalance_total") - rebalance0; d < 1 {
					fail("rebalance counter did not move (%v)", d)
				}

				// Recovery: the node rejoins the pool, keeps nothing of the moved IP and takes a new one.
				switch failure {
				case "kill-daemon":
					e.startNode(from)
				case "cut-link":
					// Link down dropped the cluster route of the management port and the default route: put them back.
					n, err := e.c.Node(from)
					if err != nil {
						t.Fatal(err)
					}
					e.inNode(from, "ip", "link", "set", "k8s-"+from, "up")
					e.inNode(from, "ip", "link", "set", "eth0", "up")
					for _, f := range n.Families {
						clusterNet, def := cluster.ClusterCIDR, "default"
						if f.Family == 6 {
							clusterNet, def = cluster.ClusterCIDR6, "::/0"
						}
						e.inNode(from, "ip", "route", "replace", clusterNet, "via", f.RouterIP.String(), "dev", "k8s-"+from)
						e.inNode(from, "ip", "route", "replace", def, "via", cluster.ExternalHost(f.Family).String(), "dev", "eth0")
					}
				case "unlabel":
					e.labelAssignable(from, true)
				}
				if mode == gwmode.Local {
					waitHostClean(t, e, from, moving)
				}
				e.waitHealthy(from)
				// and until the master's own probes found it again (after a cut link its gRPC reconnect backs off
				// up to a second, more on a busy machine: CI once applied "second" before that).
				e.waitMasterFindsReachable(metrics, e.assignable)
				e.applyEgressIP("second", []string{eipB[fam]}, map[string]string{"env": "none"}, nil)
				items := e.waitStatus("second", "assigned to "+from, func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, eipB[fam]) == from })
				t.Logf("recovered node %s took %v", from, items)
				if h := holder(e.getEgressIP("prod").Status.Items, moving); h != to {
					fail("the moved IP went to %s; it must stay on %s", h, to)
				}
				e.kubectl("", "delete", "eip", "second")
				if n := vswitchdCrashes(t, e.dir) - crashes; n > 0 && attempt < 3 {
					t.Logf("ovs-vswitchd crashed %d time(s) during attempt %d (OVS 3.1 userspace conntrack assertion); the case runs again; it saw: %v", n, attempt, problems)
					recordResult(t, fmt.Sprintf("FAILOVER %s/%s/%s: ovs-vswitchd crashed during attempt %d (test bed); the case ran again\n", mode, family, failure, attempt))
					continue
				}
				for _, p := range problems {
					t.Error(p)
				}
				break
			}
		})
	}
}

// TestMasterHA runs two masters; the leader is killed during a change; the other
// takes over, finishes the change, and leaves no stale or duplicate NB row.
func TestMasterHA(t *testing.T) {
	if fromImage() {
		t.Skip("OVNKUBE_FROM=image: the manifests' masters listen on port 9412 of the host (hostNetwork); two cannot run on one host")
	}
	e := newEnv(t, gwmode.Shared, cluster.FamilyIPv4)
	e.startMaster("master-b", "127.0.0.1:29102")
	e.prodWithWeb1()
	e.createPod("prod", "web3", "node3", web)
	e.labelAssignable("node2", true)
	e.labelAssignable("node3", true)
	e.applyEgressIP("prod", []string{eipA[4]}, map[string]string{"env": "prod"}, web)
	e.waitStatus("prod", "assigned", func(it []egressipv1.EgressIPStatusItem) bool { return len(it) == 1 })
	e.eventually("prod", "web1", netip.MustParseAddr(eipA[4]))

	leader := e.leaderName(t)
	other := map[string]string{"master-a": "master-b", "master-b": "master-a"}[leader]
	t.Logf("leader %s; freezing it during a change", leader)
	// Freeze the leader first so the change is certainly left to the other master.
	e.mu.Lock()
	err := e.masters[leader].signal(syscall.SIGSTOP)
	e.mu.Unlock()
	if err != nil {
		t.Fatalf("freeze %s: %v", leader, err)
	}
	start := time.Now()
	e.applyEgressIP("prod", []string{eipA[4], eipB[4]}, map[string]string{"env": "prod"}, web)
	// The frozen leader cannot renew its Lease: the other master takes it once it runs out, and only then may it
	// write. Each read that shows the change must find the Lease with the other master.
	e.waitStatus("prod", "two IPs, written by the master that holds the Lease", func(it []egressipv1.EgressIPStatusItem) bool {
		if len(it) != 2 {
			return false
		}
		if h := e.leaseHolderName(); h != other {
			t.Fatalf("the change was written while the Lease holder is %q, not %s", h, other)
		}
		return true
	})
	took := time.Since(start)
	e.stopMaster(leader, syscall.SIGKILL)
	t.Logf("%s finished the change %s after the leader froze", other, took)
	recordResult(t, fmt.Sprintf("MASTER-HA: leader %s frozen during a change; %s took the Lease and finished it %s after the freeze (lease duration 4s)\n", leader, other, took.Round(time.Millisecond)))
	if got := e.leaderName(t); got != other {
		t.Errorf("leader is %s, want %s", got, other)
	}
	e.eventually("prod", "web1", netip.MustParseAddr(eipA[4]), netip.MustParseAddr(eipB[4]))

	// One reroute policy per served pod IP, one SNAT per (pod, egress IP), no duplicates.
	var seen map[string]int
	var reroutes, snats int
	if waitfor.Until(context.Background(), 15*time.Second, 100*time.Millisecond, func() (bool, error) {
		seen = map[string]int{}
		reroutes, snats = 0, 0
		var dups []string
		for _, table := range []string{"Logical_Router_Policy", "NAT"} {
			for _, ids := range e.nbOwned(table) {
				r := fmt.Sprint(ids) // fmt prints a map's keys in order
				seen[table+" "+r]++
				if seen[table+" "+r] > 1 {
					dups = append(dups, table+" "+r)
				}
				if table == "NAT" {
					snats++
				} else if ids["k8s.ovn.org/rule"] == "reroute" {
					reroutes++
				}
			}
		}
		if len(dups) > 0 {
			t.Fatalf("duplicate NB rows: %v", dups)
		}
		return reroutes == 2 && snats == 4, nil
	}) != nil {
		t.Fatalf("want 2 reroute policies and 4 SNAT rows, got %d and %d: %v", reroutes, snats, seen)
	}
}

// leaderName maps the Lease holder (hostname_pid) to the master's name.
func (e *env) leaderName(t *testing.T) string {
	t.Helper()
	var leader string
	if waitfor.Until(context.Background(), 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		l, err := e.c.Client().CoordinationV1().Leases(e.leaseNamespace).Get(context.Background(), "ovn-egressip-master", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		for name, d := range e.masters {
			if d.holds(*l.Spec.HolderIdentity) {
				leader = name
				return true, nil
			}
		}
		return false, nil
	}) == nil {
		return leader
	}
	t.Fatal("no live master holds the Lease")
	return ""
}

// leaseHolderName is the name of the master whose identity holds the masters' Lease now ("" when none does).
func (e *env) leaseHolderName() string {
	l, err := e.c.Client().CoordinationV1().Leases(e.leaseNamespace).Get(context.Background(), "ovn-egressip-master", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for name, d := range e.masters {
		if d.holds(*l.Spec.HolderIdentity) {
			return name
		}
	}
	return ""
}

// waitMasterFindsReachable waits until the master's health check finds every one of nodes reachable
// (ovnkube_master_egress_node_reachable{node} 1).
func (e *env) waitMasterFindsReachable(metricsAddr string, nodes []string) {
	e.t.Helper()
	var missing []string
	var err error
	if waitfor.Until(context.Background(), 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		var m metrics.Set
		m, err = metrics.Scrape(context.Background(), nil, metrics.URL(metricsAddr))
		missing = nil
		for _, n := range nodes {
			if v, ok := m.Value("ovnkube_master_egress_node_reachable", "node", n); !ok || v != 1 {
				missing = append(missing, n)
			}
		}
		return len(missing) == 0, nil
	}) != nil {
		e.t.Fatalf("the master's health check does not find %v reachable after 30 s (scrape error: %v)", missing, err)
	}
}

// waitHealthy waits until node's egress health server answers from the host
// (where the master runs), then for the master's next probes to see it.
func (e *env) waitHealthy(node string) {
	e.t.Helper()
	n, err := e.c.Node(node)
	if err != nil {
		e.t.Fatal(err)
	}
	if waitfor.Until(context.Background(), 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		conn, err := grpc.NewClient(net.JoinHostPort(n.MgmtIP.String(), "9107"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, nil
		}
		resp, cerr := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: healthcheck.ServiceName})
		conn.Close()
		return cerr == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING, nil
	}) != nil {
		e.t.Fatalf("node %s: egress health server does not answer on %s:9107", node, n.MgmtIP)
	}
	// The master probes only egress-assignable nodes: for one, wait until the leading master's health check finds it
	// reachable again (a node it never saw down is found at once).
	kn, err := e.c.Client().CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("node %s: %v", node, err)
	}
	if _, labelled := kn.Labels[annotations.EgressAssignableLabel]; labelled {
		leader := e.leaderName(e.t)
		e.mu.Lock()
		addr := e.metrics[leader]
		e.mu.Unlock()
		e.waitMasterFindsReachable(addr, []string{node})
	}
}

// recordResult appends a measured number to _output/e2e-results.txt, which
// `make test` prints at the end (go test hides a passing test's output).
func recordResult(t *testing.T, line string) {
	f, err := os.OpenFile(filepath.Join(repo.Root(), "_output", "e2e-results.txt"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Logf("cannot record %q: %v", line, err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(line); err != nil {
		t.Logf("cannot record %q: %v", line, err)
	}
}
