package master

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// nbWatch samples NB every 20 ms while the control plane is away and records
// every moment a row that must stay was missing (an EgressIP losing its
// assignment in the data path).
type nbWatch struct {
	mu      sync.Mutex
	samples int
	missing []string
	stop    chan struct{}
	done    chan struct{}
}

// watchRows starts sampling: every line of must (e.snats() format) must be in NB
// at every sample.
func watchRows(e *env, must []string) *nbWatch {
	w := &nbWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			select {
			case <-w.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			cur, err := nbstate.ReadCurrent(context.Background(), e.nbc)
			if err != nil {
				continue
			}
			have := map[string]bool{}
			for k, n := range cur.Rows.NATs {
				have[fmt.Sprintf("%s %s <- %s (%s)", k.Router, n.ExternalIP, n.LogicalIP, k.IDs.Name)] = true
			}
			w.mu.Lock()
			w.samples++
			for _, m := range must {
				if !have[m] {
					w.missing = append(w.missing, fmt.Sprintf("%s: %s", time.Now().Format("15:04:05.000"), m))
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *nbWatch) end(t *testing.T, what string) {
	t.Helper()
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.samples == 0 {
		t.Fatalf("%s: NB was never sampled", what)
	}
	if len(w.missing) > 0 {
		t.Errorf("%s: rows missing from NB in %d of %d samples: %v", what, len(w.missing), w.samples, w.missing)
	}
	t.Logf("%s: %d NB samples, every row present", what, w.samples)
}

// TestControlPlaneRestart: kube-apiserver restarted alone, then kube-apiserver and
// etcd together (etcd's data kept), with changes made just before the outage and
// right after it. While the control plane is away no programmed row disappears
// from NB and no EgressIP status is rewritten; afterwards the informers resume
// (changes made after the restart are programmed) and everything converges, with
// the untouched EgressIP never written.
func TestControlPlaneRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	e := populate(newAPIServerEnv(t, nbserver.Start, gwmode.Shared))
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44"}, prodNS, web))
	e.create(egressIP("eip-dev", 1, []string{"172.18.0.55"}, map[string]string{"env": "dev"}, nil))
	e.expectStatus("eip-prod", "172.18.0.33@node1", "172.18.0.44@node2")
	e.expectStatus("eip-dev", "172.18.0.55@node1")
	devSNAT := sn("node1", "172.18.0.55", "10.244.2.8", "eip-dev")
	prodSNATs := func(pods ...string) []string {
		var out []string
		for _, ip := range pods {
			out = append(out, sn("node1", "172.18.0.33", ip, "eip-prod"), sn("node2", "172.18.0.44", ip, "eip-prod"))
		}
		return out
	}
	e.expectRows("before", map[string]string{
		"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2", "100.64.0.3"),
		"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2", "100.64.0.3"),
		"dev/web3":  rr("eip-dev", "10.244.2.8", "100.64.0.2"),
	}, append(prodSNATs("10.244.1.5", "10.244.3.6"), devSNAT))
	// The Ready conditions are written after the NB commit that made the rows
	// above: wait for them, or the resourceVersion read next may predate that write.
	e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed)
	e.expectCondition("eip-dev", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed)
	dev, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), "eip-dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	restarts := []struct {
		name    string
		restart func()
	}{
		{"apiserver", func() { e.api.RestartAPIServer(t, time.Second) }},
		{"apiserver+etcd", func() { e.api.RestartControlPlane(t, time.Second) }},
	}
	pods := []string{"10.244.1.5", "10.244.3.6"}
	for i, r := range restarts {
		// A change just before the outage (programmed or not by the time the
		// apiserver goes), one right after it.
		before := fmt.Sprintf("10.244.1.%d", 20+i)
		e.create(pod("prod", fmt.Sprintf("before%d", i), before, web))
		w := watchRows(e, append(prodSNATs(pods...), devSNAT))
		syncs := e.syncs.Load()
		r.restart()
		w.end(t, r.name+" restart")
		after := fmt.Sprintf("10.244.3.%d", 20+i)
		back := time.Now()
		e.create(pod("prod", fmt.Sprintf("after%d", i), after, web))
		pods = append(pods, before, after)
		reroutes := map[string]string{"dev/web3": rr("eip-dev", "10.244.2.8", "100.64.0.2")}
		for j, ip := range pods {
			name := []string{"web1", "web2"}
			key := ""
			switch {
			case j < 2:
				key = "prod/" + name[j]
			case j%2 == 0:
				key = fmt.Sprintf("prod/before%d", (j-2)/2)
			default:
				key = fmt.Sprintf("prod/after%d", (j-2)/2)
			}
			reroutes[key] = rr("eip-prod", ip, "100.64.0.2", "100.64.0.3")
		}
		// client-go's reflectors retry a failed list/watch with a backoff that
		// grows from 0.8 s to 30 s (with jitter): after an outage of a few seconds
		// an informer may take that long to see the apiserver again.
		e.patience = 90 * time.Second
		e.expectRows("converged after the "+r.name+" restart", reroutes, append(prodSNATs(pods...), devSNAT))
		e.patience = 0
		t.Logf("%s restart: a pod created once the apiserver answered again was programmed %.1f s later", r.name, time.Since(back).Seconds())
		if e.syncs.Load() == syncs {
			t.Fatalf("%s restart: no sync ran", r.name)
		}
	}
	// An EgressIP edit after both restarts is seen: the EgressIP informer resumed too. Its reflector has its own
	// backoff (the pods' resuming says nothing of it): the same patience as above (CI saw it miss the default).
	e.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) { o.Spec.EgressIPs = []string{"172.18.0.33", "172.18.0.66"} })
	e.patience = 90 * time.Second
	e.expectStatus("eip-prod", "172.18.0.33@node1", "172.18.0.66@node2")
	e.patience = 0
	got, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), "eip-dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != dev.ResourceVersion {
		t.Errorf("eip-dev was written across the restarts (resourceVersion %s -> %s, status %+v)",
			dev.ResourceVersion, got.ResourceVersion, got.Status.Items)
	}
}
