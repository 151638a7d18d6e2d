package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// TestZoneControllerDown (interconnect layout, both gateway modes, IPv4): the pod's zone controller (with its node
// daemon: one process per node) is killed while its egress IP moves, and started again 2 s later, within the
// release linger. The pod's zone keeps its rows meanwhile (still rerouting to the old holder, which lingers on the
// IP), and follows the move once it is back: no request leaves with a source other than the egress IP
// (docs/interconnect.md, "When a part is down").
func TestZoneControllerDown(t *testing.T) {
	if !slices.Contains(e2eLayouts(), cluster.LayoutInterconnect) || !slices.Contains(e2eFamilies(cluster.FamilyIPv4), cluster.FamilyIPv4) {
		t.Skip("interconnect layout, IPv4 only (E2E_LAYOUTS, E2E_IP_FAMILIES)")
	}
	for _, mode := range e2eModes() {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnvIn(t, cluster.LayoutInterconnect, mode, cluster.FamilyIPv4)
			e.prodWithWeb1()
			e.labelAllAssignable()
			ip := eipA[4]
			egress := netip.MustParseAddr(ip)
			e.applyEgressIP("prod", []string{ip}, map[string]string{"env": "prod"}, web)
			items := e.waitStatus("prod", "assigned", func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, ip) != "" })
			from := holder(items, ip)
			e.eventually("prod", "web1", egress)

			p := startProber(e, "prod", "web1", 4, 50*time.Millisecond)
			//nolint:forbidigo // the prober's window: requests before the change are part of the measured gap
			time.Sleep(500 * time.Millisecond)
			failAt := time.Now()
			e.stopNode("node1", syscall.SIGKILL) // node1's zone controller and node daemon
			e.labelAssignable(from, false)
			items = e.waitStatus("prod", ip+" moved off "+from, func(it []egressipv1.EgressIPStatusItem) bool {
				h := holder(it, ip)
				return h != "" && h != from
			})
			to := holder(items, ip)
			//nolint:forbidigo // the prober's window: requests through the new holder while node1 is down are part of what is measured
			time.Sleep(2 * time.Second)
			e.startNode("node1")
			e.waitHealthy("node1")
			// Until node1's zone reroutes to the new holder: the requests then still leave with the egress IP.
			e.eventually("prod", "web1", egress)
			//nolint:forbidigo // the prober's window: requests after the change are part of what is measured
			time.Sleep(time.Second)
			probes := p.finish()
			longest, lost, bad := gap(probes, failAt, egress)
			line := fmt.Sprintf("ZONE-DOWN interconnect/%s/ipv4: the pod's zone controller down 2 s while %s moved %s -> %s: longest gap %s (lost %d, other source %d; target: 0 other source)\n",
				mode, ip, from, to, longest.Round(time.Millisecond), lost, bad)
			fmt.Print(line)
			recordResult(t, line)
			if bad > 0 {
				t.Errorf("%d requests left with another source than %s: %s", bad, egress, otherSources(probes, failAt, egress))
			}
			e.labelAssignable(from, true)
		})
	}
}
