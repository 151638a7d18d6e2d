package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// TestLingerAcrossMasterRestart (local gateway mode, IPv4, each layout): a strict EgressIP with one IP serves a pod
// on node1 that sends a TCP request to the echo server every 50 ms. The holder is unlabelled (the IP moves), 1 s
// later the other node too (no node can hold it: the last holder lingers), 2 s later the master is killed with
// SIGKILL and started again (inside that linger), 4 s later the first holder is labelled again. In the interconnect
// layout the cluster manager and the pod's zone controller (node1's process) are the ones killed and started again.
// Strict: a request may fail, but none may leave with a source other than the egress IP. A restarted master or
// zone that starts a linger clock of its own reroutes to a node whose linger already ended: its requests leave with
// that node's address.
func TestLingerAcrossMasterRestart(t *testing.T) {
	if !slices.Contains(e2eModes(), gwmode.Local) || !slices.Contains(e2eFamilies(cluster.FamilyIPv4), cluster.FamilyIPv4) {
		t.Skip("runs in local gateway mode, IPv4 only")
	}
	for _, layout := range e2eLayouts() {
		t.Run(layout, func(t *testing.T) { lingerAcrossRestart(t, layout) })
	}
}

func lingerAcrossRestart(t *testing.T, layout string) {
	e := newEnvIn(t, layout, gwmode.Local, cluster.FamilyIPv4)
	e.prodWithWeb1()
	e.labelAllAssignable()
	ip := eipA[4]
	egress := netip.MustParseAddr(ip)
	e.kubectl(fmt.Sprintf(`apiVersion: k8s.ovn.org/v1
kind: EgressIP
metadata:
  name: prod
spec:
  strict: true
  egressIPs: [%q]
  namespaceSelector:
    matchLabels: {env: prod}
  podSelector:
    matchLabels: {app: web}
`, ip), "apply", "-f", "-")
	items := e.waitStatus("prod", "assigned", func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, ip) != "" })
	e.eventually("prod", "web1", egress)
	from := holder(items, ip)
	other := e.assignable[0]
	if other == from {
		other = e.assignable[1]
	}

	p := startProber(e, "prod", "web1", 4, 50*time.Millisecond)
	//nolint:forbidigo // the prober's window: requests before the change are part of the measured gap
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	e.labelAssignable(from, false)
	e.waitStatus("prod", ip+" moved to "+other, func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, ip) == other })
	//nolint:forbidigo // the scenario's timeline: the second change is due 1 s after the start
	time.Sleep(time.Until(start.Add(time.Second)))
	e.labelAssignable(other, false)
	e.waitStatus("prod", "unassigned", func(it []egressipv1.EgressIPStatusItem) bool { return len(it) == 0 })
	//nolint:forbidigo // the scenario's timeline: the master restart is due 3 s after the start
	time.Sleep(time.Until(start.Add(3 * time.Second)))
	e.stopMaster("master-a", syscall.SIGKILL)
	if layout == cluster.LayoutInterconnect {
		e.stopNode("node1", syscall.SIGKILL) // web1's zone controller (and node1's daemon: node1 holds nothing)
		e.startNode("node1")
	}
	e.startMaster("master-a", "127.0.0.1:29101")
	//nolint:forbidigo // the scenario's timeline: the IP comes back 7 s after the start
	time.Sleep(time.Until(start.Add(7 * time.Second)))
	e.labelAssignable(from, true)
	e.waitStatus("prod", "assigned to "+from, func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, ip) == from })
	e.eventually("prod", "web1", egress) // the restarted master serves the pod again
	//nolint:forbidigo // the prober's window: requests after the change are part of what is measured
	time.Sleep(time.Second)
	probes := p.finish()

	var ok, failed, wrong int
	for _, pr := range probes {
		switch {
		case pr.err != nil:
			failed++
		case pr.src == egress:
			ok++
		default:
			wrong++
		}
	}
	line := fmt.Sprintf("LINGER-MASTER-RESTART %s/local/ipv4 strict: %d requests: %d with %s, %d failed, %d with another source: %s\n",
		layout, len(probes), ok, ip, failed, wrong, otherSources(probes, start, egress))
	fmt.Print(line)
	recordResult(t, line)
	if ok == 0 {
		t.Fatalf("no request reached the echo server with %s: the probes saw nothing", ip)
	}
	if wrong > 0 {
		t.Errorf("strict EgressIP: %d of %d requests left with a source other than %s: %s",
			wrong, len(probes), ip, otherSources(probes, start, egress))
	}
}
