package healthcheck

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

func waitFor(t *testing.T, ch <-chan bool, want bool, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := time.After(within)
	for {
		select {
		case got := <-ch:
			if got == want {
				return time.Since(start)
			}
		case <-deadline:
			t.Fatalf("no change to reachable=%v within %s", want, within)
		}
	}
}

func TestCheckerGRPCDownAndUp(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	stopSrv := stoppableServer(t, lis, "")

	events := make(chan bool, 16)
	probes := make(chan bool, 16) // probe outcomes; dropped when the test does not read them
	c := NewChecker(CheckerConfig{
		Port: port, Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond,
		Targets:  func() []Target { return []Target{{Node: "n1", Addr: netip.MustParseAddr("127.0.0.1")}} },
		OnChange: func(node string, ok bool) { events <- ok },
		Observe:  observeInto(probes),
	})
	runChecker(t, c)

	waitFor(t, probes, true, 3*time.Second) // n1 answered a probe
	if !c.Reachable("n1") {
		t.Fatal("n1 should be reachable while its server runs")
	}
	stopSrv()
	d := waitFor(t, events, false, 3*time.Second)
	t.Logf("detected down after %s", d)
	if c.Reachable("n1") {
		t.Fatal("n1 should be unreachable")
	}

	serveAgain(t, lis.Addr().String(), "")
	d = waitFor(t, events, true, 5*time.Second)
	t.Logf("detected up after %s", d)
	if !c.Reachable("n1") {
		t.Fatal("n1 should be reachable again")
	}
}

func TestCheckerLegacyRefusedCountsAsReachable(t *testing.T) {
	// Nothing listens on 127.0.0.1:9 here: the dial is refused, which proves the host is up.
	if probeLegacy(context.Background(), netip.MustParseAddr("127.0.0.1"), time.Second) != true {
		t.Fatal("a refused dial must count as reachable")
	}
}

func TestCheckerForgetsRemovedTargets(t *testing.T) {
	var mu sync.Mutex
	// A closed port: every gRPC probe fails.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	targets := []Target{{Node: "gone", Addr: netip.MustParseAddr("127.0.0.1")}}
	events := make(chan bool, 16)
	c := NewChecker(CheckerConfig{
		Port: port, Interval: 30 * time.Millisecond, Timeout: 50 * time.Millisecond,
		Targets:  func() []Target { mu.Lock(); defer mu.Unlock(); return append([]Target(nil), targets...) },
		OnChange: func(node string, ok bool) { events <- ok },
	})
	runChecker(t, c)
	waitFor(t, events, false, 3*time.Second)
	mu.Lock()
	targets = nil
	mu.Unlock()
	waitfor.True(t, 2*time.Second, 20*time.Millisecond, "a node no longer probed is reachable again", func() (bool, string) {
		return c.Reachable("gone"), "still unreachable"
	})
}

func TestCheckerDisabled(t *testing.T) {
	called := false
	c := NewChecker(CheckerConfig{Timeout: 0, Interval: time.Millisecond,
		Targets: func() []Target { called = true; return nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	c.Run(ctx)
	if called || !c.Reachable("x") {
		t.Fatal("a disabled checker probes nothing and reports every node reachable")
	}
}

func TestCheckerNeedsConsecutiveFailures(t *testing.T) {
	var changes []bool
	c := NewChecker(CheckerConfig{Timeout: time.Second, FailureThreshold: 3, SlowThreshold: 5,
		OnChange: func(_ string, ok bool) { changes = append(changes, ok) }})
	c.probers["n"] = &prober{}
	// A witness that answers all along: the master hears the network, so n's
	// silence is n's own.
	c.probers["w"] = &prober{}
	t0 := time.Now()
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * 100 * time.Millisecond) }
	i := 0
	step := func(o outcome) {
		c.record("w", round{out: probeOK, start: at(i)})
		c.record("n", round{out: o, start: at(i)})
		i++
	}
	// Each phase's rounds go on from the previous phase's; then n is reachable or not, and OnChange has been called
	// with changes so far.
	for _, ph := range []struct {
		rounds    []outcome
		reachable bool
		changes   []bool
		why       string
	}{
		{[]outcome{probeHard, probeHard, probeOK, probeHard, probeHard}, true, nil,
			"two hard failures in a row out of a threshold of three must not flip the node"},
		{[]outcome{probeHard}, false, []bool{false}, "the third hard failure in a row makes the node unreachable"},
		{[]outcome{probeOK}, true, []bool{false, true}, "one success makes it reachable again"},
		// Soft failures (slow health server, live kernel) need SlowThreshold rounds;
		// a soft one breaks a run of hard ones.
		{[]outcome{probeSoft, probeHard, probeHard, probeSoft}, true, []bool{false, true},
			"four failures, never three hard in a row, must not flip the node"},
		{[]outcome{probeSoft}, false, []bool{false, true, false},
			"the fifth failure in a row (SlowThreshold) makes the node unreachable"},
	} {
		for _, o := range ph.rounds {
			step(o)
		}
		if c.Reachable("n") != ph.reachable || !slices.Equal(changes, ph.changes) {
			t.Fatalf("%s: reachable %v, changes %v", ph.why, c.Reachable("n"), changes)
		}
	}
}

// TestDecide: the verdict on a node from its history.
func TestDecide(t *testing.T) {
	cfg := CheckerConfig{FailureThreshold: 2, SlowThreshold: 10}
	hard2 := failures{hard: 2, any: 2}
	for _, tc := range []struct {
		name string
		h    history
		want verdict
	}{
		{"latest round passed", history{}, reachable},
		{"latest round passed, was unreachable", history{state: unreachable}, reachable},
		{"latest round passed, was held", history{state: held}, reachable},
		{"one hard failure, witnessed", history{fail: failures{hard: 1, any: 1}, witnessed: true}, reachable},
		{"nine soft failures, witnessed", history{fail: failures{any: 9}, witnessed: true}, reachable},
		{"unreachable stays until a round passes", history{fail: failures{any: 1}, state: unreachable}, unreachable},
		{"two silent rounds, witnessed", history{fail: hard2, witnessed: true}, unreachable},
		{"ten slow rounds, witnessed", history{fail: failures{any: 10}, witnessed: true}, unreachable},
		{"two silent rounds, nobody heard: held", history{fail: hard2}, held},
		{"ten slow or late rounds, nobody heard: held", history{fail: failures{any: 10}}, held},
		{"daemon gone (definitive), nobody else heard", history{fail: hard2, definitive: true}, unreachable},
		{"held, a soft round broke the hard run: still held", history{fail: failures{any: 3}, state: held}, held},
		{"held, then a witnessed failed round", history{fail: failures{hard: 3, any: 3}, state: held, witnessed: true}, unreachable},
	} {
		if got := decide(cfg, tc.h); got != tc.want {
			t.Errorf("%s: decide = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHeard: whether another node answered between a node's first failure and the
// start of its latest round.
func TestHeard(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name   string
		others map[string][]time.Time
		want   bool
	}{
		{"nobody else", nil, false},
		{"another node answered in between", map[string][]time.Time{"b": {ms(-40), ms(30)}}, true},
		{"at the window's edges", map[string][]time.Time{"b": {ms(0)}, "c": nil}, true},
		{"only before the failures began", map[string][]time.Time{"b": {ms(-1)}}, false},
		{"only after the round began (the round was sent while nobody answered: a stall)", map[string][]time.Time{"b": {ms(76), ms(90)}}, false},
		{"one of two peers", map[string][]time.Time{"b": {ms(-5)}, "c": {ms(-30), ms(50), ms(100)}}, true},
		{"its own answers do not count", map[string][]time.Time{"n": {ms(30)}}, false},
	} {
		all := map[string]history{"n": {fail: failures{hard: 1, any: 1}, failingSince: ms(0)}}
		for n, a := range tc.others {
			h := all[n]
			h.answers = a
			all[n] = h
		}
		if got := heard("n", ms(0), ms(75), all); got != tc.want {
			t.Errorf("%s: heard = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestCheckerAllSilentIsNotEvidence: a master held up (or cut off itself) sees
// every node's probes time out at once. That must not make any node unreachable
// (it emptied every EgressIP's status before); the master says it suspects itself.
// When the others answer again and one node keeps failing, that one is declared
// unreachable at its next failed round.
func TestCheckerAllSilentIsNotEvidence(t *testing.T) {
	var changes []string
	var holds []string
	c := NewChecker(CheckerConfig{Timeout: 75 * time.Millisecond, FailureThreshold: 2, SlowThreshold: 10,
		OnChange: func(n string, ok bool) { changes = append(changes, fmt.Sprintf("%s=%v", n, ok)) },
		OnHold:   func(n string, failed, probed int) { holds = append(holds, fmt.Sprintf("%s:%d/%d", n, failed, probed)) },
	})
	nodes := []string{"node1", "node2", "node3"}
	for _, n := range nodes {
		c.probers[n] = &prober{}
	}
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// All pass, then a stall: every node's rounds time out (silent), twice, then
	// ten late rounds.
	for _, n := range nodes {
		c.record(n, round{out: probeOK, start: at(0)})
	}
	for r := 1; r <= 2; r++ {
		for i, n := range nodes {
			c.record(n, round{out: probeHard, start: at(100*r + i)})
		}
	}
	for r := 3; r <= 12; r++ {
		for i, n := range nodes {
			c.record(n, round{out: probeSoft, start: at(100*r + i)})
		}
	}
	for _, n := range nodes {
		if !c.Reachable(n) {
			t.Errorf("%s unreachable after a round in which every node was silent", n)
		}
	}
	if len(changes) != 0 {
		t.Fatalf("reachability changes while every node was silent: %v", changes)
	}
	if want := []string{"node1:2/3", "node2:2/3", "node3:2/3"}; !slices.Equal(holds, want) {
		t.Fatalf("holds %v, want %v (once per node and episode)", holds, want)
	}
	// The stall ends: everyone passes; no change.
	for i, n := range nodes {
		c.record(n, round{out: probeOK, start: at(1300 + i)})
	}
	if len(changes) != 0 {
		t.Fatalf("changes after the stall: %v", changes)
	}
	// node2 is cut off: its rounds are silent while the others answer. It is
	// unreachable at its FailureThreshold-th failed round.
	for r := 14; r <= 15; r++ {
		for i, n := range nodes {
			o := probeOK
			if n == "node2" {
				o = probeHard
			}
			c.record(n, round{out: o, start: at(100*r + i)})
		}
	}
	if want := []string{"node2=false"}; !slices.Equal(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	if c.Reachable("node2") || !c.Reachable("node1") || !c.Reachable("node3") {
		t.Fatal("only node2 is unreachable")
	}
	if len(holds) != 3 {
		t.Fatalf("no new hold expected: %v", holds)
	}

	// node2 is back.
	for i, n := range nodes {
		c.record(n, round{out: probeOK, start: at(1600 + i)})
	}
	// Another stall: all silent again (held), then it ends: node1 and node3 answer,
	// but node2's round sent during the stall times out after their answers. That
	// round was not sent after anyone answered: node2 stays held (before, it was
	// declared unreachable here), and its next round releases it.
	for r := 20; r <= 21; r++ {
		for i, n := range nodes {
			c.record(n, round{out: probeHard, start: at(100*r + i), took: 75 * time.Millisecond})
		}
	}
	if len(holds) != 6 {
		t.Fatalf("holds %v, want three more", holds)
	}
	c.record("node1", round{out: probeOK, start: at(2200), took: 2 * time.Millisecond})
	c.record("node3", round{out: probeOK, start: at(2201), took: 2 * time.Millisecond})
	c.record("node2", round{out: probeHard, start: at(2150), took: 75 * time.Millisecond}) // sent in the stall
	c.record("node2", round{out: probeOK, start: at(2300), took: 2 * time.Millisecond})
	if want := []string{"node2=false", "node2=true"}; !slices.Equal(changes, want) {
		t.Fatalf("changes %v, want %v (node2's cut and return only)", changes, want)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    observation
		want outcome
	}{
		{"serving", observation{grpc: grpcServing}, probeOK},
		{"serving, kernel silent", observation{grpc: grpcServing}, probeOK},
		{"serving, late", observation{grpc: grpcServing, kernelOK: true, late: true}, probeOK},
		{"not serving", observation{grpc: grpcNotServing, kernelOK: true}, probeHard},
		{"not serving, late", observation{grpc: grpcNotServing, kernelOK: true, late: true}, probeHard},
		{"slow daemon on a live node", observation{grpc: grpcTimeout, kernelOK: true}, probeSoft},
		{"cut off", observation{grpc: grpcTimeout}, probeHard},
		{"cut off, but the checker ran late", observation{grpc: grpcTimeout, late: true}, probeSoft},
		{"daemon gone: refused, nothing listens", observation{grpc: grpcError, kernelOK: true}, probeHard},
		{"channel error, health port still accepts", observation{grpc: grpcError, kernelOK: true, listening: true}, probeSoft},
		{"error and kernel silent", observation{grpc: grpcError}, probeHard},
	} {
		if got := classify(tc.o); got != tc.want {
			t.Errorf("%s: classify(%+v) = %v, want %v", tc.name, tc.o, got, tc.want)
		}
	}
}

// slowHealth answers every health check after delay.
type slowHealth struct {
	healthpb.UnimplementedHealthServer
	delay time.Duration
}

func (s slowHealth) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	select {
	case <-time.After(s.delay):
		return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestCheckerSlowServerOnLiveHost: a health server that answers later than the
// timeout, on a host whose kernel answers (127.0.0.1 port 9 refuses at once), is
// only declared unreachable after SlowThreshold rounds, not FailureThreshold: a
// loaded node is not failed over as fast as one that is cut off.
func TestCheckerSlowServerOnLiveHost(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, slowHealth{delay: time.Second})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Error(err)
		}
	}()
	port := lis.Addr().(*net.TCPAddr).Port
	// A healthy node on the same port of another loopback address: the master
	// hears it, so n1's slowness is n1's own.
	witness := startWitness(t, "127.0.0.2", port)

	var mu sync.Mutex
	failed := 0
	events := make(chan bool, 16)
	const slow = 6
	c := NewChecker(CheckerConfig{
		Port: port, Interval: 20 * time.Millisecond, Timeout: 50 * time.Millisecond,
		FailureThreshold: 2, SlowThreshold: slow,
		Targets:  func() []Target { return []Target{{Node: "n1", Addr: netip.MustParseAddr("127.0.0.1")}, witness} },
		OnChange: func(_ string, ok bool) { events <- ok },
		Observe: func(node string, ok bool, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if node == "n1" && !ok {
				failed++
			}
		},
	})
	runChecker(t, c)
	waitFor(t, events, false, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	// Observe runs before the verdict: the round that flips the node is counted.
	if failed != slow {
		t.Fatalf("declared unreachable after %d failed rounds, want SlowThreshold = %d (not FailureThreshold = 2)", failed, slow)
	}
}

// silentAddr returns an address whose port 9 does not answer (a dial times out:
// what a cut-off node looks like), or skips the test. Documentation addresses
// answer in some sandboxes (a gateway that refuses, a proxy that accepts).
func silentAddr(t *testing.T) netip.Addr {
	t.Helper()
	for _, a := range []string{"192.0.2.77", "198.51.100.77", "203.0.113.77"} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(a, "9"))
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil {
			c.Close()
		}
		if timedOut {
			return netip.MustParseAddr(a)
		}
	}
	t.Skip("no silent address here (every documentation address answers)")
	return netip.Addr{}
}

// startWitness serves the health service on addr:port until the test ends and
// returns it as a target named "witness".
func startWitness(t *testing.T, addr string, port int) Target {
	t.Helper()
	lis, err := net.Listen("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	serveInBackground(t, ctx, lis, "")
	t.Cleanup(cancel) // runs before serveInBackground's cleanup waits for the server
	return Target{Node: "witness", Addr: netip.MustParseAddr(addr)}
}

// TestCheckerCutOffNodeIsHard: a node whose network does not answer (an address
// nothing routes to) is declared unreachable after FailureThreshold rounds while
// another node answers. (On a loaded machine the witness's first answer may come
// after the node's first rounds: the node is then held until a round sent after
// that answer, and more rounds are needed; the test says so.)
func TestCheckerCutOffNodeIsHard(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	witness := startWitness(t, "127.0.0.1", port)
	silent := silentAddr(t)
	events := make(chan bool, 16)
	// run counts n1's failed rounds in a row that were not late (a round that ran late, on a loaded machine, is a
	// soft failure by design and starts the count again).
	rounds, run, holds, atChange := 0, 0, 0, -1
	witnessOK := false
	var mu sync.Mutex
	c := NewChecker(CheckerConfig{
		Port: port, Interval: 20 * time.Millisecond, Timeout: 50 * time.Millisecond,
		FailureThreshold: 2, SlowThreshold: 50,
		Targets: func() []Target {
			mu.Lock()
			defer mu.Unlock()
			if !witnessOK {
				return []Target{witness} // n1 is probed once the witness has answered
			}
			return []Target{{Node: "n1", Addr: silent}, witness}
		},
		OnChange: func(node string, ok bool) {
			if node == "n1" && !ok {
				// n1's rounds as they stand when it is declared (its prober observes a round before deciding on
				// it, and goes on probing while the test reads the event).
				mu.Lock()
				atChange = run
				mu.Unlock()
			}
			events <- ok
		},
		OnHold: func(string, int, int) { mu.Lock(); holds++; mu.Unlock() },
		Observe: func(node string, ok bool, took time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if node == "n1" {
				rounds++
				run++
				if took > 75*time.Millisecond { // 1.5 times the timeout: late
					run = 0
				}
			} else if ok {
				witnessOK = true
			}
		},
	})
	runChecker(t, c)
	waitFor(t, events, false, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	switch {
	case holds == 0 && atChange != 2:
		t.Fatalf("declared unreachable after %d hard rounds in a row (%d rounds in all), want FailureThreshold = 2", atChange, rounds)
	case holds > 0:
		t.Logf("the witness did not answer during n1's first rounds (a loaded machine): held, then unreachable after %d rounds", rounds)
	}
	if !c.Reachable("witness") || c.Reachable("n1") {
		t.Fatal("only n1 is unreachable")
	}
}

// TestCheckerLoneSilentNodeIsHeld: when the only node probed is silent, the master
// cannot tell its own trouble from the node's: the node is held (OnHold), not
// declared unreachable, while its probes keep failing.
func TestCheckerLoneSilentNodeIsHeld(t *testing.T) {
	silent := silentAddr(t)
	holds := make(chan int, 16)
	var mu sync.Mutex
	// run counts the failed rounds in a row that were not late (a late round, on a loaded machine, is a soft
	// failure by design and starts the count of hard ones again); atHold is run when n1 is held.
	rounds, run, atHold := 0, 0, -1
	c := NewChecker(CheckerConfig{
		Port: 9107, Interval: 20 * time.Millisecond, Timeout: 50 * time.Millisecond,
		FailureThreshold: 2, SlowThreshold: 50,
		Targets:  func() []Target { return []Target{{Node: "n1", Addr: silent}} },
		OnChange: func(node string, ok bool) { t.Errorf("reachability of %s changed to %v", node, ok) },
		OnHold: func(_ string, failed, _ int) {
			mu.Lock()
			atHold = run
			mu.Unlock()
			holds <- failed
		},
		Observe: func(_ string, _ bool, took time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			rounds++
			run++
			if took > 75*time.Millisecond { // 1.5 times the timeout: late
				run = 0
			}
		},
	})
	runChecker(t, c)
	select {
	case n := <-holds:
		mu.Lock()
		hard := atHold
		mu.Unlock()
		if hard != 2 {
			t.Fatalf("held after %d hard rounds in a row (%d failed rounds in all), want 2", hard, n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the lone silent node was never held")
	}
	// It keeps failing (the checker did look) and stays held, not unreachable.
	waitfor.True(t, 5*time.Second, 10*time.Millisecond, "6 probe rounds", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return rounds >= 6, fmt.Sprintf("only %d rounds", rounds)
	})
	if !c.Reachable("n1") {
		t.Fatal("a held node must stay reachable")
	}
	if len(holds) != 0 {
		t.Fatalf("held again within one episode (%d more)", len(holds))
	}
}

// TestCheckerDaemonIdentity: a passed probe carries the daemon identity the health server sends; when the server
// is replaced by one of another daemon (a restart), the checker reports the new identity.
func TestCheckerDaemonIdentity(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stopSrv := stoppableServer(t, lis, "daemon-a")
	changes := make(chan string, 16)
	probes := make(chan bool, 16)
	c := NewChecker(CheckerConfig{
		Port: lis.Addr().(*net.TCPAddr).Port, Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond,
		Targets:        func() []Target { return []Target{{Node: "n1", Addr: netip.MustParseAddr("127.0.0.1")}} },
		OnDaemonChange: func(node, id string) { changes <- node + "=" + id },
		Observe:        observeInto(probes),
	})
	runChecker(t, c)
	waitFor(t, probes, true, 3*time.Second)
	if got := c.DaemonID("n1"); got != "daemon-a" {
		t.Fatalf("DaemonID after a passed probe of daemon-a = %q", got)
	}
	stopSrv()
	serveAgain(t, lis.Addr().String(), "daemon-b")
	select {
	case got := <-changes:
		if got != "n1=daemon-b" {
			t.Fatalf("OnDaemonChange(%s), want n1=daemon-b", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no OnDaemonChange within 5s of the restart")
	}
	if got := c.DaemonID("n1"); got != "daemon-b" {
		t.Fatalf("DaemonID after the restart = %q, want daemon-b", got)
	}
}

// TestProbeWithoutDaemonIdentity: a health server that sends no identity (an older daemon, or upstream's) gives "".
func TestProbeWithoutDaemonIdentity(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serveInBackground(t, ctx, lis, "")
	probes := make(chan bool, 16)
	c := NewChecker(CheckerConfig{
		Port: lis.Addr().(*net.TCPAddr).Port, Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond,
		Targets: func() []Target { return []Target{{Node: "n1", Addr: netip.MustParseAddr("127.0.0.1")}} },
		Observe: observeInto(probes),
	})
	go c.Run(ctx)
	waitFor(t, probes, true, 3*time.Second)
	if got := c.DaemonID("n1"); got != "" {
		t.Fatalf("DaemonID of a server without identity = %q", got)
	}
}

// observeInto is an Observe that sends each probe's outcome to probes, dropped when the test does not read them.
func observeInto(probes chan<- bool) func(string, bool, time.Duration) {
	return func(_ string, ok bool, _ time.Duration) {
		select {
		case probes <- ok:
		default:
		}
	}
}

// runChecker runs c until the test ends.
func runChecker(t *testing.T, c *Checker) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go c.Run(ctx)
}

// stoppableServer runs ServeListener on lis as daemon id; stop ends it, waits for it to return and fails t on its error.
func stoppableServer(t *testing.T, lis net.Listener, id string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, lis, id) }()
	return func() {
		t.Helper()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// serveAgain listens on addr again (a stopped server's address, as a restarted daemon does) and serves there as
// daemon id until the test ends.
func serveAgain(t *testing.T, addr, id string) {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	serveInBackground(t, ctx, lis, id)
	t.Cleanup(cancel) // runs before serveInBackground's cleanup waits for the server
}

// serveInBackground runs ServeListener on lis until ctx ends, and fails the test if it returns an error. The test ends
// ctx before its cleanups run (a defer, or a cleanup registered after this call).
func serveInBackground(t *testing.T, ctx context.Context, lis net.Listener, id string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, lis, id) }()
	t.Cleanup(func() {
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}
