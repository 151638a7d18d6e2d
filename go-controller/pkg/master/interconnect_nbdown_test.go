package master

import (
	"fmt"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// TestInterconnectZoneNBDown: one zone's NB database is down (its ovsdb-server stopped) while an egress IP moves.
// The cluster manager still writes the new status, the new holder's zone and the old holder's zone still program
// the move (the holder's SNAT of the pod of the zone whose NB is down included), and the zone whose NB is down
// fails its syncs and retries; when its NB is back, it converges (its pod's reroute follows the new holder).
func TestInterconnectZoneNBDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and four ovsdb-servers")
	}
	ic := newICEnv(t, gwmode.Shared)
	cm := ic.cm
	ic.startWebPods(500 * time.Millisecond)
	cm.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	cm.expectStatus("eip-prod", "172.18.0.33@node1")
	z1, z2, z3 := ic.zones["node1"], ic.zones["node2"], ic.zones["node3"]
	z3.expectRows("pod zone before", map[string]string{"prod/web2": rr("eip-prod", "10.244.3.6", "100.88.0.2")}, nil)

	z3.nb.Stop()
	cm.updateNode("node1", unlabelAssignable)
	cm.expectStatus("eip-prod", "172.18.0.33@node2") // the cluster manager writes status with zone node3's NB down
	z2.expectRows("new holder's zone, zone node3's NB down",
		map[string]string{
			"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.3"),
			"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.3"),
		},
		[]string{sn("node2", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node2", "172.18.0.33", "10.244.3.6", "eip-prod")})
	z1.expectRows("old holder's zone, zone node3's NB down: its pod follows to node2, its SNAT rows gone after the linger",
		map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.88.0.3")}, nil)
	cm.eventually("node2 lists the IP SNAT-ready", func() error {
		if got := ic.annotation("node2", annotations.EgressIPsSNATReady); got != `["172.18.0.33"]` {
			return fmt.Errorf("%s = %q", annotations.EgressIPsSNATReady, got)
		}
		return nil
	})
	z3.eventually("zone node3's syncs fail while its NB is down", func() error {
		if z3.metric(metricSyncErrorsTotal) == 0 {
			return fmt.Errorf("no failed sync yet")
		}
		return nil
	})

	z3.nb.Restart()
	z3.nbc = z3.nb.Client(t)
	z3.expectRows("zone node3 converged once its NB is back", map[string]string{"prod/web2": rr("eip-prod", "10.244.3.6", "100.88.0.3")}, nil)
}
