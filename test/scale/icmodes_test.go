package scale

import (
	"strings"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// TestICAloneBound: the bound of node-loss chains the taker alone and the pods
// zone's own share (its convergence alone minus the simulated holders' last
// snat-ready write); pod-add comes from the pods zone's run, heap is the largest.
func TestICAloneBound(t *testing.T) {
	ms := time.Millisecond
	run := func(idx int, loss ICPhase, heap float64, add []time.Duration) ICResult {
		z := ZonePhase{Node: cluster.NodeName(idx), Mem: memory{HeapInuse: heap * mib}, Peak: memory{HeapInuse: heap * mib / 2}}
		loss.Name = "node-loss"
		loss.Zones = []ZonePhase{z}
		loss.Zones[0].Converged = loss.EndToEnd
		return ICResult{Sample: []string{z.Node}, Phases: []ICPhase{loss, {Name: "pod-add", PodAdd: add, Zones: []ZonePhase{z}}}}
	}
	a := ICAlone{Runs: []ICResult{
		run(sampleLost, ICPhase{EndToEnd: 400 * ms, StatusFirst: 10 * ms, StatusLast: 60 * ms}, 30, nil),
		run(sampleTaker, ICPhase{EndToEnd: 250 * ms, StatusFirst: 10 * ms, StatusLast: 90 * ms}, 50, nil),
		run(samplePods, ICPhase{EndToEnd: 200 * ms, SimPublished: 120 * ms}, 40, []time.Duration{2 * ms, 3 * ms, 9 * ms}),
	}}
	b := a.Bound()
	if b.Lost != 400*ms || b.Taker != 250*ms || b.Pods != 200*ms || b.PodsOwn != 80*ms || b.NodeLoss != 400*ms {
		t.Errorf("node-loss bound: %+v; want lost 400ms, taker 250ms, pods 200ms, its own 80ms, bound 400ms", b)
	}
	a.Runs[0].Phases[0].Zones[0].Converged = 100 * ms
	if b := a.Bound(); b.NodeLoss != 330*ms {
		t.Errorf("node-loss bound %v, want taker 250ms + the pods zone's own 80ms", b.NodeLoss)
	}
	if b.PodAddP50 != 3*ms || b.PodAddP99 != 9*ms || b.HeapMiB != 50 || b.CMStatus != 80*ms {
		t.Errorf("bound: pod-add %v/%v, heap %v MiB, cm %v; want 3ms/9ms, 50, 80ms", b.PodAddP50, b.PodAddP99, b.HeapMiB, b.CMStatus)
	}
	if s := a.String(); !strings.Contains(s, "node-loss last zone converged <= 330ms") {
		t.Errorf("String:\n%s", s)
	}
}
