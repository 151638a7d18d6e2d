package scale

import (
	"flag"
	"fmt"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

var (
	benchICAddPods = flag.Int("scale.ic-add-pods", 50, "BenchmarkScaleInterconnect: pods added one at a time on the pods-only sampled zone's node (its subnet holds 251 pods)")
	benchICAlone   = flag.Bool("scale.ic-alone", false, "BenchmarkScaleInterconnect: then run the phases once per sampled zone, that zone the only real one, and print each zone's figures alone and the bound they imply (three more runs)")
	benchICCentral = flag.Bool("scale.ic-centralized", false, "BenchmarkScaleInterconnect: then run make scale's centralized master at the same sizes (no floor) and print its figures beside (one more run)")
)

// TestScaleInterconnectSmall runs every interconnect phase at a small size (in
// CI): 12 nodes (3 real zones), 12 EgressIPs with 2 egress IPs each, 120 pods; 2
// nodes lost, 5 pods added, 12 replaced. It asserts behaviour, not speed: every
// sampled zone converges in every phase (its NB equal to the rows
// master.PlannedRows plans for its zone), the lost sampled holder's IPs move and the taker gets some, every added
// pod is measured, and the no-op node update writes nothing: no NB transaction in
// any zone, no status update.
func TestScaleInterconnectSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver, 3 ovsdb-servers, the cluster manager and 3 zone controllers")
	}
	res := RunInterconnect(t, Config{Nodes: 12, Namespaces: 12, PodsPerNamespace: 10, IPsPerEgressIP: 2,
		AddPods: 5, LostNodes: 2, ChurnPods: 12, Ovnkube: *benchOvnkube})
	t.Log("\n" + res.String())
	checkPhases(t, res.Phases, []string{"assign", "node-loss", "pod-add", "pod-churn", "no-op"}, func(p ICPhase) (string, string, bool) {
		return p.Name, fmt.Sprintf("%d zones", len(p.Zones)), len(p.Zones) == 3
	}, "3 zones")
	assign, loss, add, churn, noop := res.Phases[0], res.Phases[1], res.Phases[2], res.Phases[3], res.Phases[4]
	if assign.StatusUpdates < float64(res.EgressIPs) {
		t.Errorf("assign: %v status updates, want >= %d", assign.StatusUpdates, res.EgressIPs)
	}
	for _, z := range assign.Zones {
		// Every zone has pods: its reroutes at least.
		if z.NBTransactions < 1 || z.Rows == 0 || z.LargestTxn == 0 {
			t.Errorf("assign: zone %s: %v NB transactions, %d rows, largest transaction %d rows; want some", z.Node, z.NBTransactions, z.Rows, z.LargestTxn)
		}
	}
	if loss.Moved == 0 || loss.StatusUpdates < 1 || loss.StatusLast <= 0 {
		t.Errorf("node-loss: %d moved, %v status updates, last status change seen after %v; want some", loss.Moved, loss.StatusUpdates, loss.StatusLast)
	}
	for _, z := range loss.Zones {
		if z.Node != cluster.NodeName(samplePods) && z.NBTransactions < 1 {
			t.Errorf("node-loss: zone %s (holder lost / taker): no NB transaction", z.Node)
		}
	}
	if taker := loss.Zones[1]; taker.Node != cluster.NodeName(sampleTaker) || taker.Rows <= assign.Zones[1].Rows {
		t.Errorf("node-loss: the taker %s has %d rows (%d after assign): it was given no IP", taker.Node, taker.Rows, assign.Zones[1].Rows)
	}
	if len(add.PodAdd) != 5 || add.StatusUpdates != 0 || add.Zones[2].NBTransactions < 5 {
		t.Errorf("pod-add: %d pods measured, %v status updates, %v NB transactions in the pods' zone; want 5, 0, >= 5",
			len(add.PodAdd), add.StatusUpdates, add.Zones[2].NBTransactions)
	}
	if churn.Moved != 0 || churn.StatusUpdates != 0 {
		t.Errorf("pod-churn: %d moved, %v status updates; want 0, 0", churn.Moved, churn.StatusUpdates)
	}
	if noop.StatusUpdates != 0 {
		t.Errorf("no-op: %v status updates, want 0", noop.StatusUpdates)
	}
	for _, z := range noop.Zones {
		if z.NBTransactions != 0 || z.Txns != 0 {
			t.Errorf("no-op: zone %s: %v NB transactions (its metric), %d in its NB file; want 0", z.Node, z.NBTransactions, z.Txns)
		}
		if z.Mem.HeapInuse <= 0 {
			t.Errorf("zone %s: heap from its metrics: %v", z.Node, z.Mem)
		}
	}
}

// BenchmarkScaleInterconnect prints, at the size of the -scale.* flags (default
// 100 nodes, 100 EgressIPs with 2 egress IPs each, 5,000 pods; 10 nodes lost,
// -scale.ic-add-pods=50 pods added one at a time on the pods-only zone's node, 500
// pods replaced), per phase and sampled zone: time to converge, NB transactions,
// rows, largest transaction and the zone controller's heap; end to end; the
// cluster manager's status writes. Targets are printed beside; nothing is asserted
// on time.
//
//	make scale-ic                                                                    (5,000 pods)
//	make scale-ic SCALE_FLAGS='-scale.namespaces=200 -scale.pods-per-namespace=100'  (20,000 pods)
//
// -scale.ic-alone adds three runs, each with one real sampled zone, and prints
// their figures and the bound they imply for zones on their own nodes;
// -scale.ic-centralized adds a run of the centralized master (make scale) at the
// same sizes and prints it beside.
func BenchmarkScaleInterconnect(b *testing.B) {
	cfg := benchConfig()
	cfg.AddPods = *benchICAddPods
	// Each run is a sub-benchmark: its environment (API server, NB servers,
	// processes) stops before the next run starts.
	var res ICResult
	b.Run("zones", func(b *testing.B) {
		res = RunInterconnect(b, cfg)
		// Printed, not logged: go test cuts a benchmark's log after a few lines.
		fmt.Print(res.String())
		reportIC(b, res)
	})
	if *benchICAlone {
		var alone ICAlone
		for _, idx := range []int{sampleLost, sampleTaker, samplePods} {
			b.Run("alone-"+cluster.NodeName(idx), func(b *testing.B) {
				c := cfg
				c.RealZones = []int{idx}
				alone.Runs = append(alone.Runs, RunInterconnect(b, c))
			})
		}
		fmt.Print(alone.String())
	}
	if *benchICCentral {
		b.Run("centralized", func(b *testing.B) {
			c := cfg
			c.FloorRuns = -1
			cres := Run(b, c)
			fmt.Print("SCALE-IC centralized: make scale's master (one NB for every node) on the same sizes, its own run after this one\n" + cres.String())
			fmt.Print(centralizedLine(res, cres))
		})
	}
}

// reportIC reports the run's figures as benchmark metrics.
func reportIC(b *testing.B, res ICResult) {
	for _, p := range res.Phases {
		if p.Name != "no-op" && p.Name != "pod-add" {
			b.ReportMetric(p.EndToEnd.Seconds()*1000, p.Name+"-e2e-ms")
		}
	}
	loss := res.Phase("node-loss")
	b.ReportMetric((loss.StatusLast-loss.StatusFirst).Seconds()*1000, "node-loss-cm-status-ms")
	if add := res.Phase("pod-add"); len(add.PodAdd) > 0 {
		b.ReportMetric(pct(add.PodAdd, 50).Seconds()*1000, "pod-add-p50-ms")
		b.ReportMetric(pct(add.PodAdd, 99).Seconds()*1000, "pod-add-p99-ms")
	}
	var heap float64
	for _, p := range res.Phases {
		for _, z := range p.Zones {
			heap = max(heap, z.Peak.HeapInuse, z.Mem.HeapInuse)
		}
	}
	b.ReportMetric(heap/mib, "zone-peak-heap-inuse-MiB")
	b.ReportMetric(res.CMPeak.HeapInuse/mib, "cm-peak-heap-inuse-MiB")
}
