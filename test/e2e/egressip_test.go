package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
)

const (
	eipA = "172.18.0.50"
	eipB = "172.18.0.51"
	eipC = "172.18.0.53"
)

var web = map[string]string{"app": "web"}

// TestEgressIP runs the admin's flow in both gateway modes: cases 1 to 8 of the
// end-to-end issue, in one cluster per mode, each case leaving the cluster as it
// found it.
func TestEgressIP(t *testing.T) {
	for _, mode := range []string{"shared", "local"} {
		t.Run(mode, func(t *testing.T) { runEgressIPCases(t, mode) })
	}
}

func runEgressIPCases(t *testing.T, mode string) {
	e := newEnv(t, mode)
	start := time.Now()
	e.kubectl("", "create", "namespace", "prod")
	e.kubectl("", "label", "namespace", "prod", "env=prod")
	e.kubectl("", "create", "namespace", "dev")
	e.kubectl("", "label", "namespace", "dev", "env=dev")
	// web1 sits on node1, which never holds an egress IP: its traffic crosses to the egress node.
	e.createPod("prod", "web1", "node1", web)
	e.createPod("prod", "web3", "node3", web)
	e.createPod("prod", "db1", "node1", map[string]string{"app": "db"})
	e.createPod("dev", "web1", "node1", web)
	e.labelAssignable("node2", true)
	e.labelAssignable("node3", true)
	t.Logf("%s: cluster, ovnkube and pods ready in %s", mode, time.Since(start))

	egress := netip.MustParseAddr(eipA)
	node1 := e.nodeSource("node1")

	t.Run("1-served-pods-use-the-egress-ip", func(t *testing.T) {
		e.t = t
		e.applyEgressIP("prod", []string{eipA}, map[string]string{"env": "prod"}, web)
		items := e.waitStatus("prod", "assigned", func(it []egressipv1.EgressIPStatusItem) bool { return len(it) == 1 })
		if h := items[0].Node; h != "node2" && h != "node3" {
			t.Fatalf("egress IP assigned to %s, which is not egress-assignable", h)
		}
		e.eventually("prod", "web1", egress)
		e.eventually("prod", "web3", egress)
		// Unselected pod, and a pod of an unselected namespace: their node's IP.
		for _, p := range [][2]string{{"prod", "db1"}, {"dev", "web1"}} {
			if got, err := e.source(p[0], p[1]); err != nil || got != node1 {
				t.Errorf("%s/%s: echo saw %v (%v), want node1's %v", p[0], p[1], got, err, node1)
			}
		}
		// UDP replies come back to the pod too.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		if got, err := e.c.Request(ctx, "prod", "web1", "udp", 2*time.Second); err != nil || got != egress {
			t.Errorf("udp from prod/web1: echo saw %v (%v), want %v", got, err, egress)
		}
	})

	t.Run("3-unlabel-moves-the-ip", func(t *testing.T) {
		e.t = t
		from := holder(e.getEgressIP("prod").Status.Items, eipA)
		to := map[string]string{"node2": "node3", "node3": "node2"}[from]
		e.labelAssignable(from, false)
		defer e.labelAssignable(from, true)
		e.waitStatus("prod", "moved to "+to, func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, eipA) == to })
		e.eventually("prod", "web1", egress)
		e.eventually("prod", "web3", egress)
		if mode == "local" {
			waitHostClean(t, e, from, eipA)
			waitHostHas(t, e, to, eipA)
		}
	})

	t.Run("2-two-ips-on-two-nodes", func(t *testing.T) {
		e.t = t
		e.applyEgressIP("prod", []string{eipA, eipB}, map[string]string{"env": "prod"}, web)
		items := e.waitStatus("prod", "two IPs on two nodes", func(it []egressipv1.EgressIPStatusItem) bool {
			return len(it) == 2 && it[0].Node != it[1].Node
		})
		t.Logf("status: %+v", items)
		// Wait until the new IP carries traffic (NB rows written and installed by
		// ovn-controller), then every request must use one of the two.
		e.eventually("prod", "web1", netip.MustParseAddr(eipB))
		allowed := []netip.Addr{egress, netip.MustParseAddr(eipB)}
		seen := map[netip.Addr]int{}
		for i := 0; i < 20; i++ {
			for _, p := range []string{"web1", "web3"} {
				// A connection in flight while the ECMP next-hop set changes can be
				// rehashed to the other egress node and reset; new ones are fine.
				got, err := e.source("prod", p)
				for retry := 0; err != nil && retry < 3; retry++ {
					t.Logf("prod/%s: %v (retrying)", p, err)
					time.Sleep(200 * time.Millisecond)
					got, err = e.source("prod", p)
				}
				if err != nil {
					t.Fatalf("prod/%s: %v", p, err)
				}
				if got != allowed[0] && got != allowed[1] {
					t.Fatalf("prod/%s egressed with %v, want one of %v", p, got, allowed)
				}
				seen[got]++
			}
		}
		t.Logf("sources seen over 40 requests: %v", seen)
		e.applyEgressIP("prod", []string{eipA}, map[string]string{"env": "prod"}, web)
		e.waitStatus("prod", "one IP", func(it []egressipv1.EgressIPStatusItem) bool { return len(it) == 1 && it[0].EgressIP == eipA })
		e.eventually("prod", "web1", egress)
	})

	t.Run("5-pod-churn", func(t *testing.T) {
		e.t = t
		p := e.createPod("prod", "web2", "node2", web)
		e.eventually("prod", "web2", egress)
		e.deletePod("prod", "web2")
		waitNoRowFor(t, e, "prod/web2")
		// A new pod reusing the same name (and perhaps the same IP) is served again.
		p2 := e.createPod("prod", "web2", "node1", web)
		e.eventually("prod", "web2", egress)
		t.Logf("pod IPs: first %v, second %v", p.IP, p2.IP)
		e.deletePod("prod", "web2")
		waitNoRowFor(t, e, "prod/web2")
		// An unselected pod created later stays on its node's IP.
		e.createPod("prod", "db2", "node1", map[string]string{"app": "db"})
		if got, err := e.source("prod", "db2"); err != nil || got != node1 {
			t.Errorf("prod/db2: echo saw %v (%v), want %v", got, err, node1)
		}
		e.deletePod("prod", "db2")
	})

	t.Run("6-namespace-relabelled-out", func(t *testing.T) {
		e.t = t
		e.kubectl("", "label", "namespace", "prod", "env=staging", "--overwrite")
		e.eventually("prod", "web1", node1)
		waitNoRowFor(t, e, "prod/web1")
		e.kubectl("", "label", "namespace", "prod", "env=prod", "--overwrite")
		e.eventually("prod", "web1", egress)
	})

	t.Run("8-bad-input", func(t *testing.T) {
		e.t = t
		e.applyEgressIP("bad-subnet", []string{"10.99.0.1"}, map[string]string{"env": "dev"}, nil)
		e.applyEgressIP("bad-node-ip", []string{e.mustNode("node2").NodeIP.String()}, map[string]string{"env": "dev"}, nil)
		e.applyEgressIP("bad-taken", []string{eipA}, map[string]string{"env": "dev"}, nil)
		for name, reason := range map[string]string{"bad-subnet": "10.99.0.1", "bad-node-ip": e.mustNode("node2").NodeIP.String(), "bad-taken": eipA} {
			waitEvent(t, e, name, reason)
			time.Sleep(200 * time.Millisecond)
			if items := e.getEgressIP(name).Status.Items; len(items) != 0 {
				t.Errorf("EgressIP %s should be unassigned, status %+v", name, items)
			}
			out := e.kubectl("", "get", "eip", name)
			if !strings.Contains(out, name) {
				t.Errorf("kubectl get eip %s:\n%s", name, out)
			}
		}
		// The good EgressIP keeps working.
		e.eventually("prod", "web1", egress)
		if got, err := e.source("dev", "web1"); err != nil || got != node1 {
			t.Errorf("dev/web1: echo saw %v (%v), want %v", got, err, node1)
		}
		for _, n := range []string{"bad-subnet", "bad-node-ip", "bad-taken"} {
			e.kubectl("", "delete", "eip", n)
		}
	})

	runOperatorCases(t, e, mode)

	t.Run("12-a-node-cannot-pull-egress-ips-to-itself", func(t *testing.T) {
		e.t = t
		h := holder(e.getEgressIP("prod").Status.Items, eipA)
		other := map[string]string{"node2": "node3", "node3": "node2"}[h]
		// node1 is compromised: its daemon is gone, and with its Node-bound token it writes what it likes on its own
		// Node (the admission policy lets it do that and nothing more): the holder's address as its egress network,
		// and eipA as ready. node1 is the only assignable node besides the holder.
		e.stopNode("node1", syscall.SIGTERM)
		e.labelAssignable(other, false)
		e.labelAssignable("node1", true)
		defer func() {
			e.labelAssignable("node1", false)
			e.labelAssignable(other, true)
			e.startNode("node1")
			e.waitNodeAnnotation("node1", "k8s.ovn.org/node-primary-ifaddr", fmt.Sprintf(`{"ipv4":"%s/16"}`, e.mustNode("node1").NodeIP))
		}()
		holderIP := e.mustNode(h).NodeIP
		e.nodeKubectl("node1", "annotate", "node", "node1", "--overwrite",
			fmt.Sprintf(`k8s.ovn.org/node-primary-ifaddr={"ipv4":"%s/16"}`, holderIP),
			fmt.Sprintf(`k8s.ovn.org/egress-ips-ready=["%s"]`, eipA))
		e.applyEgressIP("prod", []string{eipA, eipB}, map[string]string{"env": "prod"}, web)
		waitObjectEvent(t, e, "Node", "node1", fmt.Sprintf("k8s.ovn.org/node-primary-ifaddr: %s is node %s's address", holderIP, h))
		if mode == "local" {
			waitObjectEvent(t, e, "Node", "node1", fmt.Sprintf("k8s.ovn.org/egress-ips-ready lists %s, which node %s holds", eipA, h))
		}
		waitEvent(t, e, "prod", eipB) // the master looked and found no node for eipB
		if items := e.getEgressIP("prod").Status.Items; len(items) != 1 || holder(items, eipA) != h {
			t.Errorf("status %+v, want only %s on %s", items, eipA, h)
		}
		for _, p := range []string{"web1", "web3"} {
			for i := 0; i < 5; i++ {
				if got, err := e.source("prod", p); err != nil || got != egress {
					t.Errorf("prod/%s: echo saw %v (%v), want %v", p, got, err, egress)
				}
			}
		}
		e.applyEgressIP("prod", []string{eipA}, map[string]string{"env": "prod"}, web)
	})

	t.Run("7-master-restart-while-things-change", func(t *testing.T) {
		e.t = t
		from := holder(e.getEgressIP("prod").Status.Items, eipA)
		to := map[string]string{"node2": "node3", "node3": "node2"}[from]
		e.createPod("prod", "web4", "node2", web)
		e.eventually("prod", "web4", egress)
		e.stopMaster("master-a", syscall.SIGKILL)
		e.labelAssignable(from, false)
		defer e.labelAssignable(from, true)
		e.deletePod("prod", "web4")
		e.applyEgressIP("prod", []string{eipC}, map[string]string{"env": "prod"}, web)
		e.startMaster("master-a", "127.0.0.1:29101")
		e.waitStatus("prod", eipC+" on "+to, func(it []egressipv1.EgressIPStatusItem) bool {
			return len(it) == 1 && it[0].EgressIP == eipC && it[0].Node == to
		})
		e.eventually("prod", "web1", netip.MustParseAddr(eipC))
		e.eventually("prod", "web3", netip.MustParseAddr(eipC))
		waitNoRowFor(t, e, "prod/web4")
		for _, table := range []string{"Logical_Router_Policy", "NAT"} {
			for _, r := range e.nbOwned(table) {
				if strings.Contains(r, eipA) || strings.Contains(r, `node="`+from+`"`) || strings.Contains(r, "node="+from) {
					t.Errorf("stale %s row after restart: %s", table, r)
				}
			}
		}
		if mode == "local" {
			waitHostClean(t, e, from, eipA)
		}
	})

	t.Run("4-delete-egressip", func(t *testing.T) {
		e.t = t
		e.kubectl("", "delete", "eip", "prod")
		e.eventually("prod", "web1", node1)
		e.eventually("prod", "web3", e.nodeSource("node3"))
		deadline := time.Now().Add(10 * time.Second)
		for e.nbRowsOfEgressIP("prod") != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("rows of EgressIP prod remain in NB: %v %v", e.nbOwned("Logical_Router_Policy"), e.nbOwned("NAT"))
			}
			time.Sleep(100 * time.Millisecond)
		}
		if mode == "local" {
			for _, n := range []string{"node1", "node2", "node3"} {
				waitHostClean(t, e, n, eipA, eipB, eipC)
			}
		}
	})
}

func (e *env) mustNode(name string) struct{ NodeIP netip.Addr } {
	n, err := e.c.Node(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return struct{ NodeIP netip.Addr }{n.NodeIP}
}

// waitHostClean waits until node has no SNAT rule of ours and none of ips.
func waitHostClean(t *testing.T, e *env, node string, ips ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rules, addrs, err := e.hostEgressState(node, ips...)
		if err == nil && len(rules) == 0 && len(addrs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s still has SNAT rules %v and egress addresses %v (%v)", node, rules, addrs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitHostHas waits until node holds ip and has SNAT rules to it.
func waitHostHas(t *testing.T, e *env, node, ip string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rules, addrs, err := e.hostEgressState(node, ip)
		if err == nil && len(addrs) == 1 && strings.Contains(strings.Join(rules, "\n"), "--to-source "+ip) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: want %s with SNAT rules, have rules %v addresses %v (%v)", node, ip, rules, addrs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitNoRowFor waits until no NB row of ours names pod (namespace/name).
func waitNoRowFor(t *testing.T, e *env, pod string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, table := range []string{"Logical_Router_Policy", "NAT"} {
			for _, r := range e.nbOwned(table) {
				if strings.Contains(r, pod+`"`) || strings.Contains(r, pod+",") || strings.Contains(r, pod+"}") {
					left = append(left, r)
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("NB rows for pod %s remain: %v", pod, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitEvent waits for a Warning Event on EgressIP name whose message contains substr.
func waitEvent(t *testing.T, e *env, name, substr string) {
	t.Helper()
	waitObjectEvent(t, e, "EgressIP", name, substr)
}

// waitObjectEvent waits for a Warning Event on the object kind/name whose message contains substr.
func waitObjectEvent(t *testing.T, e *env, kind, name, substr string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	var seen []string
	for time.Now().Before(deadline) {
		evs, err := e.c.Client().CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name,
		})
		if err == nil {
			seen = seen[:0]
			for _, ev := range evs.Items {
				seen = append(seen, ev.Reason+": "+ev.Message)
				if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, substr) {
					t.Logf("%s %s: event %s: %s", kind, name, ev.Reason, ev.Message)
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no Warning Event on %s %s mentioning %q; events: %v", kind, name, substr, seen)
}
