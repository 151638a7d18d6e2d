package master

import (
	"fmt"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// TestWithRealAPIServer runs the main flows against a real kube-apiserver (our CRD
// with its status subresource, resourceVersions, real Events) and a real NB
// ovsdb-server: assignment, a move, a bad request reported as an Event, a restart
// with nothing changed (no write at all), and a restart after changes.
func TestWithRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	e := populate(newAPIServerEnv(t, nbserver.Start, gwmode.Shared))

	e.createProdOnNodes12()
	e.expectProdRowsOnNodes12("assigned")

	e.updateNode("node1", unlabelAssignable)
	e.updateNode("node3", labelAssignable)
	e.expectStatus("eip-prod", "172.18.0.33@node3", "172.18.0.44@node2")
	e.expectHeldRows("moved to node3", "eip-prod", prodWebs(),
		holder{"node3", "172.18.0.33", "100.64.0.4"}, holder{"node2", "172.18.0.44", "100.64.0.3"})

	e.create(egressIP("eip-taken", 5, []string{"172.18.0.44"}, map[string]string{"env": "dev"}, nil))
	e.expectEvent("EgressIPConflict", "172.18.0.44", "eip-taken")

	e.settle()
	rows := e.ours()
	e.stop()
	e.start()
	e.settle()
	if got := e.metric(metricNBTransactions); got != 0 {
		t.Errorf("restart with nothing changed: %v NB transactions, want 0", got)
	}
	if got := e.metric(metricStatusUpdateTotal); got != 0 {
		t.Errorf("restart with nothing changed: %v status updates, want 0", got)
	}
	if got := e.ours(); !slices.Equal(got, rows) {
		t.Errorf("rows changed across restart:\n got  %v\n want %v", got, rows)
	}

	e.stop()
	e.deletePod("prod", "web1")
	e.deleteEgressIP("eip-taken")
	e.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) { o.Spec.EgressIPs = []string{"172.18.0.44"} })
	e.start()
	e.expectStatus("eip-prod", "172.18.0.44@node2")
	e.expectRows("converged after restart",
		map[string]string{"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.3")},
		[]string{sn("node2", "172.18.0.44", "10.244.3.6", "eip-prod")})
}

// TestOwnStatusWriteIsNoEvent: with a real apiserver (resourceVersions), the informer's delivery of the master's own
// status writes starts no sync; an edit by someone else, also to status alone, still does.
func TestOwnStatusWriteIsNoEvent(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	e := populate(newAPIServerEnv(t, nbserver.Start, gwmode.Shared))
	e.create(egressIP("eip-marker", 0, []string{"172.18.0.99"}, map[string]string{"env": "none"}, nil))
	e.expectStatus("eip-marker", "172.18.0.99@node1")
	e.settle()
	startedBefore, writesBefore := e.started.Load(), e.metric(metricStatusUpdateTotal)
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44"}, prodNS, web))
	e.expectStatus("eip-prod", "172.18.0.33@node2", "172.18.0.44@node1")
	e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed) // the last of its own writes
	// A barrier: one informer delivers in order, so once the sync for this later edit ran, every earlier EgressIP
	// event (the master's own writes among them) was handled.
	b := e.started.Load()
	e.updateEgressIP("eip-marker", func(o *egressipv1.EgressIP) { o.Annotations = map[string]string{"barrier": "1"} })
	e.eventually("a sync after the barrier edit", func() error {
		if e.started.Load() == b {
			return fmt.Errorf("no sync started")
		}
		return nil
	})
	e.settle()
	writes, started := e.metric(metricStatusUpdateTotal)-writesBefore, e.started.Load()-startedBefore-1
	t.Logf("EgressIP created: %v status writes, %d syncs (the barrier's not counted)", writes, started)
	if started > 2 {
		t.Errorf("%d syncs for one EgressIP created (%v status writes of its own): own writes woke the master", started, writes)
	}

	// Someone else rewrites the status (here: clears it): that is an event, and the master writes it back.
	before := e.started.Load()
	e.updateEgressIPStatus("eip-prod", func(o *egressipv1.EgressIP) { o.Status.Items = nil })
	e.expectStatus("eip-prod", "172.18.0.33@node2", "172.18.0.44@node1")
	if e.started.Load() == before {
		t.Errorf("a status edit by another client started no sync")
	}
}
