package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/metrics"
	"github.com/ovn-egressip/ovn-egressip/test/ports"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// Metric names read from the master's /metrics (go-controller/pkg/master/metrics.go
// and the client_golang Go and process collectors of cmd/ovnkube).
const (
	metricNBTransactions = "ovnkube_master_egress_ip_nb_transactions_total"
	metricStatusUpdates  = "ovnkube_master_egress_ip_status_updates_total"
	metricSyncs          = "ovnkube_master_egress_ip_syncs_total"
	metricSyncErrors     = "ovnkube_master_egress_ip_sync_errors_total"
	// metricSyncDuration is a histogram with label "kind" ("full" or "incremental");
	// optional: the harness prints "n/a" when the master does not export it.
	metricSyncDuration = "ovnkube_master_egress_ip_sync_duration_seconds"
	// metricAssignLatency is a histogram, from the first event of a sync's batch to
	// its NB commit, of the syncs that assigned or moved egress IPs.
	metricAssignLatency = "ovnkube_master_egress_ips_assign_latency_seconds"
	metricHeapInuse     = "go_memstats_heap_inuse_bytes"
	metricHeapLive      = "go_gc_heap_live_bytes" // optional (runtime/metrics /gc/heap/live:bytes)
	metricRSS           = "process_resident_memory_bytes"
)

// memory is the master's memory as its metrics tell (bytes; HeapLive -1: not exported).
type memory struct {
	HeapInuse, HeapLive, RSS float64
}

func memoryOf(m metrics.Set) memory {
	mem := memory{HeapInuse: m.Sum(metricHeapInuse), HeapLive: -1, RSS: m.Sum(metricRSS)}
	if m.Has(metricHeapLive) {
		mem.HeapLive = m.Sum(metricHeapLive)
	}
	return mem
}

// sampleMemory scrapes the master every period until ctx is done and keeps the
// largest value of each memory figure seen (read with peak).
func (m *masterProc) sampleMemory(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ms, err := m.scrape(ctx); err == nil {
			m.notePeak(memoryOf(ms))
		}
	}
}

func (m *masterProc) notePeak(mem memory) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.peakMem = m.peakMem.max(mem)
	if n := len(m.stagePeaks); n == 0 || m.stagePeaks[n-1].Stage != m.stage {
		m.stagePeaks = append(m.stagePeaks, stagePeak{Stage: m.stage, Peak: memory{HeapLive: -1}})
	}
	last := &m.stagePeaks[len(m.stagePeaks)-1]
	last.Peak = last.Peak.max(mem)
}

// setStage starts a stage: memory seen from now on counts for it.
func (m *masterProc) setStage(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stage = name
}

// peaksByStage returns the largest figures seen in each stage, in stage order.
func (m *masterProc) peaksByStage() []stagePeak {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.stagePeaks)
}

func (a memory) max(b memory) memory {
	return memory{HeapInuse: max(a.HeapInuse, b.HeapInuse), HeapLive: max(a.HeapLive, b.HeapLive), RSS: max(a.RSS, b.RSS)}
}

func (m *masterProc) peak() memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peakMem
}

// masterProc is the master running as its own process: the ovnkube binary with
// --init-master, its log in a file, its metrics on a loopback port.
type masterProc struct {
	cmd     *exec.Cmd
	waited  chan struct{}
	exitErr error // set before waited is closed
	log     string
	metrics string // http://127.0.0.1:PORT/metrics
	pprof   string // http://127.0.0.1:PORT/debug/pprof/
	nbPid   int    // the NB ovsdb-server, whose CPU time is sampled too
	http    *http.Client

	mu      sync.Mutex
	peakMem memory
	// stage is what the harness is doing ("start-up", then each phase's name);
	// stagePeaks the largest figures seen during each stage, in stage order.
	stage      string
	stagePeaks []stagePeak
}

// stagePeak is the largest of each memory figure seen while the harness was in
// one stage.
type stagePeak struct {
	Stage string
	Peak  memory
}

// buildOvnkube builds ./go-controller/cmd/ovnkube of this checkout into dir.
func buildOvnkube(dir string) (string, error) {
	root, err := apiserver.RepoRoot()
	if err != nil {
		return "", err
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("go not in PATH (make adds /usr/local/go/bin): %w", err)
	}
	out := filepath.Join(dir, "ovnkube")
	cmd := exec.Command(goBin, "build", "-o", out, "./go-controller/cmd/ovnkube")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./go-controller/cmd/ovnkube: %w\n%s", err, b)
	}
	return out, nil
}

// startMaster starts bin as the master against the apiserver of kubeconfig and the
// NB at nbAddr (shared gateway mode, the layout's subnets, no leader election, no
// health check: every node reachable), and stops it at cleanup (SIGTERM). Its log
// is kept in a temp dir when t failed.
func startMaster(t testing.TB, bin, kubeconfig, nbAddr string) *masterProc {
	t.Helper()
	return startProc(t, bin, "ovnkube-master", ovnkube(kubeconfig, "--init-master", "--nb-address", nbAddr,
		"--leader-elect=false", "--egressip-reachability-total-timeout", "0")...)
}

// ovnkube is the command line of an ovnkube of the scale runs with role flags role: shared gateway mode, the
// layout's IPv4 subnets, log level 2.
func ovnkube(kubeconfig string, role ...string) []string {
	return cluster.Ovnkube{Kubeconfig: kubeconfig, GatewayMode: gwmode.Shared, Families: []int{4}, LogLevel: "2",
		Role: role}.Args()
}

// startProc starts bin with args plus its metrics and pprof on free loopback
// ports, its output in <name>.log in a temp dir, and stops it at cleanup (SIGTERM).
// The log is kept when t failed (or SCALE_KEEP_LOG is set).
func startProc(t testing.TB, bin, name string, args ...string) *masterProc {
	t.Helper()
	port, err := ports.FreeLoopback()
	if err != nil {
		t.Fatalf("scale: metrics port: %v", err)
	}
	pprofPort, err := ports.FreeLoopback()
	if err != nil {
		t.Fatalf("scale: pprof port: %v", err)
	}
	dir, err := os.MkdirTemp("", "scale-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	m := &masterProc{
		log:     filepath.Join(dir, name+".log"),
		metrics: metrics.URL(fmt.Sprintf("127.0.0.1:%d", port)),
		pprof:   fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/", pprofPort),
		http:    &http.Client{Timeout: 10 * time.Second},
		waited:  make(chan struct{}),
		peakMem: memory{HeapLive: -1},
		stage:   "start-up",
	}
	logf, err := os.Create(m.log)
	if err != nil {
		t.Fatal(err)
	}
	m.cmd = exec.Command(bin, append(args,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", port),
		"--enable-pprof", "--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", pprofPort))...)
	m.cmd.Stdout, m.cmd.Stderr = logf, logf
	if err := m.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("scale: start %s: %v", bin, err)
	}
	go func() {
		m.exitErr = m.cmd.Wait()
		logf.Close()
		close(m.waited)
	}()
	t.Cleanup(func() {
		if err := m.stop(); err != nil {
			t.Errorf("scale: %s: %v (log %s)", name, err, m.log)
		}
		if t.Failed() || os.Getenv("SCALE_KEEP_LOG") != "" {
			t.Logf("scale: kept the log of %s: %s", name, m.log)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return m
}

func (m *masterProc) pid() int { return m.cmd.Process.Pid }

// stop sends SIGTERM and waits (SIGKILL after 10 s). An exit status other than 0
// is an error; calling it twice is fine.
func (m *masterProc) stop() error {
	select {
	case <-m.waited:
		return m.exited()
	default:
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.waited:
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.waited
		return fmt.Errorf("did not stop within 10 s of SIGTERM")
	}
	return m.exited()
}

func (m *masterProc) exited() error {
	if m.exitErr != nil {
		return fmt.Errorf("exited: %w", m.exitErr)
	}
	return nil
}

// alive returns an error (with the log's tail) when the process has exited.
func (m *masterProc) alive() error {
	select {
	case <-m.waited:
		b, err := os.ReadFile(m.log)
		if err != nil {
			b = []byte(err.Error())
		}
		if len(b) > 2000 {
			b = b[len(b)-2000:]
		}
		why := m.exitErr
		if why == nil {
			why = errors.New("exit status 0")
		}
		return fmt.Errorf("the master exited: %w; log %s ends:\n%s", why, m.log, b)
	default:
		return nil
	}
}

// saveHeapProfile writes the master's heap profile (after a GC) to path.
func (m *masterProc) saveHeapProfile(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.pprof+"heap?gc=1", nil)
	if err != nil {
		return err
	}
	resp, err := m.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// cpuProfile starts the master's CPU profile for d and writes it to path when it
// ends (errors are logged: a profile is a diagnosis, not a measurement).
func (m *masterProc) cpuProfile(ctx context.Context, t testing.TB, d time.Duration, path string) {
	go func() {
		url := fmt.Sprintf("%sprofile?seconds=%d", m.pprof, int(d.Seconds()))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err == nil {
			var resp *http.Response
			// Not m.http: its timeout is shorter than a profile.
			if resp, err = http.DefaultClient.Do(req); err == nil {
				var b []byte
				if b, err = io.ReadAll(resp.Body); err == nil {
					err = os.WriteFile(path, b, 0o644)
				}
				resp.Body.Close()
			}
		}
		if err != nil {
			t.Logf("scale: the master's CPU profile: %v", err)
		}
	}()
}

// scrape reads the master's /metrics.
func (m *masterProc) scrape(ctx context.Context) (metrics.Set, error) {
	return metrics.Scrape(ctx, m.http, m.metrics)
}

// syncsDone is the number of syncs the master finished (the duration histogram's
// count plus failed syncs), or false when it does not export the histogram.
func syncsDone(s metrics.Set) (float64, bool) {
	hs := s.Histograms(metricSyncDuration, "kind")
	if hs == nil {
		return 0, false
	}
	var n uint64
	for _, h := range hs {
		n += h.Count
	}
	return float64(n) + s.Sum(metricSyncErrors), true
}

// cpuTime is CPU time (user + system).
type cpuTime = time.Duration

// userHZ is the unit of /proc/<pid>/stat times (USER_HZ, 100 on Linux).
const userHZ = 100

// procCPU reads the CPU time of process pid from /proc/<pid>/stat.
func procCPU(pid int) (cpuTime, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces: fields
	// after the last ')' start with field 3 (state); utime and stime are 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * time.Second / userHZ, nil
}

// selfCPU is this process' CPU time (getrusage RUSAGE_SELF): the harness.
func selfCPU() (cpuTime, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// machineBusy is the CPU time every process of the machine used (all CPUs, from
// /proc/stat: total minus idle and iowait).
func machineBusy() (cpuTime, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 6 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var busy uint64
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		if i == 3 || i == 4 || i >= 8 { // idle, iowait; guest time is already in user
			continue
		}
		busy += n
	}
	return time.Duration(busy) * time.Second / userHZ, nil
}

// cpuSample is the CPU time of the master, the harness and the machine at one moment.
type cpuSample struct {
	at                           time.Time
	master, harness, machine, nb cpuTime
}

func (m *masterProc) cpuNow() (cpuSample, error) {
	s := cpuSample{at: time.Now()}
	var err1, err2, err3 error
	s.master, err1 = procCPU(m.pid())
	s.harness, err2 = selfCPU()
	s.machine, err3 = machineBusy()
	var err4 error
	if m.nbPid != 0 {
		s.nb, err4 = procCPU(m.nbPid)
	}
	return s, errors.Join(err1, err2, err3, err4)
}

// CPU is the CPU time used over a window.
type CPU struct {
	Wall                         time.Duration
	Master, Harness, Machine, NB cpuTime
}

func cpuBetween(a, b cpuSample) CPU {
	return CPU{Wall: b.at.Sub(a.at), Master: b.master - a.master, Harness: b.harness - a.harness, Machine: b.machine - a.machine, NB: b.nb - a.nb}
}

// String renders the CPU times and the harness' share of master + harness.
func (c CPU) String() string {
	share := "-"
	if c.Master+c.Harness > 0 {
		share = fmt.Sprintf("%.0f%%", 100*float64(c.Harness)/float64(c.Master+c.Harness))
	}
	return fmt.Sprintf("CPU over %v: master %v, harness %v (%s of the two), NB ovsdb-server %v, machine %v",
		c.Wall.Round(time.Millisecond), c.Master.Round(10*time.Millisecond), c.Harness.Round(10*time.Millisecond),
		share, c.NB.Round(10*time.Millisecond), c.Machine.Round(10*time.Millisecond))
}
