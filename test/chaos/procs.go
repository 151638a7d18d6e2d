package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/metrics"
)

// restartDelay is how long the supervisor waits before restarting a process that exited, as the kubelet restarts
// a DaemonSet's or Deployment's container.
const restartDelay = time.Second

// proc is one ovnkube process the supervisor keeps running.
type proc struct {
	name    string
	argv    []string
	netns   string // "" = root namespace
	metrics string // 127.0.0.1:PORT (inside netns)

	cmd      *exec.Cmd
	exited   chan struct{}
	restarts int
	// delay is how long the supervisor waits before restarting it after its next exit (restartDelay when 0).
	delay time.Duration
	exits []string // "<time> <how>" of every exit
}

// supervisor runs ovnkube processes and restarts them when they exit (kill -9, lost Lease, crash).
type supervisor struct {
	dir   string
	mu    sync.Mutex
	procs map[string]*proc
	done  bool
	wg    sync.WaitGroup
}

func newSupervisor(dir string) *supervisor { return &supervisor{dir: dir, procs: map[string]*proc{}} }

func (s *supervisor) add(p *proc) error {
	s.mu.Lock()
	s.procs[p.name] = p
	s.mu.Unlock()
	return s.start(p)
}

func (s *supervisor) start(p *proc) error {
	argv := p.argv
	if p.netns != "" {
		argv = append([]string{"ip", "netns", "exec", p.netns}, argv...)
	}
	f, err := os.OpenFile(filepath.Join(s.dir, "ovnkube-"+p.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	// Started under the lock, after checking done: stop never misses a process started meanwhile.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		f.Close()
		return nil
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited = cmd, exited
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		err := cmd.Wait()
		f.Close()
		close(exited)
		s.mu.Lock()
		p.exits = append(p.exits, fmt.Sprintf("%s %v", time.Now().Format("15:04:05"), err))
		s.mu.Unlock()
		s.mu.Lock()
		delay := restartDelay
		if p.delay > 0 {
			delay, p.delay = p.delay, 0
		}
		s.mu.Unlock()
		time.Sleep(delay)
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			return
		}
		p.restarts++
		s.mu.Unlock()
		if err := s.start(p); err != nil {
			s.mu.Lock()
			p.exits = append(p.exits, fmt.Sprintf("%s restart: %v", time.Now().Format("15:04:05"), err))
			s.mu.Unlock()
		}
	}()
	return nil
}

// kill9 sends SIGKILL to the process group of name; the supervisor restarts it after delay.
func (s *supervisor) kill9(name string, delay time.Duration) error {
	s.mu.Lock()
	p := s.procs[name]
	var cmd *exec.Cmd
	var exited chan struct{}
	if p != nil {
		cmd, exited = p.cmd, p.exited
		p.delay = delay
	}
	s.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("no process %s", name)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-exited
	return nil
}

// pid is the pid of the ovnkube process of name (the child of "ip netns exec" is exec'd in place: same pid).
func (s *supervisor) pid(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.procs[name]; p != nil && p.cmd != nil && p.cmd.Process != nil {
		return p.cmd.Process.Pid
	}
	return 0
}

func (s *supervisor) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for n := range s.procs {
		out = append(out, n)
	}
	return out
}

func (s *supervisor) stop() {
	s.mu.Lock()
	s.done = true
	var pids []int
	for _, p := range s.procs {
		if p.cmd != nil && p.cmd.Process != nil {
			pids = append(pids, p.cmd.Process.Pid)
		}
	}
	s.mu.Unlock()
	for _, pid := range pids {
		_ = syscall.Kill(-pid, syscall.SIGTERM)
	}
	ch := make(chan struct{})
	go func() { s.wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
		s.wg.Wait()
	}
}

// sample is one reading of a process's resources.
type sample struct {
	goroutines, heapLive, rss float64 // -1 when not available
}

// scrape reads go_goroutines, go_gc_heap_live_bytes and process_resident_memory_bytes from p's /metrics.
func scrape(ctx context.Context, p *proc) sample {
	s := sample{-1, -1, -1}
	m, err := scrapeProc(ctx, p)
	if err != nil {
		return s
	}
	for name, dst := range map[string]*float64{"go_goroutines": &s.goroutines, "go_gc_heap_live_bytes": &s.heapLive,
		"process_resident_memory_bytes": &s.rss} {
		if v, ok := m.Value(name); ok {
			*dst = v
		}
	}
	return s
}

// scrapeProc reads p's /metrics, from inside its netns when it runs in one.
func scrapeProc(ctx context.Context, p *proc) (metrics.Set, error) {
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if p.netns == "" {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}
		return cluster.DialFrom(p.netns, network, addr, 2*time.Second)
	}}
	defer tr.CloseIdleConnections()
	return metrics.Scrape(ctx, &http.Client{Transport: tr, Timeout: 3 * time.Second}, metrics.URL(p.metrics))
}

// queueState is a reading of one workqueue's metrics (metricsutil: workqueue_*{name=...}).
type queueState struct {
	present           bool     // the queue's metrics are served (for the master: it leads)
	depth, adds, done float64  // waiting items, items added, items processed (work duration count)
	unreachable       []string // nodes the master's health check finds unreachable (ovnkube_master_egress_node_reachable 0)
}

func (q queueState) String() string {
	if !q.present {
		return "no sync queue: not leading"
	}
	return fmt.Sprintf("depth %g, added %g, processed %g, unreachable %v", q.depth, q.adds, q.done, q.unreachable)
}

// idle: nothing waits and every add was processed.
func (q queueState) idle() bool { return q.present && q.depth == 0 && q.adds == q.done }

// readQueue reads the workqueue metrics of queue name from p's /metrics.
func readQueue(ctx context.Context, p *proc, name string) (queueState, error) {
	m, err := scrapeProc(ctx, p)
	if err != nil {
		return queueState{}, err
	}
	var q queueState
	seen := 0
	for metric, dst := range map[string]*float64{"workqueue_depth": &q.depth, "workqueue_adds_total": &q.adds,
		"workqueue_work_duration_seconds_count": &q.done} {
		if v, ok := m.Value(metric, "name", name); ok {
			*dst = v
			seen++
		}
	}
	for _, s := range m.Series("ovnkube_master_egress_node_reachable") {
		if node := metrics.Label(s, "node"); node != "" && metrics.Value(s) == 0 {
			q.unreachable = append(q.unreachable, node)
		}
	}
	sort.Strings(q.unreachable)
	q.present = seen == 3
	return q, nil
}

// rssOf is a process's resident memory from /proc (bytes; -1 when gone).
func rssOf(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, err := strconv.ParseFloat(f[0], 64)
				if err != nil {
					return -1 // unknown
				}
				return kb * 1024
			}
		}
	}
	return -1
}
