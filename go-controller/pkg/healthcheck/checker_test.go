package healthcheck

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
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
	srvCtx, stopSrv := context.WithCancel(context.Background())
	srvDone := make(chan error, 1)
	go func() { srvDone <- ServeListener(srvCtx, lis) }()

	events := make(chan bool, 16)
	c := NewChecker(CheckerConfig{
		Port: port, Interval: 50 * time.Millisecond, Timeout: 200 * time.Millisecond,
		Targets:  func() []Target { return []Target{{Node: "n1", Addr: netip.MustParseAddr("127.0.0.1")}} },
		OnChange: func(node string, ok bool) { events <- ok },
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)

	time.Sleep(300 * time.Millisecond)
	if !c.Reachable("n1") {
		t.Fatal("n1 should be reachable while its server runs")
	}
	stopSrv()
	<-srvDone
	d := waitFor(t, events, false, 3*time.Second)
	t.Logf("detected down after %s", d)
	if c.Reachable("n1") {
		t.Fatal("n1 should be unreachable")
	}

	lis2, err := net.Listen("tcp", lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srvCtx2, stopSrv2 := context.WithCancel(context.Background())
	defer stopSrv2()
	go func() { _ = ServeListener(srvCtx2, lis2) }()
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	waitFor(t, events, false, 3*time.Second)
	mu.Lock()
	targets = nil
	mu.Unlock()
	deadline := time.Now().Add(2 * time.Second)
	for !c.Reachable("gone") {
		if time.Now().After(deadline) {
			t.Fatal("a node no longer probed must not stay unreachable")
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	for _, o := range []outcome{probeHard, probeHard, probeOK, probeHard, probeHard} {
		c.record("n", o, 0)
	}
	if !c.Reachable("n") || len(changes) != 0 {
		t.Fatalf("two hard failures in a row out of a threshold of three must not flip the node: %v", changes)
	}
	c.record("n", probeHard, 0)
	if c.Reachable("n") || len(changes) != 1 || changes[0] {
		t.Fatalf("the third hard failure in a row makes the node unreachable: %v", changes)
	}
	c.record("n", probeOK, 0)
	if !c.Reachable("n") || len(changes) != 2 || !changes[1] {
		t.Fatalf("one success makes it reachable again: %v", changes)
	}
	// Soft failures (slow health server, live kernel) need SlowThreshold rounds;
	// a soft one breaks a run of hard ones.
	for _, o := range []outcome{probeSoft, probeHard, probeHard, probeSoft} {
		c.record("n", o, 0)
	}
	if !c.Reachable("n") || len(changes) != 2 {
		t.Fatalf("four failures, never three hard in a row, must not flip the node: %v", changes)
	}
	c.record("n", probeSoft, 0)
	if c.Reachable("n") || len(changes) != 3 || changes[2] {
		t.Fatalf("the fifth failure in a row (SlowThreshold) makes the node unreachable: %v", changes)
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
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	var mu sync.Mutex
	failed := 0
	events := make(chan bool, 16)
	const slow = 6
	c := NewChecker(CheckerConfig{
		Port: lis.Addr().(*net.TCPAddr).Port, Interval: 20 * time.Millisecond, Timeout: 50 * time.Millisecond,
		FailureThreshold: 2, SlowThreshold: slow,
		Targets:  func() []Target { return []Target{{Node: "n1", Addr: netip.MustParseAddr("127.0.0.1")}} },
		OnChange: func(_ string, ok bool) { events <- ok },
		Observe: func(_ string, ok bool, _ time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				failed++
			}
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	waitFor(t, events, false, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	// Observe runs before the verdict: the round that flips the node is counted.
	if failed != slow {
		t.Fatalf("declared unreachable after %d failed rounds, want SlowThreshold = %d (not FailureThreshold = 2)", failed, slow)
	}
}

// TestCheckerCutOffNodeIsHard: a node whose network does not answer (an address
// nothing routes to) is declared unreachable after FailureThreshold rounds.
func TestCheckerCutOffNodeIsHard(t *testing.T) {
	events := make(chan bool, 16)
	rounds := 0
	var mu sync.Mutex
	c := NewChecker(CheckerConfig{
		Port: 9107, Interval: 20 * time.Millisecond, Timeout: 50 * time.Millisecond,
		FailureThreshold: 2, SlowThreshold: 50,
		Targets:  func() []Target { return []Target{{Node: "n1", Addr: netip.MustParseAddr("192.0.2.1")}} },
		OnChange: func(_ string, ok bool) { events <- ok },
		Observe:  func(string, bool, time.Duration) { mu.Lock(); rounds++; mu.Unlock() },
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.Run(ctx)
	waitFor(t, events, false, 5*time.Second)
	mu.Lock()
	defer mu.Unlock()
	if rounds != 2 {
		t.Fatalf("declared unreachable after %d rounds, want FailureThreshold = 2", rounds)
	}
}
