package healthcheck

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/klog/v2"
)

// Target is one node to probe: its name and the address its health server listens on.
type Target struct {
	Node string
	Addr netip.Addr
}

// CheckerConfig tunes a Checker.
type CheckerConfig struct {
	// Port is the gRPC health port; 0 selects the legacy check (a TCP dial to
	// port 9 where "connection refused" also proves the node is up).
	Port int
	// Interval is the time between two probes of one node (e.g. 100ms).
	Interval time.Duration
	// Timeout bounds one probe (the reachability total timeout). 0 disables
	// probing: every target is reported reachable.
	Timeout time.Duration
	// FailureThreshold is how many probes in a row must fail before a node is
	// declared unreachable (one success makes it reachable again). 0 means 2:
	// one slow answer on a loaded machine must not move every IP of a node.
	FailureThreshold int
	// Targets returns the nodes to probe now; it is called once per Interval.
	Targets func() []Target
	// OnChange is called (from the checker's goroutine) after a node's
	// reachability changed, with the new value. Nodes start reachable.
	OnChange func(node string, reachable bool)
	// Observe, when set, receives every probe's outcome (metrics).
	Observe func(node string, reachable bool, took time.Duration)
}

// Checker probes nodes and remembers which are unreachable. Reachable is safe
// for concurrent use.
type Checker struct {
	cfg CheckerConfig

	mu          sync.Mutex
	unreachable map[string]bool
	failures    map[string]int // consecutive failed probes per node
	probers     map[string]*prober
}

// NewChecker returns a Checker; call Run to start probing.
func NewChecker(cfg CheckerConfig) *Checker {
	if cfg.FailureThreshold <= 0 {
		cfg.FailureThreshold = 2
	}
	return &Checker{cfg: cfg, unreachable: map[string]bool{}, failures: map[string]int{}, probers: map[string]*prober{}}
}

// Reachable reports whether node passed its latest probe (nodes never probed are reachable).
func (c *Checker) Reachable(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.unreachable[node]
}

// Run probes until ctx is done. Each node has its own prober goroutine so a
// slow node never delays the verdict on another.
func (c *Checker) Run(ctx context.Context) {
	if c.cfg.Timeout <= 0 {
		klog.Infof("egress node health check disabled (timeout 0): every node counts as reachable")
		<-ctx.Done()
		return
	}
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.refresh(ctx)
		select {
		case <-ctx.Done():
			c.mu.Lock()
			for _, p := range c.probers {
				p.stop()
			}
			c.mu.Unlock()
			return
		case <-t.C:
		}
	}
}

// refresh starts probers for new targets (or changed addresses) and stops the others.
func (c *Checker) refresh(ctx context.Context) {
	want := map[string]netip.Addr{}
	for _, t := range c.cfg.Targets() {
		want[t.Node] = t.Addr
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for node, p := range c.probers {
		if addr, ok := want[node]; !ok || addr != p.addr {
			p.stop()
			delete(c.probers, node)
			if !ok {
				delete(c.unreachable, node)
				delete(c.failures, node)
			}
		}
	}
	for node, addr := range want {
		if _, ok := c.probers[node]; ok {
			continue
		}
		p := &prober{node: node, addr: addr, checker: c}
		c.probers[node] = p
		pctx, cancel := context.WithCancel(ctx)
		p.cancel = cancel
		go p.run(pctx)
	}
}

func (c *Checker) record(node string, ok bool, took time.Duration) {
	if c.cfg.Observe != nil {
		c.cfg.Observe(node, ok, took)
	}
	c.mu.Lock()
	if _, tracked := c.probers[node]; !tracked {
		c.mu.Unlock()
		return
	}
	was := !c.unreachable[node]
	if ok {
		delete(c.unreachable, node)
		delete(c.failures, node)
	} else {
		c.failures[node]++
		if c.failures[node] >= c.cfg.FailureThreshold {
			c.unreachable[node] = true
		}
	}
	now := !c.unreachable[node]
	c.mu.Unlock()
	if was != now {
		ok = now
		if ok {
			klog.Infof("egress node %s is reachable again", node)
		} else {
			klog.Warningf("egress node %s is unreachable (no health answer within %s)", node, c.cfg.Timeout)
		}
		if c.cfg.OnChange != nil {
			c.cfg.OnChange(node, ok)
		}
	}
}

type prober struct {
	node    string
	addr    netip.Addr
	checker *Checker
	cancel  context.CancelFunc
}

func (p *prober) stop() {
	p.cancel()
}

func (p *prober) run(ctx context.Context) {
	cfg := p.checker.cfg
	var conn *grpc.ClientConn
	var client healthpb.HealthClient
	if cfg.Port != 0 {
		var err error
		// Reconnect fast: a node that comes back must be seen within about a second.
		conn, err = grpc.NewClient(net.JoinHostPort(p.addr.String(), strconv.Itoa(cfg.Port)),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: cfg.Interval, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: cfg.Timeout,
			}))
		if err != nil {
			klog.Errorf("egress health check of node %s: %v", p.node, err)
			return
		}
		defer conn.Close()
		client = healthpb.NewHealthClient(conn)
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	failed := 0
	for {
		start := time.Now()
		var ok bool
		if client != nil {
			ok = probeGRPC(ctx, client, cfg.Timeout)
		} else {
			ok = probeLegacy(ctx, p.addr, cfg.Timeout)
		}
		if ctx.Err() != nil {
			return
		}
		p.checker.record(p.node, ok, time.Since(start))
		// A failed probe is confirmed at once rather than an interval later, so
		// a dead node is declared unreachable about FailureThreshold timeouts
		// after it died; after that, probes go back to the normal pace.
		if ok {
			failed = 0
		} else if failed++; failed < cfg.FailureThreshold {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func probeGRPC(ctx context.Context, client healthpb.HealthClient, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: ServiceName})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

// probeLegacy dials TCP port 9 (discard): a connection or "connection refused"
// both prove the node's stack answers.
func probeLegacy(ctx context.Context, addr netip.Addr, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(addr.String(), "9"))
	if err == nil {
		c.Close()
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}
