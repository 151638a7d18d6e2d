package scale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/test/metrics"
)

// phaseContext bounds a phase by cfg.Timeout and ends it early if the master exits.
func (h *harness) phaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeoutCause(ctx, h.cfg.Timeout, fmt.Errorf("phase timeout %v", h.cfg.Timeout))
	ctx, cancelCause := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-h.master.waited:
			cancelCause(h.master.alive())
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancelCause(nil); cancel() }
}

// quiet collects the harness' own garbage before a phase starts: its heap (the
// informers, the NB monitor's cache, the tracker: 200-250 MiB at 20,000 pods)
// then has the most room before its collector runs again, which it did during
// short phases (a 2-second profile of the harness over node-loss: most of its
// 370 ms in the collector), on the cores the master and ovsdb-server need.
func quiet() { runtime.GC() }

// begin starts phase name's measurements: the master's memory stage, the harness' garbage collected, then the
// master's metrics and the CPU times before it.
func (h *harness) begin(ctx context.Context, name string) (metrics.Set, cpuSample) {
	h.master.setStage(name)
	quiet()
	return h.scrape(ctx), h.cpu()
}

// phase runs change, waits until converged (tracker, then one full check), lets
// the master settle and returns the measurements.
func (h *harness) phase(ctx context.Context, name string, change func()) Phase {
	h.t.Helper()
	h.master.setStage(name)
	quiet()
	before := h.tr.assignments() // the informer's: a LIST now would load the apiserver as the phase starts
	m0 := h.scrape(ctx)
	c0 := h.cpu()
	h.profile(ctx, name)
	change()
	start := time.Now()
	h.t.Logf("scale: phase %s: its last API write returned at %s", name, start.Format("15:04:05.000000"))
	p := Phase{Name: name, Change: start.Sub(c0.at)}
	at, c1 := h.verified(ctx, name, &p)
	p.Converged = max(0, at.Sub(start))
	p.CPU = cpuBetween(c0, c1)
	h.settle(ctx)
	h.counters(ctx, &p, m0)
	for ip, node := range h.assignments(ctx) {
		if was, ok := before[ip]; ok && was != node {
			p.Moved++
		}
	}
	return p
}

// verified waits until the tracker says converged and the full check agrees. It
// returns when the tracker's converged state arrived and the CPU sample taken when
// it was detected (before the full check).
func (h *harness) verified(ctx context.Context, name string, p *Phase) (time.Time, cpuSample) {
	h.t.Helper()
	pctx, cancel := h.phaseContext(ctx)
	defer cancel()
	for {
		at, err := h.tr.waitConverged(pctx)
		if err != nil {
			h.t.Fatalf("scale: phase %s: %v; full check: %s", name, err, h.converged(ctx))
		}
		c := h.cpu()
		_, _, _, changed := h.tr.state()
		p.Checks++
		problem := h.converged(pctx)
		if problem == "" {
			return at, c
		}
		h.t.Logf("scale: phase %s: the tracker saw convergence, the full check did not (%s); waiting", name, problem)
		select {
		case <-changed:
		case <-time.After(time.Second):
		case <-pctx.Done():
			h.t.Fatalf("scale: phase %s: %v; full check: %s", name, context.Cause(pctx), problem)
		}
	}
}

// profile starts the master's CPU profile when SCALE_CPU_PROFILE_PHASE names the
// phase: SCALE_CPU_PROFILE=<file>, over the phase's first SCALE_CPU_PROFILE_SECONDS
// (default 3). SCALE_APISERVER_PROFILE=<file> and SCALE_HARNESS_PROFILE=<file> save
// the kube-apiserver's and the harness' own CPU profiles over the same time.
func (h *harness) profile(ctx context.Context, name string) {
	path := os.Getenv("SCALE_CPU_PROFILE")
	if path == "" || os.Getenv("SCALE_CPU_PROFILE_PHASE") != name {
		return
	}
	d := 3 * time.Second
	if v, err := time.ParseDuration(os.Getenv("SCALE_CPU_PROFILE_SECONDS") + "s"); err == nil && v >= time.Second {
		d = v
	}
	h.master.cpuProfile(ctx, h.t, d, path)
	if hpath := os.Getenv("SCALE_HARNESS_PROFILE"); hpath != "" {
		// The harness' own CPU over the same time (this process).
		f, err := os.Create(hpath)
		if err == nil {
			if err = pprof.StartCPUProfile(f); err != nil {
				f.Close()
			}
		}
		if err != nil {
			h.t.Logf("scale: the harness' CPU profile: %v", err)
		} else {
			time.AfterFunc(d, func() {
				pprof.StopCPUProfile()
				f.Close()
			})
		}
	}
	if apath := os.Getenv("SCALE_APISERVER_PROFILE"); apath != "" {
		// The kube-apiserver's CPU over the same time (its /debug/pprof, as admin).
		go func() {
			b, err := h.kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
				Param("seconds", fmt.Sprint(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(apath, b, 0o644)
			}
			if err != nil {
				h.t.Logf("scale: the apiserver's CPU profile: %v", err)
			}
		}()
	}
}

// podAdd creates cfg.AddPods pods one at a time (namespaces round robin), each
// after the previous one's rows were in NB.
func (h *harness) podAdd(ctx context.Context) Phase {
	h.t.Helper()
	p := Phase{Name: "pod-add"}
	m0, c0 := h.begin(ctx, p.Name)
	h.profile(ctx, p.Name)
	for i := 0; i < h.cfg.AddPods; i++ {
		s, ok := h.freshSlot()
		if !ok {
			h.t.Fatalf("scale: pod-add: node subnets full")
		}
		_, ipSet, write, err := h.createPod(ctx, namespaceName(i%h.cfg.Namespaces), s)
		if err != nil {
			h.t.Fatalf("scale: pod-add: %v", err)
		}
		pctx, cancel := h.phaseContext(ctx)
		at, err := h.tr.waitConverged(pctx)
		cancel()
		if err != nil {
			h.t.Fatalf("scale: pod-add: pod %d: %v", i, err)
		}
		p.PodAdd = append(p.PodAdd, max(0, at.Sub(ipSet)))
		p.APIWrites = append(p.APIWrites, write)
	}
	_, c1 := h.verified(ctx, p.Name, &p)
	p.CPU = cpuBetween(c0, c1)
	h.settle(ctx)
	h.counters(ctx, &p, m0)
	return p
}

// idle pokes the master with an event that changes nothing and waits until it
// started a sync after it and is idle again.
func (h *harness) idle(ctx context.Context) Phase {
	h.t.Helper()
	p := Phase{Name: "idle"}
	m0, c0 := h.begin(ctx, p.Name)
	if err := h.poke(ctx); err != nil {
		h.t.Fatal(err)
	}
	// A master that filters this event out runs no sync: say so and go on.
	if err := h.waitMetric(ctx, metricSyncs, m0.Sum(metricSyncs)+1, 30*time.Second); err != nil {
		h.t.Logf("scale: idle: no sync after the poke: %v", err)
	}
	h.settle(ctx)
	p.CPU = cpuBetween(c0, h.cpu())
	if problem := h.converged(ctx); problem != "" {
		h.t.Fatalf("scale: idle: no longer converged: %s", problem)
	}
	p.Checks = 1
	m1 := h.counters(ctx, &p, m0)
	if hs0, hs1 := m0.Histograms(metricSyncDuration, "kind"), m1.Histograms(metricSyncDuration, "kind"); hs1 != nil {
		p.SyncDurations = map[string]metrics.Histo{}
		for kind, h1 := range hs1 {
			h0 := hs0[kind]
			p.SyncDurations[kind] = metrics.Histo{Count: h1.Count - h0.Count, Sum: h1.Sum - h0.Sum}
		}
	}
	return p
}

// counters fills p's master counters (deltas since m0) and returns the scrape.
func (h *harness) counters(ctx context.Context, p *Phase, m0 metrics.Set) metrics.Set {
	m1 := h.scrape(ctx)
	p.NBTransactions = m1.Sum(metricNBTransactions) - m0.Sum(metricNBTransactions)
	p.StatusUpdates = m1.Sum(metricStatusUpdates) - m0.Sum(metricStatusUpdates)
	p.Syncs = m1.Sum(metricSyncs) - m0.Sum(metricSyncs)
	h0, h1 := m0.Histograms(metricAssignLatency, "")[""], m1.Histograms(metricAssignLatency, "")[""]
	p.MasterCommit = metrics.Histo{Count: h1.Count - h0.Count, Sum: h1.Sum - h0.Sum}
	return m1
}

// memory records the master's memory (its metrics) and the harness' heap.
func (h *harness) memory(ctx context.Context, res *Result) {
	res.Master = memoryOf(h.scrape(ctx))
	if path := os.Getenv("SCALE_HEAP_PROFILE"); path != "" {
		if err := h.master.saveHeapProfile(ctx, path); err != nil {
			h.t.Errorf("scale: master heap profile: %v", err)
		} else {
			h.t.Logf("scale: the master's heap profile after assign: %s (go tool pprof -sample_index=inuse_space %s)", path, path)
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HarnessHeapInuse = ms.HeapInuse
}

func (h *harness) scrape(ctx context.Context) metrics.Set {
	h.t.Helper()
	m, err := h.master.scrape(ctx)
	if err != nil {
		h.t.Fatalf("scale: %v", errors.Join(err, h.master.alive()))
	}
	h.master.notePeak(memoryOf(m))
	return m
}

func (h *harness) cpu() cpuSample {
	h.t.Helper()
	c, err := h.master.cpuNow()
	if err != nil {
		h.t.Fatalf("scale: CPU times: %v", err)
	}
	return c
}

// waitMetric waits until the master's metric name is at least v (scraping every 20 ms).
func (h *harness) waitMetric(ctx context.Context, name string, v float64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := h.master.alive(); err != nil {
			return err
		}
		m, err := h.master.scrape(ctx)
		if err == nil && m.Sum(name) >= v {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("%s below %v after %v: last scrape: %w", name, v, timeout, err)
			}
			return fmt.Errorf("%s below %v after %v", name, v, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Settling: the master is idle when its CPU time advanced by at most one tick over
// settleWindow and, if it exports the sync duration histogram, every sync it
// started has finished.
const settleWindow = 200 * time.Millisecond

// settle waits (at most 30 s) until the master and the NB server are idle, so that
// the master's counters are final and the next phase starts on a quiet master.
func (h *harness) settle(ctx context.Context) {
	h.t.Helper()
	if !waitIdle(ctx, h.t, []*masterProc{h.master}, []int{h.master.nbPid}, 30*time.Second) {
		h.t.Logf("scale: the master was not idle within 30 s; counters may still move")
	}
}

// waitIdle waits (at most timeout) until every process of procs used at most one
// CPU tick over settleWindow and finished every sync it started (when it exports
// the sync duration histogram), and every process of pids (NB servers: after a
// large transaction they go on writing their log and compacting) used at most one
// tick too. false: not idle in time.
func waitIdle(ctx context.Context, t testing.TB, procs []*masterProc, pids []int, timeout time.Duration) bool {
	t.Helper()
	deadline := time.Now().Add(timeout)
	cpus := func() []cpuTime {
		var out []cpuTime
		for _, m := range procs {
			c, err := procCPU(m.pid())
			if err != nil {
				t.Fatalf("scale: %v", errors.Join(err, m.alive()))
			}
			out = append(out, c)
		}
		for _, pid := range pids {
			c, err := procCPU(pid)
			if err != nil { // an NB server that is gone: unknown is not idle
				t.Fatalf("scale: NB server: %v", err)
			}
			out = append(out, c)
		}
		return out
	}
next:
	for time.Now().Before(deadline) {
		c0 := cpus()
		time.Sleep(settleWindow)
		for i, c := range cpus() {
			if c-c0[i] > time.Second/userHZ {
				continue next
			}
		}
		for _, m := range procs {
			ms, err := m.scrape(ctx)
			if err != nil {
				t.Fatalf("scale: %v", errors.Join(err, m.alive()))
			}
			m.notePeak(memoryOf(ms))
			if done, ok := syncsDone(ms); ok && done < ms.Sum(metricSyncs) {
				continue next
			}
		}
		return true
	}
	return false
}
