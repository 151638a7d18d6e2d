package master

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"
	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// BenchmarkProgramEgressIP programs one EgressIP over N pods into a real NB
// ovsdb-server and, in the same run and database, commits the same rows in one raw
// libovsdb transaction. It reports both times, their ratio (target <= 2) and the
// NB transactions per reconcile.
//
// "controller" is the duration of the sync that handled the new EgressIP (status
// write to the fake apiserver, selection, desired rows, diff, one transaction,
// its own cache update), measured by the master's sync hooks; "raw" builds the
// insert and router mutate operations of the same rows with a libovsdb client that
// monitors nothing and commits them; "raw-cached" does the same from a client
// that monitors the tables (its Transact, like the master's, returns only after
// its cache took in the new rows). Both run against the same server; the raw
// commit runs while the master is stopped, so it is the floor (the master's own
// client must also receive and cache the rows it wrote before the reply is read).
//
//	go test -run '^$' -bench ProgramEgressIP -benchtime 3x ./go-controller/pkg/master/
func BenchmarkProgramEgressIP(b *testing.B) {
	for _, pods := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) { benchProgram(b, pods) })
	}
}

func benchProgram(b *testing.B, pods int) {
	e := newEnv(b, nbserver.Start, gwmode.Shared)
	// No monitoring client of the test in this process during the measurements:
	// only the master's (as in production) competes for the CPU.
	e.nbc.Close()
	e.nbc = e.nb.Conn(b)
	e.create(node(1, true))
	e.create(node(2, true))
	e.create(namespace("prod", prodNS))
	for i := 0; i < pods; i++ {
		e.create(pod("prod", fmt.Sprintf("p%05d", i), benchPodIP(i).String(), web))
	}

	var controller, raw, rawCached, steady, move time.Duration
	var txns, reconciles float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Raw: the same rows, one hand-built transaction, while the master is
		// stopped; then removed again.
		runtime.GC()
		raw += rawCommit(b, e, e.nbc, pods)
		cleanRaw(b, e, pods)
		// The same with a client that caches the tables (as the master's must):
		// its Transact returns once its cache holds the new rows.
		cached := e.nb.Client(b)
		runtime.GC()
		rawCached += rawCommit(b, e, cached, pods)
		cached.Close()
		cleanRaw(b, e, pods)

		// Controller: a new EgressIP serving all pods.
		e.start()
		runtime.GC()
		created := time.Now()
		e.create(egressIP("bench", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectMetric(1, metricNBTransactions)
		e.settle()
		syncs := e.syncsSince(created)
		var first time.Duration
		for _, s := range syncs {
			if s.err != nil {
				b.Fatalf("sync failed: %v", s.err)
			}
			if first == 0 {
				first = s.end.Sub(s.start)
			}
		}
		controller += first
		txns += e.metric(metricNBTransactions)
		reconciles += float64(len(syncs))
		view := e.nb.Client(b)
		if got := countReroutes(b, view); got != pods {
			b.Fatalf("controller: %d reroutes, want %d", got, pods)
		}
		view.Close()

		// A sync with nothing to change (a node label nobody selects on).
		mark, done := time.Now(), e.syncs.Load()
		e.updateNode("node2", func(n *corev1.Node) { n.Labels["bench"] = fmt.Sprint(i) })
		e.waitSyncs(done + 1)
		steady += firstSync(b, e.syncsSince(mark))

		// Failover: the holder loses its label; the IP, its SNAT rows and every
		// reroute next hop move to node2 in one transaction.
		mark = time.Now()
		e.updateNode("node1", unlabelAssignable)
		e.expectMetric(2, metricNBTransactions)
		e.settle()
		move += firstSync(b, e.syncsSince(mark))
		e.updateNode("node1", labelAssignable)

		e.deleteEgressIP("bench")
		e.expectMetric(3, metricNBTransactions)
		e.settle()
		e.stop()
	}
	b.StopTimer()
	n := float64(b.N)
	cms := float64(controller.Microseconds()) / 1000 / n
	rms := float64(raw.Microseconds()) / 1000 / n
	rcms := float64(rawCached.Microseconds()) / 1000 / n
	b.ReportMetric(cms, "controller-ms")
	b.ReportMetric(rms, "raw-ms")
	b.ReportMetric(rcms, "raw-cached-ms")
	b.ReportMetric(cms/rms, "ratio")
	b.ReportMetric(cms/rcms, "ratio-cached")
	b.ReportMetric(txns/reconciles, "txns/reconcile")
	sms := float64(steady.Microseconds()) / 1000 / n
	mms := float64(move.Microseconds()) / 1000 / n
	b.ReportMetric(sms, "noop-sync-ms")
	b.ReportMetric(mms, "move-sync-ms")
	fmt.Printf("pods=%d: controller %.1f ms, raw transaction %.1f ms, ratio %.2f (target <= 2); raw transaction from a caching client %.1f ms, ratio %.2f; "+
		"%.0f NB transaction(s) in %.0f reconcile(s) after the EgressIP was created (%.2f per reconcile); no-op sync %.1f ms; move to another node %.1f ms\n",
		pods, cms, rms, cms/rms, rcms, cms/rcms, txns, reconciles, txns/reconciles, sms, mms)
}

// firstSync returns the duration of the first of syncs, failing on any error.
func firstSync(b *testing.B, syncs []syncRecord) time.Duration {
	if len(syncs) == 0 {
		b.Fatal("no sync")
	}
	for _, s := range syncs {
		if s.err != nil {
			b.Fatalf("sync failed: %v", s.err)
		}
	}
	return syncs[0].end.Sub(syncs[0].start)
}

func countReroutes(b *testing.B, c client.Client) int {
	cur, err := nbstate.ReadCurrent(context.Background(), c)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for k := range cur.Rows.Policies {
		if k.IDs.Rule == nbstate.RuleReroute {
			n++
		}
	}
	return n
}

// cleanRaw checks that a raw commit wrote every reroute, and removes its rows.
func cleanRaw(b *testing.B, e *env, pods int) {
	view := e.nb.Client(b)
	defer view.Close()
	if got := countReroutes(b, view); got != pods {
		b.Fatalf("raw commit: %d reroutes, want %d", got, pods)
	}
	if _, err := nbstate.Apply(context.Background(), view, nbstate.NewState()); err != nil {
		b.Fatal(err)
	}
}

func benchPodIP(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, 244, byte(1 + i/250), byte(2 + i%250)})
}

// rawCommit writes the rows the master would write for the bench EgressIP in one
// transaction built directly with the libovsdb client, and returns how long it
// took from the first operation built to the commit.
func rawCommit(b *testing.B, e *env, c client.Client, pods int) time.Duration {
	in := nbstate.Input{
		Mode:           gwmode.Shared,
		ClusterSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		JoinSubnets:    []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")},
		Nodes: map[string]nbstate.Node{"node1": {Name: "node1", JoinIPs: []netip.Addr{netip.MustParseAddr("100.64.0.2")},
			Addresses: []netip.Addr{netip.MustParseAddr("172.18.0.11")}}},
	}
	eip := egressIP("bench", 0, []string{"172.18.0.33"}, prodNS, nil)
	eip.Status.Items = items("172.18.0.33", "node1")
	cache := objectCache{pods: map[string]*corev1.Pod{}, namespaces: map[string]*corev1.Namespace{"prod": namespace("prod", prodNS)}}
	for i := 0; i < pods; i++ {
		p := pod("prod", fmt.Sprintf("p%05d", i), benchPodIP(i).String(), nil)
		cache.pods[podKey(p.Namespace, p.Name)] = p
	}
	st, _, err := planAll(in, []*egressipv1.EgressIP{eip}, cache) // the rows the master writes
	if err != nil {
		b.Fatal(err)
	}
	view := e.nb.Client(b)
	cur, err := nbstate.ReadCurrent(context.Background(), view)
	if err != nil {
		b.Fatal(err)
	}
	view.Close()
	routers := cur.Routers

	start := time.Now()
	var ops []ovsdb.Operation
	var policies []string
	natsByRouter := map[string][]string{}
	n := 0
	named := func() string { n++; return fmt.Sprintf("raw%d", n) }
	for _, p := range st.Policies {
		cp := *p
		cp.UUID = named()
		policies = append(policies, cp.UUID)
		o, err := c.Create(&cp)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, o...)
	}
	for k, nat := range st.NATs {
		cp := *nat
		cp.UUID = named()
		natsByRouter[k.Router] = append(natsByRouter[k.Router], cp.UUID)
		o, err := c.Create(&cp)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, o...)
	}
	for _, as := range st.AddressSets {
		cp := *as
		o, err := c.Create(&cp)
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, o...)
	}
	cr := &nbdb.LogicalRouter{UUID: routers[nbstate.ClusterRouter]}
	o, err := c.Where(cr).Mutate(cr, model.Mutation{Field: &cr.Policies, Mutator: ovsdb.MutateOperationInsert, Value: policies})
	if err != nil {
		b.Fatal(err)
	}
	ops = append(ops, o...)
	for name, uuids := range natsByRouter {
		gr := &nbdb.LogicalRouter{UUID: routers[name]}
		o, err := c.Where(gr).Mutate(gr, model.Mutation{Field: &gr.Nat, Mutator: ovsdb.MutateOperationInsert, Value: uuids})
		if err != nil {
			b.Fatal(err)
		}
		ops = append(ops, o...)
	}
	res, err := c.Transact(context.Background(), ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		b.Fatalf("raw transaction: %v", err)
	}
	return time.Since(start)
}

// BenchmarkPodAdd measures the master at cluster scale with fake API clients and
// a real NB: the full start-up sync of 20,000 pods served by 50 EgressIPs, a
// no-op sync, and pods added one at a time into the converged cluster, from the
// pod's creation to the end of the sync that wrote its rows (p50, p99).
//
//	go test -run '^$' -bench PodAdd -benchtime 1x ./go-controller/pkg/master/
func BenchmarkPodAdd(b *testing.B) {
	for _, pods := range []int{5000, 20000} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) { benchPodAdd(b, pods) })
	}
}

func benchPodAdd(b *testing.B, pods int) {
	const eips, nodes, adds = 50, 10, 200 // fake watchers hold at most 100 pending events: 50 status updates at once
	e := newEnv(b, nbserver.Start, gwmode.Shared)
	e.nbc.Close()
	e.nbc = e.nb.Conn(b)
	var routers []model.Model
	for i := 4; i <= nodes; i++ { // the env has GR_node1..3
		routers = append(routers, &nbdb.LogicalRouter{Name: nbstate.GatewayRouter(fmt.Sprintf("node%d", i))})
	}
	ops, err := e.nbc.Create(routers...)
	if err != nil {
		b.Fatal(err)
	}
	e.transact(ops...)
	for i := 1; i <= nodes; i++ {
		e.create(node(i, true))
	}
	for i := 0; i < eips; i++ {
		ns := fmt.Sprintf("ns%03d", i)
		e.create(namespace(ns, map[string]string{"eip": ns}))
		e.create(egressIP(ns, i, []string{fmt.Sprintf("172.18.%d.%d", 1+i/100, 2*(i%100)+1), fmt.Sprintf("172.18.%d.%d", 1+i/100, 2*(i%100)+2)},
			map[string]string{"eip": ns}, nil))
	}
	for i := 0; i < pods; i++ {
		e.create(pod(fmt.Sprintf("ns%03d", i%eips), fmt.Sprintf("p%05d", i), benchPodIP(i).String(), web))
	}
	for i := 0; i < b.N; i++ {
		mark := time.Now()
		e.start()
		e.eventually("converged", func() error {
			if n := e.metric(metricStatusUpdateTotal); n < eips {
				return fmt.Errorf("%v status updates", n)
			}
			return nil
		})
		e.settle()
		var full time.Duration
		for _, s := range e.syncsSince(mark) {
			full += s.end.Sub(s.start)
		}

		mark, done := time.Now(), e.syncs.Load()
		e.updateNode("node2", func(n *corev1.Node) { n.Labels["bench"] = fmt.Sprint(i) })
		e.waitSyncs(done + 1)
		noop := firstSync(b, e.syncsSince(mark))

		var lat []time.Duration
		if path := os.Getenv("PODADD_CPUPROFILE"); path != "" { // the pod-add phase alone
			f, err := os.Create(path)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			defer f.Close()
		}
		for j := 0; j < adds; j++ {
			k := pods + i*adds + j
			done := e.syncs.Load()
			before := e.metric(metricNBTransactions)
			created := time.Now()
			e.create(pod(fmt.Sprintf("ns%03d", k%eips), fmt.Sprintf("p%05d", k), benchPodIP(k).String(), web))
			e.eventually("pod programmed", func() error {
				if e.metric(metricNBTransactions) <= before {
					return fmt.Errorf("no NB transaction yet")
				}
				return nil
			})
			e.waitSyncs(done + 1)
			var end time.Time
			for _, s := range e.syncsSince(created) {
				end = s.end
			}
			lat = append(lat, end.Sub(created))
		}
		pprof.StopCPUProfile()
		slices.Sort(lat)
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		fmt.Printf("pods=%d eips=%d: start-up (full) syncs %.1f ms in all; no-op sync %.2f ms; pod added -> its rows committed: p50 %.2f ms, p99 %.2f ms (%d pods)\n",
			pods, eips, float64(full.Microseconds())/1000, float64(noop.Microseconds())/1000,
			float64(p50.Microseconds())/1000, float64(p99.Microseconds())/1000, adds)
		b.ReportMetric(float64(noop.Microseconds())/1000, "noop-ms")
		b.ReportMetric(float64(p50.Microseconds())/1000, "podadd-p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "podadd-p99-ms")
		e.stop()
	}
}
