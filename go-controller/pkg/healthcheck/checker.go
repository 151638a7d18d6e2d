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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
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
	// FailureThreshold is how many probe rounds in a row must fail hard before a
	// node is declared unreachable (one success makes it reachable again). 0
	// means 2. A round fails hard when the health server answers "not serving",
	// when the node's kernel does not answer (a TCP dial to port 9, answered with
	// a connection or a refusal, times out: the node is cut off), or when the gRPC
	// check fails at once and nothing listens on the health port (the daemon is
	// gone). See classify.
	FailureThreshold int
	// SlowThreshold is how many rounds in a row must fail, hard or soft, before a
	// node is declared unreachable. 0 means 10. A round fails soft when the node
	// is alive but its health server is slow, hung or reconnecting (the gRPC
	// check fails while the kernel answers and the health port accepts), or when
	// the round itself ran late (more than 1.5 times the timeout: the checker was
	// held up on a loaded machine, so its timeouts prove nothing). Such a node is
	// given SlowThreshold rounds (about a second with the defaults).
	//
	// At either threshold, failures that are silence (timeouts, not an answer
	// from the node) make the node unreachable only when the master heard another
	// node meanwhile; otherwise the node is held (see decide, heard).
	SlowThreshold int
	// Targets returns the nodes to probe now; it is called once per Interval.
	Targets func() []Target
	// OnChange is called (from the checker's goroutine) after a node's
	// reachability changed, with the new value. Nodes start reachable.
	OnChange func(node string, reachable bool)
	// OnHold, when set, is called (from the checker's goroutine) when a node
	// reached its threshold but is held reachable because the master suspects
	// itself (see decide): probed is how many nodes are probed. Once per episode.
	OnHold func(node string, failed, probed int)
	// Observe, when set, receives every probe's outcome (metrics).
	Observe func(node string, reachable bool, took time.Duration)
	// OnDaemonChange, when set, is called (from the checker's goroutine) when a
	// passed probe carries another daemon identity (DaemonIDHeader) than the
	// node's previous passed probe: its daemon restarted, even if no probe failed.
	OnDaemonChange func(node, id string)
}

// Checker probes nodes and remembers which are unreachable. Reachable is safe
// for concurrent use.
type Checker struct {
	cfg CheckerConfig

	mu      sync.Mutex
	hist    map[string]history // per probed node
	probers map[string]*prober
}

// outcome is the verdict of one probe round.
type outcome int

const (
	probeOK   outcome = iota
	probeSoft         // the health server did not answer in time, the node's kernel did
	probeHard         // the node's network does not answer, or its health server is gone
)

// failures counts a node's consecutive failed probes.
type failures struct{ hard, any int }

// verdict is the checker's opinion of a node.
type verdict int

const (
	reachable   verdict = iota
	unreachable         // its IPs move to reachable nodes
	// held: the node failed enough rounds in a row to be declared unreachable, but
	// its failures were silence (timeouts), not an answer from the node, and no
	// other node had answered since they began when its latest round was sent. A
	// master that hears nothing from any node cannot tell its own trouble (a stall
	// on a loaded machine, its own network) from theirs, and moving the IPs could
	// only put them on nodes it does not hear either: the node stays reachable for
	// the master until it fails a round sent after another node answered (then it
	// is declared unreachable) or it passes a round.
	held
)

// maxAnswers is how many answer times the checker keeps per node (a few hundred
// milliseconds of answers at the default pace: more than a round lasts).
const maxAnswers = 16

// history is what the checker keeps of a node's recent rounds.
type history struct {
	fail failures
	// failingSince is the start of the first round of the current run of failures.
	failingSince time.Time
	// answers are the end times of the node's latest rounds in which it answered
	// the master (it passed, or said no itself: definitive), oldest first.
	answers []time.Time
	// definitive: the latest round failed on an answer from the node itself (its
	// health server said not serving, or its kernel refused the health port: the
	// daemon is gone). That proves the master's path to the node works.
	definitive bool
	// witnessed: when the latest failed round began, the master had heard another
	// node answer since this node's failures began (see heard).
	witnessed bool
	state     verdict
	// daemonID is the DaemonIDHeader of the latest passed round ("" when the
	// node's health server sends none).
	daemonID string
}

// round is one probe round as the checker records it.
type round struct {
	out        outcome
	definitive bool   // a failure the node itself answered (see history.definitive)
	daemonID   string // a passed round: the answer's DaemonIDHeader
	start      time.Time
	took       time.Duration
}

// heard tells whether some node other than node answered in a round that ended
// between since and before (both included): the master was hearing the network
// then. A round that began before such an answer (e.g. sent while the master was
// stalled, and timed out because of it) is not witnessed by it.
func heard(node string, since, before time.Time, all map[string]history) bool {
	for other, o := range all {
		if other == node {
			continue
		}
		for _, t := range o.answers {
			if !t.Before(since) && !t.After(before) {
				return true
			}
		}
	}
	return false
}

// decide is the verdict on a node from its history (its latest round included):
//   - a node whose latest round passed is reachable;
//   - an unreachable node stays so until a round passes;
//   - below the thresholds (FailureThreshold hard, SlowThreshold any) nothing
//     changes;
//   - at a threshold the node is unreachable if its latest round was a definitive
//     no from the node itself, or if it was witnessed (the master heard another
//     node after this node's failures began and before that round began: the
//     silence is the node's); otherwise it is held (see held).
func decide(cfg CheckerConfig, h history) verdict {
	switch {
	case h.fail.any == 0:
		return reachable
	case h.state == unreachable:
		return unreachable
	case !h.fail.unreachable(cfg):
		return h.state
	case h.definitive || h.witnessed:
		return unreachable
	}
	return held
}

// unreachable tells whether a node with these consecutive failures is unreachable.
func (f failures) unreachable(cfg CheckerConfig) bool {
	return f.hard >= cfg.FailureThreshold || f.any >= cfg.SlowThreshold
}

// grpcResult is the outcome of one gRPC health check.
type grpcResult int

const (
	grpcServing    grpcResult = iota
	grpcNotServing            // the health server answered, with another status
	grpcTimeout               // no answer before the deadline
	grpcError                 // an error before the deadline: refused, reset, unavailable
)

// observation is what one probe round saw.
type observation struct {
	grpc grpcResult
	// kernelOK: the node's kernel answered the dial to port 9 (a connection or a refusal).
	kernelOK bool
	// listening (checked after a grpcError only): the health port accepted a TCP
	// connection; refused: the node's kernel refused it (nothing listens).
	listening, refused bool
	// late: the round took much longer than the timeout (more than 1.5 times): the
	// checker itself was held up (a loaded machine), so its timeouts say nothing
	// about the node.
	late bool
}

// classify turns a round's observation into an outcome. Hard: the health server
// says it is not serving, or the node's kernel did not answer in time, or the gRPC
// check failed at once and nothing listens on the health port any more (the
// daemon is gone). Soft: anything else that is not an answer (a slow or
// reconnecting health server on a live node, or a round the checker ran late).
func classify(o observation) outcome {
	switch {
	case o.grpc == grpcServing:
		return probeOK
	case o.grpc == grpcNotServing:
		return probeHard
	case o.late:
		return probeSoft
	case !o.kernelOK:
		return probeHard
	case o.grpc == grpcTimeout:
		return probeSoft
	case o.listening:
		return probeSoft
	default:
		return probeHard
	}
}

// definitive tells whether a failed round's observation is an answer from the
// node itself (it says it is not serving, or its kernel refused the health port),
// rather than silence that could also be the master's own doing.
func definitive(o observation) bool {
	return o.grpc == grpcNotServing || (o.grpc == grpcError && o.kernelOK && o.refused)
}

// NewChecker returns a Checker; call Run to start probing.
func NewChecker(cfg CheckerConfig) *Checker {
	if cfg.FailureThreshold <= 0 {
		cfg.FailureThreshold = 2
	}
	if cfg.SlowThreshold <= 0 {
		cfg.SlowThreshold = 10
	}
	if cfg.SlowThreshold < cfg.FailureThreshold {
		cfg.SlowThreshold = cfg.FailureThreshold
	}
	return &Checker{cfg: cfg, hist: map[string]history{}, probers: map[string]*prober{}}
}

// Reachable reports whether node is not declared unreachable (nodes never probed,
// and held ones, are reachable).
func (c *Checker) Reachable(node string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hist[node].state != unreachable
}

// DaemonID is the daemon identity (DaemonIDHeader) the node's latest passed probe
// carried: "" when it sent none or no probe passed yet.
func (c *Checker) DaemonID(node string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hist[node].daemonID
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
				delete(c.hist, node)
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

// record applies one probe round and returns the node's consecutive failures
// after it.
func (c *Checker) record(node string, r round) failures {
	if c.cfg.Observe != nil {
		c.cfg.Observe(node, r.out == probeOK, r.took)
	}
	c.mu.Lock()
	if _, tracked := c.probers[node]; !tracked {
		c.mu.Unlock()
		return failures{}
	}
	h := c.hist[node]
	was, wasID := h.state, h.daemonID
	end := r.start.Add(r.took)
	if r.out == probeOK {
		h.daemonID = r.daemonID
		h.fail = failures{}
		h.failingSince = time.Time{}
		h.definitive, h.witnessed = false, false
		h.answers = appendAnswer(h.answers, end)
	} else {
		if h.fail.any == 0 {
			h.failingSince = r.start
		}
		h.fail.any++
		if r.out == probeHard {
			h.fail.hard++
		} else {
			h.fail.hard = 0
		}
		h.definitive = r.definitive
		if r.definitive {
			h.answers = appendAnswer(h.answers, end)
		}
		h.witnessed = heard(node, h.failingSince, r.start, c.hist)
	}
	h.state = decide(c.cfg, h)
	c.hist[node] = h
	probed := len(c.probers)
	c.mu.Unlock()

	if r.out == probeOK && wasID != "" && r.daemonID != wasID {
		klog.Infof("egress node %s: its daemon restarted (health answers from daemon %q, before from %q)", node, r.daemonID, wasID)
		if c.cfg.OnDaemonChange != nil {
			c.cfg.OnDaemonChange(node, r.daemonID)
		}
	}

	switch {
	case was == h.state:
	case h.state == held:
		klog.Warningf("egress node %s failed %d health probes in a row, but no egress node (%d probed) answered since its "+
			"failures began: the master suspects itself (stalled on a loaded machine, or its own network), not the node, "+
			"and keeps the node's egress IPs in place until another node answers or this one does", node, h.fail.any, probed)
		if c.cfg.OnHold != nil {
			c.cfg.OnHold(node, h.fail.any, probed)
		}
	case was == held && h.state == reachable:
		klog.Infof("egress node %s answers its health probe again (it was held: the master suspected itself)", node)
	case h.state == unreachable:
		klog.Warningf("egress node %s is unreachable (no health answer within %s)", node, c.cfg.Timeout)
		if c.cfg.OnChange != nil {
			c.cfg.OnChange(node, false)
		}
	case was == unreachable:
		klog.Infof("egress node %s is reachable again", node)
		if c.cfg.OnChange != nil {
			c.cfg.OnChange(node, true)
		}
	}
	return h.fail
}

// appendAnswer adds an answer time, keeping the latest maxAnswers.
func appendAnswer(ts []time.Time, t time.Time) []time.Time {
	ts = append(ts, t)
	if len(ts) > maxAnswers {
		ts = append(ts[:0], ts[len(ts)-maxAnswers:]...)
	}
	return ts
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
	for {
		start := time.Now()
		o, def, id := p.round(ctx, client)
		if ctx.Err() != nil {
			return
		}
		f := p.checker.record(p.node, round{out: o, definitive: def, daemonID: id, start: start, took: time.Since(start)})
		// A hard failure is confirmed at once rather than an interval later, so a
		// node cut off is declared unreachable about FailureThreshold timeouts
		// after it went; after that, and after soft failures, probes go back to
		// the normal pace.
		if o == probeHard && f.hard < cfg.FailureThreshold {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round probes the node once: the gRPC health check (when client is set) and, at
// the same time, its kernel (probeLegacy), both bounded by the timeout; after a
// gRPC error, whether the health port still accepts connections. It returns the
// outcome, whether a failure was a definitive answer from the node, and the
// daemon identity a passed gRPC check carried.
func (p *prober) round(ctx context.Context, client healthpb.HealthClient) (outcome, bool, string) {
	timeout := p.checker.cfg.Timeout
	start := time.Now()
	var o observation
	var id string
	if client == nil {
		// Legacy check: the kernel's answer alone decides.
		if probeLegacy(ctx, p.addr, timeout) {
			return probeOK, false, ""
		}
		o.grpc = grpcTimeout
	} else {
		kernel := make(chan bool, 1)
		go func() { kernel <- probeLegacy(ctx, p.addr, timeout) }()
		o.grpc, id = probeGRPC(ctx, client, timeout)
		o.kernelOK = <-kernel
		if o.grpc == grpcError && o.kernelOK {
			o.listening, o.refused = probeListening(ctx, p.addr, p.checker.cfg.Port, timeout)
		}
	}
	took := time.Since(start)
	o.late = took > timeout+timeout/2
	out := classify(o)
	if out != probeOK {
		klog.V(2).Infof("egress health probe of node %s failed (%s): %+v, took %s",
			p.node, map[outcome]string{probeSoft: "soft", probeHard: "hard"}[out], o, took)
	}
	if out != probeOK {
		id = ""
	}
	return out, out != probeOK && definitive(o), id
}

// probeGRPC runs one health check; a SERVING answer comes with the daemon
// identity in its DaemonIDHeader ("" when absent).
func probeGRPC(ctx context.Context, client healthpb.HealthClient, timeout time.Duration) (grpcResult, string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var md metadata.MD
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: ServiceName}, grpc.Header(&md))
	switch {
	case err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING:
		id := ""
		if v := md.Get(DaemonIDHeader); len(v) > 0 {
			id = v[0]
		}
		return grpcServing, id
	case err == nil:
		return grpcNotServing, ""
	case status.Code(err) == codes.DeadlineExceeded || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return grpcTimeout, ""
	default:
		return grpcError, ""
	}
}

// probeListening reports whether a TCP connection to the health port succeeds
// (accepted) or is refused by the node (refused); neither when it times out.
func probeListening(ctx context.Context, addr netip.Addr, port int, timeout time.Duration) (accepted, refused bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(addr.String(), strconv.Itoa(port)))
	if err != nil {
		return false, errors.Is(err, syscall.ECONNREFUSED)
	}
	c.Close()
	return true, false
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
