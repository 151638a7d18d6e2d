package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// The egress IPs of the cases, per family: A, B and C.
var (
	eipA = map[int]string{4: "172.18.0.50", 6: "fc00:f853:ccd:e793::50"}
	eipB = map[int]string{4: "172.18.0.51", 6: "fc00:f853:ccd:e793::51"}
	eipC = map[int]string{4: "172.18.0.53", 6: "fc00:f853:ccd:e793::53"}
)

var web = map[string]string{"app": "web"}

// ips returns the egress IPs of the sets for every family of the cluster (spec order: family by family).
func (e *env) ips(sets ...map[int]string) []string {
	var out []string
	for _, f := range e.fams {
		for _, s := range sets {
			out = append(out, s[f])
		}
	}
	return out
}

// addrs is ips parsed.
func (e *env) addrs(set map[int]string) []netip.Addr {
	var out []netip.Addr
	for _, ip := range e.ips(set) {
		out = append(out, netip.MustParseAddr(ip))
	}
	return out
}

// e2eFamilies lists the IP families a test runs in: $E2E_IP_FAMILIES (comma list of ipv4, ipv6, dual) or def.
func e2eFamilies(def ...string) []string {
	if v := os.Getenv("E2E_IP_FAMILIES"); v != "" {
		return strings.Split(v, ",")
	}
	return def
}

// e2eModes lists the gateway modes a test runs in: $E2E_GATEWAY_MODES (comma list of shared, local) or both.
func e2eModes() []gwmode.Mode {
	if v := os.Getenv("E2E_GATEWAY_MODES"); v != "" {
		var out []gwmode.Mode
		for _, m := range strings.Split(v, ",") {
			out = append(out, gwmode.Mode(m))
		}
		return out
	}
	return []gwmode.Mode{gwmode.Shared, gwmode.Local}
}

// onNodes reports whether every item is on a node of nodes, and no two items share a node.
func onDistinctNodes(items []egressipv1.EgressIPStatusItem, nodes []string) bool {
	seen := map[string]bool{}
	for _, it := range items {
		if !slices.Contains(nodes, it.Node) || seen[it.Node] {
			return false
		}
		seen[it.Node] = true
	}
	return true
}

// hasExactly reports whether the status holds exactly the IPs ips.
func hasExactly(items []egressipv1.EgressIPStatusItem, ips []string) bool {
	if len(items) != len(ips) {
		return false
	}
	for _, ip := range ips {
		if holder(items, ip) == "" {
			return false
		}
	}
	return true
}

// TestEgressIP runs the admin's flow in both gateway modes and in IPv4, IPv6-only and dual-stack clusters: cases 1
// to 8 of the end-to-end issue, in one cluster per mode and family, each case leaving the cluster as it found it.
// Every request is made over each family of the cluster and checked against the egress IP of that family (in
// dual-stack, one EgressIP holds one IP of each family and serves both families of the same pods).
//
// In the interconnect layout (one OVN zone per node, a cluster manager and a zone controller per node) the same
// cases run in IPv4 and dual-stack clusters, both modes (explain reading every zone's NB).
func TestEgressIP(t *testing.T) {
	for _, layout := range e2eLayouts() {
		fams := []string{cluster.FamilyIPv4, cluster.FamilyIPv6, cluster.FamilyDual}
		prefix := ""
		if layout == cluster.LayoutInterconnect {
			fams, prefix = []string{cluster.FamilyIPv4, cluster.FamilyDual}, "interconnect/"
		}
		for _, family := range e2eFamilies(fams...) {
			for _, mode := range e2eModes() {
				t.Run(prefix+string(mode)+"/"+family, func(t *testing.T) { runEgressIPCases(t, layout, mode, family) })
			}
		}
	}
}

// e2eLayouts lists the layouts a test runs in: $E2E_LAYOUTS (comma list of centralized, interconnect) or both.
func e2eLayouts() []string {
	if v := os.Getenv("E2E_LAYOUTS"); v != "" {
		return strings.Split(v, ",")
	}
	if fromImage() {
		return []string{cluster.LayoutCentralized} // the images run the manifests' centralized layout
	}
	return []string{cluster.LayoutCentralized, cluster.LayoutInterconnect}
}

func runEgressIPCases(t *testing.T, layout string, mode gwmode.Mode, family string) {
	e := newEnvIn(t, layout, mode, family)
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
	e.labelAllAssignable()
	t.Logf("%s/%s: cluster, ovnkube and pods ready in %s", mode, family, time.Since(start))

	egress := e.addrs(eipA)
	node1 := e.nodeSources("node1")
	primaryA := eipA[e.fams[0]]
	holdsA := func(items []egressipv1.EgressIPStatusItem) bool {
		return hasExactly(items, e.ips(eipA)) && onDistinctNodes(items, e.assignable)
	}

	t.Run("1-served-pods-use-the-egress-ip", func(t *testing.T) {
		e.t = t
		e.applyEgressIP("prod", e.ips(eipA), map[string]string{"env": "prod"}, web)
		items := e.waitStatus("prod", "assigned", holdsA)
		t.Logf("status: %+v", items)
		e.eventuallyAll("prod", "web1", egress)
		e.eventuallyAll("prod", "web3", egress)
		// Unselected pod, and a pod of an unselected namespace: their node's IP.
		for _, p := range [][2]string{{"prod", "db1"}, {"dev", "web1"}} {
			e.expectSources(p[0], p[1], node1)
		}
		// UDP replies come back to the pod too.
		for _, want := range egress {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			got, err := e.c.RequestFamily(ctx, "prod", "web1", cluster.FamilyOf(want), "udp", 2*time.Second)
			cancel()
			if err != nil || got != want {
				t.Errorf("udp from prod/web1: echo saw %v (%v), want %v", got, err, want)
			}
		}
	})

	t.Run("3-unlabel-moves-the-ip", func(t *testing.T) {
		e.t = t
		from := holder(e.getEgressIP("prod").Status.Items, primaryA)
		e.labelAssignable(from, false)
		defer e.labelAssignable(from, true)
		others := slices.DeleteFunc(slices.Clone(e.assignable), func(n string) bool { return n == from })
		items := e.waitStatus("prod", "moved off "+from, func(it []egressipv1.EgressIPStatusItem) bool {
			return hasExactly(it, e.ips(eipA)) && onDistinctNodes(it, others)
		})
		e.eventuallyAll("prod", "web1", egress)
		e.eventuallyAll("prod", "web3", egress)
		if mode == gwmode.Local {
			waitHostClean(t, e, from, e.ips(eipA)...)
			for _, ip := range e.ips(eipA) {
				waitHostHas(t, e, "prod", holder(items, ip), ip)
			}
		}
	})

	t.Run("2-two-ips-on-two-nodes", func(t *testing.T) {
		e.t = t
		e.applyEgressIP("prod", e.ips(eipA, eipB), map[string]string{"env": "prod"}, web)
		items := e.waitStatus("prod", "two IPs per family on distinct nodes", func(it []egressipv1.EgressIPStatusItem) bool {
			return hasExactly(it, e.ips(eipA, eipB)) && onDistinctNodes(it, e.assignable)
		})
		t.Logf("status: %+v", items)
		// Wait until the new IPs carry traffic (NB rows written and installed by
		// ovn-controller), then every request must use one of the two of its family.
		e.eventuallyAll("prod", "web1", e.addrs(eipB))
		for _, f := range e.fams {
			allowed := []netip.Addr{netip.MustParseAddr(eipA[f]), netip.MustParseAddr(eipB[f])}
			seen := map[netip.Addr]int{}
			for i := 0; i < 20; i++ {
				for _, p := range []string{"web1", "web3"} {
					// A connection in flight while the ECMP next-hop set changes can be
					// rehashed to the other egress node and reset; new ones are fine.
					got, err := e.sourceFamily("prod", p, f)
					for retry := 0; err != nil && retry < 3; retry++ {
						t.Logf("prod/%s: %v (retrying)", p, err)
						//nolint:forbidigo // a pause between at most 3 tries of a request whose connection the rehash reset: a count bounds it, not a condition
						time.Sleep(200 * time.Millisecond)
						got, err = e.sourceFamily("prod", p, f)
					}
					if err != nil {
						t.Fatalf("prod/%s: %v", p, err)
					}
					if got != allowed[0] && got != allowed[1] {
						t.Fatalf("prod/%s egressed with %v over IPv%d, want one of %v", p, got, f, allowed)
					}
					seen[got]++
				}
			}
			t.Logf("IPv%d sources seen over 40 requests: %v", f, seen)
		}
		e.applyEgressIP("prod", e.ips(eipA), map[string]string{"env": "prod"}, web)
		e.waitStatus("prod", "one IP per family", func(it []egressipv1.EgressIPStatusItem) bool { return hasExactly(it, e.ips(eipA)) })
		e.eventuallyAll("prod", "web1", egress)
	})

	t.Run("5-pod-churn", func(t *testing.T) {
		e.t = t
		p := e.createPod("prod", "web2", "node2", web)
		e.eventuallyAll("prod", "web2", egress)
		e.deletePod("prod", "web2")
		waitNoRowFor(t, e, "prod/web2")
		// A new pod reusing the same name (and perhaps the same IP) is served again.
		p2 := e.createPod("prod", "web2", "node1", web)
		e.eventuallyAll("prod", "web2", egress)
		t.Logf("pod IPs: first %v, second %v", p.IPs, p2.IPs)
		e.deletePod("prod", "web2")
		waitNoRowFor(t, e, "prod/web2")
		// An unselected pod created later stays on its node's IP.
		e.createPod("prod", "db2", "node1", map[string]string{"app": "db"})
		e.expectSources("prod", "db2", node1)
		e.deletePod("prod", "db2")
	})

	t.Run("6-namespace-relabelled-out", func(t *testing.T) {
		e.t = t
		e.kubectl("", "label", "namespace", "prod", "env=staging", "--overwrite")
		e.eventuallyAll("prod", "web1", node1)
		waitNoRowFor(t, e, "prod/web1")
		e.kubectl("", "label", "namespace", "prod", "env=prod", "--overwrite")
		e.eventuallyAll("prod", "web1", egress)
	})

	// In local gateway mode the node daemon's host state survives restarts: with the egress IPs (of every family)
	// held, each holder's daemon is restarted twice in a row (SIGTERM, then SIGKILL); each start syncs without an
	// error and leaves the host exactly as before: one copy of every address, rule and jump. The master is stopped
	// meanwhile, so that the health check does not move the IPs away while a daemon is down.
	if mode == gwmode.Local {
		t.Run("9-node-daemon-restarted-twice", func(t *testing.T) {
			e.t = t
			e.stopMaster("master-a", syscall.SIGTERM)
			defer func() {
				e.startMaster("master-a", "127.0.0.1:29101")
				e.eventuallyAll("prod", "web1", egress)
			}()
			items := e.getEgressIP("prod").Status.Items
			for _, it := range items {
				// An IP that moved off this node in an earlier case may still linger there (its rules kept for the
				// release linger); a restart ends that early. Compare once it is over.
				var notHeld []string
				for _, ip := range e.ips(eipA) {
					if holder(items, ip) != it.Node {
						notHeld = append(notHeld, ip)
					}
				}
				waitHostLacks(t, e, it.Node, notHeld...)
				before := e.hostSnapshot(it.Node, it.EgressIP)
				for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
					off := e.logSize("node-" + it.Node)
					e.stopNode(it.Node, sig)
					e.startNode(it.Node)
					e.waitNodeSynced(it.Node, off)
					if after := e.hostSnapshot(it.Node, it.EgressIP); after != before {
						t.Fatalf("%s after a restart (%s) holding %s:\n%s\nbefore:\n%s", it.Node, sig, it.EgressIP, after, before)
					}
				}
				t.Logf("%s holding %s: two restarts, host state unchanged:\n%s", it.Node, it.EgressIP, before)
			}
		})
	}

	// After an egress IP moves, the external host's neighbour entry for it points at the new holder (its node's
	// MAC in local mode, its gateway router's in shared mode) without the external host sending anything: the new
	// holder announced it (IPv4 gratuitous ARP, IPv6 unsolicited neighbour advertisement).
	t.Run("10-neighbour-entry-follows-a-move", func(t *testing.T) {
		e.t = t
		for _, f := range e.fams {
			ip := eipA[f]
			// A request makes the external host resolve the egress IP; its entry names the current holder.
			e.eventually("prod", "web1", netip.MustParseAddr(ip))
			from := holder(e.getEgressIP("prod").Status.Items, ip)
			if got := e.extNeighbour(ip); got != e.holderMAC(from) {
				t.Fatalf("external host's entry for %s is %q before the move, want %s's %s", ip, got, from, e.holderMAC(from))
			}
			e.labelAssignable(from, false)
			to := e.waitMovedOff(ip, from)
			want := e.holderMAC(to)
			start := time.Now()
			var got string
			if waitfor.Until(context.Background(), 5*time.Second, 50*time.Millisecond, func() (bool, error) {
				got = e.extNeighbour(ip)
				return got == want, nil
			}) != nil {
				t.Fatalf("IPv%d: 5s after %s moved %s -> %s, the external host's entry is %q, want %s (no announcement?)",
					f, ip, from, to, got, want)
			}
			t.Logf("IPv%d: %s moved %s -> %s; external host's entry updated %s after the status moved", f, ip, from, to,
				time.Since(start).Round(time.Millisecond))
			e.labelAssignable(from, true)
		}
		e.eventuallyAll("prod", "web1", egress)
	})

	t.Run("8-bad-input", func(t *testing.T) {
		e.t = t
		// In the last family of the cluster (IPv6 in dual-stack and IPv6-only clusters).
		last := e.fams[len(e.fams)-1]
		outside := map[int]string{4: "10.99.0.1", 6: "fd99::1"}[last]
		n2, err := e.c.Node("node2")
		if err != nil {
			t.Fatal(err)
		}
		n2f, _ := n2.Family(last)
		nodeIP := n2f.NodeIP.String()
		e.applyEgressIP("bad-subnet", []string{outside}, map[string]string{"env": "dev"}, nil)
		e.applyEgressIP("bad-node-ip", []string{nodeIP}, map[string]string{"env": "dev"}, nil)
		e.applyEgressIP("bad-taken", []string{eipA[last]}, map[string]string{"env": "dev"}, nil)
		for name, reason := range map[string]string{"bad-subnet": outside, "bad-node-ip": nodeIP, "bad-taken": eipA[last]} {
			// The Event is the signal: a sync reports what cannot be met only after it wrote the status it decided
			// (master.sync: writeStatus, then report), so the status read now is that sync's decision.
			waitEvent(t, e, name, reason)
			if items := e.getEgressIP(name).Status.Items; len(items) != 0 {
				t.Errorf("EgressIP %s should be unassigned, status %+v", name, items)
			}
			out := e.kubectl("", "get", "eip", name)
			if !strings.Contains(out, name) {
				t.Errorf("kubectl get eip %s:\n%s", name, out)
			}
		}
		// The good EgressIP keeps working.
		e.eventuallyAll("prod", "web1", egress)
		e.expectSources("dev", "web1", node1)
		for _, n := range []string{"bad-subnet", "bad-node-ip", "bad-taken"} {
			e.kubectl("", "delete", "eip", n)
		}
	})

	runOperatorCases(t, e, mode)

	t.Run("12-a-node-cannot-pull-egress-ips-to-itself", func(t *testing.T) {
		e.t = t
		if !ipv4Only(t, e) {
			return
		}
		eipA, eipB, egress := eipA[4], eipB[4], netip.MustParseAddr(eipA[4])
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
		if mode == gwmode.Local {
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
		// The cases before may leave primaryA unassigned for a moment (a node relabelled last gets it back): the
		// case starts from a holder.
		from := holder(e.waitStatus("prod", primaryA+" held", func(it []egressipv1.EgressIPStatusItem) bool {
			return holder(it, primaryA) != ""
		}), primaryA)
		others := slices.DeleteFunc(slices.Clone(e.assignable), func(n string) bool { return n == from })
		e.createPod("prod", "web4", "node2", web)
		e.eventuallyAll("prod", "web4", egress)
		e.stopMaster("master-a", syscall.SIGKILL)
		e.labelAssignable(from, false)
		defer e.labelAssignable(from, true)
		e.deletePod("prod", "web4")
		e.applyEgressIP("prod", e.ips(eipC), map[string]string{"env": "prod"}, web)
		e.startMaster("master-a", "127.0.0.1:29101")
		e.waitStatus("prod", "C off "+from, func(it []egressipv1.EgressIPStatusItem) bool {
			return hasExactly(it, e.ips(eipC)) && onDistinctNodes(it, others)
		})
		e.eventuallyAll("prod", "web1", e.addrs(eipC))
		e.eventuallyAll("prod", "web3", e.addrs(eipC))
		waitNoRowFor(t, e, "prod/web4")
		for _, table := range []string{"Logical_Router_Policy", "NAT"} {
			for _, r := range e.nbOwned(table) {
				stale := r["k8s.ovn.org/node"] == from
				for _, ip := range e.ips(eipA) {
					stale = stale || r["k8s.ovn.org/egress-ip"] == ip
				}
				if stale {
					t.Errorf("stale %s row after restart: %s", table, r)
				}
			}
		}
		if mode == gwmode.Local {
			waitHostClean(t, e, from, e.ips(eipA)...)
		}
	})

	t.Run("4-delete-egressip", func(t *testing.T) {
		e.t = t
		e.kubectl("", "delete", "eip", "prod")
		e.eventuallyAll("prod", "web1", node1)
		e.eventuallyAll("prod", "web3", e.nodeSources("node3"))
		if waitfor.Until(context.Background(), 10*time.Second, 100*time.Millisecond, func() (bool, error) {
			return e.nbRowsOfEgressIP("prod") == 0, nil
		}) != nil {
			t.Fatalf("rows of EgressIP prod remain in NB: %v %v", e.nbOwned("Logical_Router_Policy"), e.nbOwned("NAT"))
		}
		if mode == gwmode.Local {
			for _, n := range e.c.Nodes() {
				waitHostClean(t, e, n.Name, e.ips(eipA, eipB, eipC)...)
			}
		}
	})
}

// waitHostClean waits until node has no SNAT rule of ours and none of ips.
func waitHostClean(t *testing.T, e *env, node string, ips ...string) {
	t.Helper()
	var rules, addrs []string
	var err error
	if waitfor.Until(context.Background(), 10*time.Second, 100*time.Millisecond, func() (bool, error) {
		rules, addrs, err = e.hostEgressState(node, ips...)
		return err == nil && len(rules) == 0 && len(addrs) == 0, nil
	}) != nil {
		t.Fatalf("node %s still has SNAT rules %v and egress addresses %v (%v)", node, rules, addrs, err)
	}
}

// waitHostLacks waits until node has neither the addresses ips nor an SNAT rule to one of them (it may hold others).
func waitHostLacks(t *testing.T, e *env, node string, ips ...string) {
	t.Helper()
	var left, addrs []string
	var err error
	if waitfor.Until(context.Background(), 10*time.Second, 100*time.Millisecond, func() (bool, error) {
		var rules []string
		rules, addrs, err = e.hostEgressState(node, ips...)
		left = nil
		for _, r := range rules {
			for _, ip := range ips {
				if strings.HasSuffix(strings.TrimSpace(r), "--to-source "+ip) {
					left = append(left, r)
				}
			}
		}
		return err == nil && len(left) == 0 && len(addrs) == 0, nil
	}) != nil {
		t.Fatalf("node %s still has SNAT rules %v and addresses %v of %v (%v)", node, left, addrs, ips, err)
	}
}

// waitHostHas waits until node holds ip and has SNAT rules to it.
func waitHostHas(t *testing.T, e *env, eip, node, ip string) {
	t.Helper()
	var rules, addrs []string
	var err error
	if waitfor.Until(context.Background(), 10*time.Second, 100*time.Millisecond, func() (bool, error) {
		rules, addrs, err = e.hostEgressState(node, ip)
		return err == nil && len(addrs) == 1 && strings.Contains(strings.Join(rules, "\n"), "--to-source "+ip), nil
	}) != nil {
		// What the node was told, and what its daemon and the Events said: a status that moved
		// again, or a daemon that did not act on it.
		now := e.getEgressIP(eip)
		t.Logf("EgressIP %s now: status %+v; conditions %+v", eip, now.Status.Items, now.Status.Conditions)
		t.Logf("events:\n%s", e.kubectl("", "get", "events", "-A", "--sort-by=.lastTimestamp"))
		t.Fatalf("node %s: want %s with SNAT rules, have rules %v addresses %v (%v); the holder now: %s", node, ip, rules, addrs, err,
			holder(now.Status.Items, ip))
	}
}

// waitNoRowFor waits until no NB row of ours names pod (namespace/name).
func waitNoRowFor(t *testing.T, e *env, pod string) {
	t.Helper()
	var left []string
	if waitfor.Until(context.Background(), 10*time.Second, 100*time.Millisecond, func() (bool, error) {
		left = nil
		for _, table := range []string{"Logical_Router_Policy", "NAT"} {
			for _, r := range e.nbOwned(table) {
				if r["k8s.ovn.org/pod"] == pod {
					left = append(left, fmt.Sprint(r))
				}
			}
		}
		return len(left) == 0, nil
	}) != nil {
		t.Fatalf("NB rows for pod %s remain: %v", pod, left)
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
	var seen []string
	if waitfor.Until(context.Background(), 15*time.Second, 200*time.Millisecond, func() (bool, error) {
		evs, err := e.c.Client().CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name,
		})
		if err != nil {
			return false, nil
		}
		seen = seen[:0]
		for _, ev := range evs.Items {
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Type == corev1.EventTypeWarning && strings.Contains(ev.Message, substr) {
				t.Logf("%s %s: event %s: %s", kind, name, ev.Reason, ev.Message)
				return true, nil
			}
		}
		return false, nil
	}) == nil {
		return
	}
	t.Fatalf("no Warning Event on %s %s mentioning %q; events: %v", kind, name, substr, seen)
}
