package scale

// What make scale-ic prints beside its run, on request (BenchmarkScaleInterconnect's
// -scale.ic-alone and -scale.ic-centralized): each sampled zone measured alone, and
// the centralized master at the same size.
//
// On a machine of few cores every process shares them: the three real zone
// controllers handle every pod, node and EgressIP event at the same moment (each
// watches them all), beside the cluster manager, the API server and the harness.
// Alone, a sampled zone is the only real one of a run of the same phases; the
// other two are simulated like the rest (their snat-ready published by the
// harness at once). Its figures are then what it costs on its own, and bound what
// zones on their own nodes would show.

import (
	"fmt"
	"strings"
	"time"

	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// ICAlone is the phases run once per sampled zone, each time with only that zone real.
type ICAlone struct {
	// Runs, in sample order (sampleLost, sampleTaker, samplePods).
	Runs []ICResult
}

// alone is the zone's phase of a run in which it was the only real zone.
func (a ICAlone) alone(idx int, phase string) (ICPhase, ZonePhase) {
	for _, r := range a.Runs {
		if len(r.Sample) == 1 && r.Sample[0] == cluster.NodeName(idx) {
			p := r.Phase(phase)
			if len(p.Zones) == 1 {
				return p, p.Zones[0]
			}
		}
	}
	return ICPhase{}, ZonePhase{}
}

// ICBound is what the zones measured alone imply for zones on their own nodes.
type ICBound struct {
	// NodeLoss: the last zone converged, max(Lost, Taker + PodsOwn, Pods). The pods
	// zone reroutes to the taker's moved IPs once the taker lists them SNAT-ready;
	// alone, it waited for simulated holders instead, so its own share is its
	// convergence minus the harness' last snat-ready write before it (PodsOwn).
	NodeLoss, Lost, Taker, Pods, PodsOwn time.Duration
	// PodAddP50, PodAddP99: the pods zone alone.
	PodAddP50, PodAddP99 time.Duration
	// HeapMiB: the largest heap in use of a zone controller alone (after or during a phase).
	HeapMiB float64
	// CMStatus: the cluster manager's first -> last status change in node-loss,
	// the largest of the runs.
	CMStatus time.Duration
}

// Bound computes ICBound.
func (a ICAlone) Bound() ICBound {
	var b ICBound
	_, lost := a.alone(sampleLost, "node-loss")
	_, taker := a.alone(sampleTaker, "node-loss")
	podsLoss, pods := a.alone(samplePods, "node-loss")
	b.Lost, b.Taker, b.Pods = lost.Converged, taker.Converged, pods.Converged
	b.PodsOwn = max(0, pods.Converged-podsLoss.SimPublished)
	b.NodeLoss = max(b.Lost, b.Taker+b.PodsOwn, b.Pods)
	if add, _ := a.alone(samplePods, "pod-add"); len(add.PodAdd) > 0 {
		b.PodAddP50, b.PodAddP99 = pct(add.PodAdd, 50), pct(add.PodAdd, 99)
	}
	for _, r := range a.Runs {
		for _, p := range r.Phases {
			for _, z := range p.Zones {
				b.HeapMiB = max(b.HeapMiB, z.Mem.HeapInuse/mib, z.Peak.HeapInuse/mib)
			}
		}
		loss := r.Phase("node-loss")
		b.CMStatus = max(b.CMStatus, loss.StatusLast-loss.StatusFirst)
	}
	return b
}

// String renders, per sampled zone, its figures alone (one line per phase), then the bound.
func (a ICAlone) String() string {
	var b strings.Builder
	b.WriteString("SCALE-IC alone: each sampled zone from a run of the same phases in which it was the only real zone (the other two simulated like the rest)\n")
	fmt.Fprintf(&b, "%-10s %-8s %12s %8s %8s %10s %10s %s\n", "phase", "zone", "converged", "NB txns", "largest", "heap MiB", "peak MiB", "cm first -> last status change")
	r100 := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	for _, idx := range []int{sampleLost, sampleTaker, samplePods} {
		for _, name := range []string{"assign", "node-loss", "pod-add", "pod-churn", "no-op"} {
			p, z := a.alone(idx, name)
			if p.Name == "" {
				continue
			}
			conv := "-"
			switch {
			case name == "pod-add" && len(p.PodAdd) > 0:
				conv = fmt.Sprintf("p50 %v p99 %v", pct(p.PodAdd, 50), pct(p.PodAdd, 99))
			case name == "pod-add" || name == "no-op":
			case z.NoChange:
				conv = "no change"
			default:
				conv = r100(z.Converged)
			}
			cm := "-"
			if p.StatusLast > 0 {
				cm = r100(p.StatusLast - p.StatusFirst)
			}
			fmt.Fprintf(&b, "%-10s %-8s %12s %8v %8d %10.1f %10.1f %s\n", name, z.Node, conv, z.NBTransactions, z.LargestTxn,
				z.Mem.HeapInuse/mib, z.Peak.HeapInuse/mib, cm)
		}
	}
	bd := a.Bound()
	fmt.Fprintf(&b, "SCALE-IC alone bound for zones on their own nodes: node-loss last zone converged <= %v = max(holder lost %v, taker %v + the pods zone's own %v, pods zone %v) (target %v); pod-add in its zone p50 %v, p99 %v (target %v); zone controller heap <= %.1f MiB (target %d MiB at 20,000 pods); cluster manager first -> last status change %v (target %v)\n",
		r100(bd.NodeLoss), r100(bd.Lost), r100(bd.Taker), r100(bd.PodsOwn), r100(bd.Pods), targetNodeLoss, bd.PodAddP50, bd.PodAddP99, targetPodAddP99,
		bd.HeapMiB, targetZoneHeap, r100(bd.CMStatus), targetCMStatus)
	b.WriteString("(the pods zone's own: its convergence alone minus the harness' last snat-ready write for the simulated holders before it)\n")
	return b.String()
}

// centralizedLine compares the interconnect run with the centralized master's run at the same size.
func centralizedLine(ic ICResult, c Result) string {
	loss, add := ic.Phase("node-loss"), ic.Phase("pod-add")
	closs, cadd := c.Phase("node-loss"), c.Phase("pod-add")
	return fmt.Sprintf("SCALE-IC vs centralized (make scale's master, one NB, the same sizes, run after): node-loss last zone converged %v vs %v; pod-add p50 %v vs %v, p99 %v vs %v (%d vs %d pods); cluster manager heap peak %.1f MiB vs master %.1f MiB\n",
		loss.EndToEnd.Round(100*time.Microsecond), closs.Converged.Round(100*time.Microsecond), pct(add.PodAdd, 50), pct(cadd.PodAdd, 50),
		pct(add.PodAdd, 99), pct(cadd.PodAdd, 99), len(add.PodAdd), len(cadd.PodAdd), ic.CMPeak.HeapInuse/mib, c.MasterPeak.HeapInuse/mib)
}
