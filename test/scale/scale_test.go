package scale

import (
	"flag"
	"testing"
)

var (
	benchNodes      = flag.Int("scale.nodes", 100, "BenchmarkScale: simulated nodes")
	benchNamespaces = flag.Int("scale.namespaces", 100, "BenchmarkScale: namespaces, one EgressIP each")
	benchPods       = flag.Int("scale.pods-per-namespace", 50, "BenchmarkScale: pods per namespace")
	benchWriters    = flag.Int("scale.status-writers", 0, "BenchmarkScale: the master's concurrent status updates (0 = its default)")
)

// TestScaleSmall runs every phase at a small size (in CI): 20 nodes, 20 EgressIPs
// with 2 egress IPs each, 200 pods; 2 nodes lost, 20 pods replaced. It asserts
// behaviour, not speed: each phase converges (checked against status, see
// converged), egress IPs move only off the lost nodes, and the idle resync writes
// nothing to NB or to status.
func TestScaleSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and ovsdb-server")
	}
	res := Run(t, Config{Nodes: 20, Namespaces: 20, PodsPerNamespace: 10, IPsPerEgressIP: 2, LostNodes: 2, ChurnPods: 20})
	t.Log("\n" + res.String())
	if len(res.Phases) != 4 {
		t.Fatalf("phases: %+v", res.Phases)
	}
	assign, loss, churn, idle := res.Phases[0], res.Phases[1], res.Phases[2], res.Phases[3]
	if assign.NBTransactions < 1 || assign.StatusUpdates < float64(res.EgressIPs) {
		t.Errorf("assign: %v NB transactions, %v status updates; want >= 1 and >= %d", assign.NBTransactions, assign.StatusUpdates, res.EgressIPs)
	}
	if loss.Moved == 0 || loss.NBTransactions < 1 {
		t.Errorf("node-loss: %d egress IPs moved with %v NB transactions; want some of each", loss.Moved, loss.NBTransactions)
	}
	if churn.Moved != 0 || churn.NBTransactions < 1 {
		t.Errorf("pod-churn: %d egress IPs moved (want 0), %v NB transactions (want >= 1)", churn.Moved, churn.NBTransactions)
	}
	if idle.NBTransactions != 0 || idle.StatusUpdates != 0 || idle.Syncs < 1 {
		t.Errorf("idle: %v NB transactions and %v status updates over %v syncs; want 0, 0 and >= 1 sync",
			idle.NBTransactions, idle.StatusUpdates, idle.Syncs)
	}
}

// BenchmarkScale prints the convergence time of each phase, the master's NB
// transactions and status updates, and the heap in use, at the size given by the
// -scale.* flags (default 100 nodes, 100 EgressIPs with 2 egress IPs each, 5000
// pods; 10 nodes lost, 500 pods replaced). Targets (not asserted): every phase
// converges in under 5 s; idle writes nothing.
//
//	go test ./test/scale/ -run '^$' -bench Scale -benchtime 1x
func BenchmarkScale(b *testing.B) {
	for i := 0; i < b.N; i++ {
		pods := *benchNamespaces * *benchPods
		res := Run(b, Config{Nodes: *benchNodes, Namespaces: *benchNamespaces, PodsPerNamespace: *benchPods,
			IPsPerEgressIP: 2, LostNodes: max(1, *benchNodes/10), ChurnPods: pods / 10,
			StatusWriters: *benchWriters})
		b.Log("\n" + res.String())
		for _, p := range res.Phases {
			b.ReportMetric(p.Converged.Seconds(), p.Name+"-s")
			b.ReportMetric(p.NBTransactions, p.Name+"-nb-txns")
		}
		b.ReportMetric(float64(res.HeapInUse)/(1<<20), "heap-MiB")
	}
}
