package chaos

// The served pods' probes of the external host and the resource samples.

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// probeStat counts probe results.
type probeStat struct {
	ok, insideWindow, outsideWindow, failedInside, failedOutside int
	outside                                                      []string // details of unexpected sources outside the window
	// foreignInside and foreignOutside count probes whose source is not the pod's own (own.go), inside and outside
	// windows; holderGRInside those inside a window whose source is only the documented moment of whyHolderGR.
	foreignInside, foreignOutside, holderGRInside int
	foreign                                       []string // details of the foreign (and holder GR) sources
}

type probeResult struct {
	pod        string
	start, end time.Time
	src        netip.Addr
	err        error
	// inWindow and gen: whether a window was open when the probe started, and the count of windows opened by then.
	inWindow bool
	gen      int
}

type podProbe struct {
	stop chan struct{}
	done chan struct{}
}

func (h *harness) startProbe(key string) {
	p := &podProbe{stop: make(chan struct{}), done: make(chan struct{})}
	h.mu.Lock()
	h.pods[key] = p
	h.mu.Unlock()
	ns, name, _ := strings.Cut(key, "/")
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			h.mu.Lock()
			inWindow, gen := h.window, h.windows
			h.mu.Unlock()
			start := time.Now()
			src, err := h.c.Request(h.ctx, ns, name, "tcp", 2*time.Second)
			h.record(probeResult{pod: key, start: start, end: time.Now(), src: src, err: err, inWindow: inWindow, gen: gen})
		}
	}()
}

// record counts a probe. A probe that started and ended outside a window, with no window opened meanwhile (the
// cluster seen converged, no change or fault since), must leave with the expected source, its own one (own.go) in
// the converged state; its source is also what explain's answer after the check is compared with.
func (h *harness) record(r probeResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.inWindow || h.window || r.gen != h.windows || h.expected == nil {
		h.pending = append(h.pending, r)
		return
	}
	if r.err == nil {
		if f := h.ownNow.judge(r.pod, r.src); f != "" {
			if f == whyHolderGR { // only a window may hold the documented moment
				f = fmt.Sprintf("source %s is %s", r.src, whyHolderGR)
			}
			h.probes.foreignOutside++
			h.probes.foreign = append(h.probes.foreign, fmt.Sprintf("%s %s outside the window: %s",
				r.start.Format("15:04:05.000"), r.pod, f))
		}
		if h.explained != nil {
			if h.quietSeen[r.pod] == nil {
				h.quietSeen[r.pod] = map[netip.Addr]int{}
			}
			h.quietSeen[r.pod][r.src]++
		}
	}
	switch {
	case r.err != nil:
		h.probes.failedOutside++
		h.probes.outside = append(h.probes.outside, fmt.Sprintf("%s %s: %v", r.start.Format("15:04:05.000"), r.pod, r.err))
	case slices.Contains(h.expected[r.pod], r.src):
		h.probes.ok++
	default:
		h.probes.outsideWindow++
		h.probes.outside = append(h.probes.outside, fmt.Sprintf("%s %s: source %s, want one of %v",
			r.start.Format("15:04:05.000"), r.pod, r.src, h.expected[r.pod]))
	}
}

func (h *harness) stopProbe(key string) {
	h.mu.Lock()
	p := h.pods[key]
	delete(h.pods, key)
	h.mu.Unlock()
	if p != nil {
		close(p.stop)
		<-p.done
	}
}

func (h *harness) stopProbes() {
	h.mu.Lock()
	var keys []string
	for k := range h.pods {
		keys = append(keys, k)
	}
	h.mu.Unlock()
	for _, k := range keys {
		h.stopProbe(k)
	}
}

// sampleAll records memory and goroutines of every ovnkube process and the RSS of every cluster daemon.
func (h *harness) sampleAll() {
	for _, name := range h.sup.names() {
		h.sup.mu.Lock()
		p := h.sup.procs[name]
		h.sup.mu.Unlock()
		s := scrape(h.ctx, p)
		if s.rss < 0 {
			s.rss = rssOf(h.sup.pid(name))
		}
		h.samples["ovnkube "+name] = append(h.samples["ovnkube "+name], s)
	}
	for name, pid := range h.c.DaemonPids() {
		if name == "agent" || name == "echo" {
			continue
		}
		h.samples[name] = append(h.samples[name], sample{goroutines: -1, heapLive: -1, rss: rssOf(pid)})
	}
}
