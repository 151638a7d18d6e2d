package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"

	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// TestNodeDaemonRollingRestart rolls the node daemons as a DaemonSet's RollingUpdate (maxUnavailable 1) does: one
// node at a time, the old daemon gets SIGTERM, the new one starts, and the next node waits until it is ready (its
// readiness probe from the images, its egress health server otherwise). A served pod sends a request every 20 ms
// throughout, in local gateway mode (where the node daemons program the host): no request may leave with a source
// other than the egress IP (docs/images.md, "Upgrade").
func TestNodeDaemonRollingRestart(t *testing.T) {
	e := newEnv(t, gwmode.Local, cluster.FamilyIPv4)
	eipA := eipA[4]
	e.prodWithWeb1()
	e.labelAssignable("node2", true)
	e.labelAssignable("node3", true)
	e.applyEgressIP("prod", []string{eipA}, map[string]string{"env": "prod"}, web)
	egress := netip.MustParseAddr(eipA)
	e.waitStatus("prod", "assigned", func(it []egressipv1.EgressIPStatusItem) bool { return len(it) == 1 })
	e.eventually("prod", "web1", egress)

	p := startProber(e, "prod", "web1", 4, 20*time.Millisecond)
	//nolint:forbidigo // the prober's window: requests before the change are part of the measured gap
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	for _, n := range e.c.Nodes() {
		e.stopNode(n.Name, syscall.SIGTERM)
		e.startNode(n.Name)
		e.waitNodeReady(n.Name)
	}
	rolled := time.Since(start)
	//nolint:forbidigo // the prober's window: requests after the change are part of what is measured
	time.Sleep(time.Second)
	probes := p.finish()
	longest, lost, bad := gap(probes, start, egress)
	line := fmt.Sprintf("ROLLING RESTART (local%s): 3 node daemons rolled in %s; %d requests, longest gap between requests seen with %s: %s (lost %d, other source %d)\n",
		map[bool]string{true: ", from the images", false: ""}[e.images != nil], rolled.Round(time.Millisecond), len(probes),
		eipA, longest.Round(time.Millisecond), lost, bad)
	fmt.Print(line)
	recordResult(t, line)
	if bad > 0 {
		t.Fatalf("%d requests left with a source other than the egress IP during the roll: %s", bad, otherSources(probes, start, egress))
	}
	e.eventually("prod", "web1", egress)
}

// waitNodeReady waits until the node daemon of node is ready: its readiness probe (from the images) or its egress
// health server (processes).
func (e *env) waitNodeReady(node string) {
	e.t.Helper()
	if e.images == nil {
		e.waitHealthy(node)
		return
	}
	e.mu.Lock()
	d, _ := e.nodes[node].(*podDaemon)
	e.mu.Unlock()
	if d == nil {
		e.t.Fatalf("node %s: no pod", node)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.p.WaitReady(ctx); err != nil {
		e.t.Fatal(err)
	}
}
