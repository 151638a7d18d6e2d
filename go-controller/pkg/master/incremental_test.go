package master

import (
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// TestIncrementalMatchesFull: after every step of a churn that exercises each way
// a sync narrows its work (pod and namespace events, EgressIP selector, priority
// and assignment changes, two pods sharing an IP, a pod leaving), the rows the
// incremental syncs left in NB are exactly those a full sync computes from
// scratch: a restarted master (whose start-up sync is full) writes nothing.
func TestIncrementalMatchesFull(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		has := func(pod, part string) func(map[string]string) bool {
			return func(rr map[string]string) bool { return strings.Contains(rr[pod], part) }
		}
		steps := []struct {
			name string
			do   func()
			// done tells, from the reroutes in NB, that the master has handled the step.
			done func(map[string]string) bool
		}{
			{"EgressIP created", func() {
				e.create(egressIP("eip-a", 1, []string{"172.18.0.33", "172.18.0.44"}, prodNS, web))
			}, has("prod/web2", "eip-a")},
			{"pod created", func() { e.create(pod("prod", "web4", "10.244.2.20", web)) }, has("prod/web4", "eip-a")},
			{"pod relabelled into the selection", func() {
				e.updatePod("prod", "db", func(p *corev1.Pod) { p.Labels = web })
			}, has("prod/db", "eip-a")},
			{"namespace relabelled into the selection", func() {
				e.updateNamespace("dev", func(ns *corev1.Namespace) { ns.Labels = prodNS })
			}, has("dev/web3", "eip-a")},
			{"an older EgressIP takes a pod", func() {
				e.create(egressIP("eip-b", 0, []string{"172.18.0.55"}, nil, map[string]string{"app": "web"}))
			}, has("prod/db", "eip-b")},
			{"a newer pod object given web1's IP (last by name): it owns the IP and has the rows", func() {
				p := pod("prod", "zzz", "10.244.1.5", web)
				p.CreationTimestamp = metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
				e.create(p)
			}, func(rr map[string]string) bool { return rr["prod/zzz"] != "" && rr["prod/web1"] == "" }},
			{"that pod deleted: web1 has the rows again", func() { e.deletePod("prod", "zzz") },
				func(rr map[string]string) bool { return rr["prod/zzz"] == "" && rr["prod/web1"] != "" }},
			{"pod selector of the older EgressIP narrowed", func() {
				e.updateEgressIP("eip-b", func(o *egressipv1.EgressIP) {
					o.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
				})
			}, has("prod/db", "eip-a")},
			{"holder unlabelled: IPs move", func() { e.updateNode("node1", unlabelAssignable) },
				func(rr map[string]string) bool {
					return rr["prod/web2"] != "" && !strings.Contains(rr["prod/web2"], "100.64.0.2")
				}},
			{"pod IP changed", func() {
				e.updatePod("prod", "web2", func(p *corev1.Pod) {
					p.Status.PodIP = "10.244.3.9"
					p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.3.9"}}
				})
			}, has("prod/web2", "10.244.3.9")},
			{"pod relabelled out of the selection", func() {
				e.updatePod("prod", "web4", func(p *corev1.Pod) { p.Labels = nil })
			}, func(rr map[string]string) bool { return rr["prod/web4"] == "" }},
			{"an EgressIP deleted", func() { e.deleteEgressIP("eip-b") },
				func(rr map[string]string) bool { return len(rr) > 0 && !strings.Contains(fmt.Sprint(rr), "eip-b") }},
		}
		for _, s := range steps {
			s.do()
			e.eventually(s.name, func() error {
				if rr := e.reroutes(); !s.done(rr) {
					return fmt.Errorf("reroutes %v", rr)
				}
				return nil
			})
			e.settle()
			rows := e.ours()
			e.stop()
			e.start()
			e.settle()
			if n := e.metric(metricNBTransactions); n != 0 {
				t.Fatalf("after %q: a full sync changed NB (%v transactions): rows were\n%v\nnow\n%v", s.name, n, rows, e.ours())
			}
			if got := e.ours(); !slices.Equal(got, rows) {
				t.Fatalf("after %q: rows changed by a full sync", s.name)
			}
		}
		if len(e.ours()) == 0 {
			t.Fatal("no rows at all: the steps did not program anything")
		}
	})
}

// TestLabelChangeDuringSync: a pod relabelled while a sync runs is served by the
// next one (its event is recorded for the sync after the one that was running).
func TestLabelChangeDuringSync(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := newEnv(t, start, gwmode.Shared)
		populateObjects(e)
		p := e.params()
		var armed atomic.Bool
		before := p.beforeSync
		p.beforeSync = func() {
			before()
			if armed.CompareAndSwap(true, false) {
				e.updatePod("prod", "db", func(p *corev1.Pod) { p.Labels = web })
			}
		}
		e.startWith(p)
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.settle()
		armed.Store(true)
		e.updateNode("node3", func(n *corev1.Node) { n.Labels["touch"] = "1" }) // a sync, during which db is relabelled
		e.expectRows("db served after its relabel during a sync",
			map[string]string{
				"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"),
				"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2"),
				"prod/db":   rr("eip-prod", "10.244.2.7", "100.64.0.2"),
			},
			[]string{
				sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod"),
				sn("node1", "172.18.0.33", "10.244.2.7", "eip-prod"),
			})
		if armed.Load() {
			t.Fatal("no sync ran after the node update")
		}
	})
}

// TestOwnWritesAreNotFullSyncs: the master's status writes come back as EgressIP
// events; the syncs they cause are incremental (only the start-up sync is full)
// and write nothing more.
func TestOwnWritesAreNotFullSyncs(t *testing.T) {
	e := cluster(t, nbserver.Start, gwmode.Shared)
	e.createProdOnNodes12()
	e.expectMetric(1, metricNBTransactions)
	e.settle()
	txns, done := e.metric(metricNBTransactions), e.syncs.Load()
	e.updateNode("node3", func(n *corev1.Node) { n.Labels["touch"] = "1" }) // one more sync, after the echo
	e.waitSyncs(done + 1)
	e.settle()
	if full, all := e.metric(metricSyncDuration, "full"), e.metric(metricSyncDuration, "incremental"); full != 1 || all < 2 {
		t.Errorf("%v full syncs (want 1: start-up) and %v incremental ones (want >= 2: the EgressIP's, the node update's)", full, all)
	}
	if got := e.metric(metricNBTransactions); got != txns {
		t.Errorf("NB transactions after the status echo: %v, want %v", got, txns)
	}
}
