package healthcheck

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
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
	c := NewChecker(CheckerConfig{Timeout: time.Second, FailureThreshold: 3,
		OnChange: func(_ string, ok bool) { changes = append(changes, ok) }})
	c.probers["n"] = &prober{}
	for _, ok := range []bool{false, false, true, false, false} {
		c.record("n", ok, 0)
	}
	if !c.Reachable("n") || len(changes) != 0 {
		t.Fatalf("two failures in a row out of a threshold of three must not flip the node: %v", changes)
	}
	c.record("n", false, 0)
	if c.Reachable("n") || len(changes) != 1 || changes[0] {
		t.Fatalf("the third failure in a row makes the node unreachable: %v", changes)
	}
	c.record("n", true, 0)
	if !c.Reachable("n") || len(changes) != 2 || !changes[1] {
		t.Fatalf("one success makes it reachable again: %v", changes)
	}
}
