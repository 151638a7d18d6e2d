package chaos

// The report at the end of a run.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

func (h *harness) report() {
	h.logf("== chaos results")
	var kinds []string
	for k := range h.faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		h.logf("fault %-24s injected %3d  longest re-convergence %5.1fs", k, h.faults[k], h.longest[k].Seconds())
	}
	var chs []string
	for k, n := range h.changeCount {
		chs = append(chs, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(chs)
	h.logf("changes: %s", strings.Join(chs, ", "))
	h.mu.Lock()
	p, ex := h.probes, h.explain
	h.mu.Unlock()
	h.logf("probes: %d as expected; unexpected source inside the window %d, outside the window %d; failed inside %d, outside %d",
		p.ok, p.insideWindow, p.outsideWindow, p.failedInside, p.failedOutside)
	h.logf("foreign sources (not the pod's own EgressIP's nor, where allowed, its node's): inside the window %d, outside %d; documented gateway router addresses inside the window (interconnect: a holder's, shared gateway; any, for the pods of a zone that could not program, local gateway) %d",
		p.foreignInside, p.foreignOutside, p.holderGRInside)
	for _, f := range p.foreign {
		h.logf("  %s", f)
	}
	h.logf("explain after each check vs the probes until the next change, per pod and check: agreeing %d, disagreeing %d, not compared (no probe arrived) %d",
		ex.agree, ex.disagree, ex.none)
	for _, d := range ex.details {
		h.logf("  %s", d)
	}
	h.logf("checks: %d, with stale/missing rows or wrong status: %d", h.checks, len(h.badCheck))
	if b, err := os.ReadFile(filepath.Join(h.sup.dir, "ovnkube-"+h.leader+".log")); err == nil {
		// The master's health check verdicts over every run of it (its log is appended to across restarts).
		h.logf("health check: nodes declared unreachable %d, held because no node answered (the master suspected itself) %d",
			strings.Count(string(b), "is unreachable (no health answer"), strings.Count(string(b), "the master suspects itself"))
	}
	// The userspace datapath of Debian bookworm's OVS 3.1 (the fallback when contrib/build-ovs.sh's OVS is not built)
	// sometimes aborts (a conntrack assertion) and its monitor restarts it: the data plane stops for about a second
	// (test/e2e reruns a failover case when it happens). Listed so that a failed probe can be matched with one.
	// (The interconnect layout has one more ovs-vswitchd per chassis: log/<node>-ovs-vswitchd.log.)
	logs, err := filepath.Glob(filepath.Join(h.c.StateDir(), "log", "*ovs-vswitchd.log"))
	if err != nil {
		h.logf("ovs-vswitchd logs: %v", err)
	}
	if len(logs) > 0 {
		var crashes []string
		for _, f := range logs {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, " died, killed ") {
					ts, _, _ := strings.Cut(l, "|")
					crashes = append(crashes, strings.TrimSuffix(filepath.Base(f), "ovs-vswitchd.log")+ts)
				}
			}
		}
		h.logf("ovs-vswitchd crashes (restarted by its monitor): %d %v", len(crashes), crashes)
	}
	if h.c.GatewayMode() == gwmode.Local {
		h.logf("host state: %d polls found a node's host not yet as it must be (first: %s)", h.hostPending, h.hostExample)
	}
	var names []string
	for n := range h.samples {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		ss := h.samples[n]
		h.logf("trend %-26s %s", n, trend(ss))
	}
	h.sup.mu.Lock()
	for _, n := range h.sup.names2() {
		pr := h.sup.procs[n]
		h.logf("process %-14s restarts %d", n, pr.restarts)
	}
	h.sup.mu.Unlock()
	for _, b := range h.badCheck {
		h.t.Errorf("check failed: %s", b)
	}
	if p.foreignInside > 0 || p.foreignOutside > 0 {
		h.t.Errorf("%d probes inside and %d outside the window left with a foreign source (listed above)", p.foreignInside, p.foreignOutside)
	}
	if ex.disagree > 0 {
		h.t.Errorf("explain disagreed with the probes for %d pods after a check (listed above)", ex.disagree)
	}
	if p.outsideWindow > 0 || p.failedOutside > 0 {
		h.t.Errorf("%d probes left with an unexpected source and %d failed outside the window: %v", p.outsideWindow,
			p.failedOutside, p.outside)
	}
}

func (s *supervisor) names2() []string {
	var out []string
	for n := range s.procs {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// trend prints first -> max -> last of RSS, live heap and goroutines over the samples.
func trend(ss []sample) string {
	pick := func(f func(sample) float64, scale float64, unit string) string {
		var vals []float64
		for _, s := range ss {
			if v := f(s); v >= 0 {
				vals = append(vals, v/scale)
			}
		}
		if len(vals) == 0 {
			return ""
		}
		return fmt.Sprintf("%s %.0f -> max %.0f -> %.0f%s  ", unit, vals[0], slices.Max(vals), vals[len(vals)-1], "")
	}
	return pick(func(s sample) float64 { return s.rss }, 1<<20, "RSS MiB") +
		pick(func(s sample) float64 { return s.heapLive }, 1<<20, "heap MiB") +
		pick(func(s sample) float64 { return s.goroutines }, 1, "goroutines")
}
