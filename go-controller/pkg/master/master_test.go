package master

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

var (
	prodNS = map[string]string{"env": "prod"}
	web    = map[string]string{"app": "web"}
)

// rr is the expected reroute line of a pod: "<eip> ip4.src == <podIP> [<nexthops>]".
func rr(eip, podIP string, nexthops ...string) string {
	slices.Sort(nexthops)
	return fmt.Sprintf("%s ip4.src == %s %v", eip, podIP, nexthops)
}

// sn is the expected SNAT line: on GR_<node>, egress IP <- pod IP.
func sn(node, egressIP, podIP, eip string) string {
	return fmt.Sprintf("GR_%s %s <- %s (%s)", node, egressIP, podIP, eip)
}

// cluster creates 3 nodes (node1, node2 egress-assignable), namespaces prod and
// dev, pods prod/web1 (node1), prod/web2 (node3), prod/db, dev/web3, and returns
// the env with the master running.
func cluster(t *testing.T, start func(testing.TB) *nbserver.Server, mode gwmode.Mode) *env {
	return populate(newEnv(t, start, mode))
}

// populate creates the objects of cluster and starts the master.
func populate(e *env) *env {
	populateObjects(e)
	e.start()
	return e
}

// populateObjects creates the objects of cluster.
func populateObjects(e *env) {
	e.create(node(1, true))
	e.create(node(2, true))
	e.create(node(3, false))
	e.create(namespace("prod", prodNS))
	e.create(namespace("dev", map[string]string{"env": "dev"}))
	e.create(pod("prod", "web1", "10.244.1.5", web))
	e.create(pod("prod", "web2", "10.244.3.6", web))
	e.create(pod("prod", "db", "10.244.2.7", map[string]string{"app": "db"}))
	e.create(pod("dev", "web3", "10.244.2.8", web))
}

// TestAssignmentAcrossNodes: 3 nodes, 2 assignable, an EgressIP with 2 IPs: one
// IP per assignable node, ECMP reroute for the served pods only, SNAT on both
// gateway routers, nothing on node3's, foreign rows untouched.
func TestAssignmentAcrossNodes(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		foreign := e.foreignRows()
		e.createProdOnNodes12()
		e.expectProdRowsOnNodes12("two holders")
		e.eventually("address sets and no-reroute policies", func() error {
			want := []string{
				`address-set egressip_node_ips_v4 [172.18.0.11 172.18.0.12 172.18.0.13] owner-type=Cluster,rule=node-ips,ip-family=ip4`,
				`address-set egressip_served_pods_v4 [10.244.1.5 10.244.3.6] owner-type=Cluster,rule=served-pods,ip-family=ip4`,
				`policy ovn_cluster_router 102 allow "ip4.src == $egressip_served_pods_v4 && ip4.dst == $egressip_node_ips_v4" owner-type=Cluster,rule=pod-to-node,ip-family=ip4`,
				`policy ovn_cluster_router 102 allow "ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16" owner-type=Cluster,rule=pod-to-pod,ip-family=ip4`,
				`policy ovn_cluster_router 102 allow "ip4.src == 10.244.0.0/16 && ip4.dst == 100.64.0.0/16" owner-type=Cluster,rule=pod-to-join,ip-family=ip4`,
			}
			got := e.ours()
			for _, w := range want {
				if !slices.Contains(got, w) {
					return fmt.Errorf("missing %s in\n%v", w, got)
				}
			}
			return nil
		})
		if got := e.foreignRows(); !slices.Equal(got, foreign) {
			t.Errorf("foreign rows changed:\n got  %v\n want %v", got, foreign)
		}
		e.expectMetric(2, metricNumEgressIPs, "assigned")
		e.expectMetric(0, metricNumEgressIPs, "unassigned")
	})
}

// TestUnlabelMovesIP: unlabelling the holder moves the IP; status and NB follow
// (new SNAT, next hop switched, old SNAT gone); the rebalance counter moves.
func TestUnlabelMovesIP(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.expectRows("on node1",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2")},
			[]string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")})
		e.updateNode("node1", unlabelAssignable)
		e.expectStatus("eip-prod", "172.18.0.33@node2")
		e.expectRows("moved to node2",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.3"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.3")},
			[]string{sn("node2", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node2", "172.18.0.33", "10.244.3.6", "eip-prod")})
		e.expectMetric(1, metricRebalanceTotal)
		if got := e.metric(metricAssignLatency); got < 2 {
			t.Errorf("%s has %v samples, want at least 2 (first assignment, move)", metricAssignLatency, got)
		}
	})
}

// TestNodeDeletedAndNotReadyAndUnreachable: the IP leaves a deleted node, a
// NotReady node and an unreachable node.
func TestNodeLost(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		e.create(node(4, true)) // no gateway router in NB for node4: GR_node4 rows are skipped until it exists
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")

		e.reach.set("node1", false)
		e.expectStatus("eip-prod", "172.18.0.33@node2")
		e.expectRows("node1 unreachable",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.3"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.3")},
			[]string{sn("node2", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node2", "172.18.0.33", "10.244.3.6", "eip-prod")})
		e.expectMetric(1, metricUnreachableTotal)

		e.updateNode("node2", func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse })
		e.expectStatus("eip-prod", "172.18.0.33@node4")

		e.reach.set("node1", true) // node1 rejoins the pool; the IP does not move back
		e.settle()
		e.deleteNode("node4")
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.expectRows("back on node1",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2")},
			[]string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")})
	})
}

// TestSpecEdits: an IP removed from the spec is unassigned and its rows go; the
// EgressIP deleted takes every row of ours with it, shared rows included.
func TestSpecEditsAndDelete(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		foreign := e.foreignRows()
		e.createProdOnNodes12()
		e.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) { o.Spec.EgressIPs = []string{"172.18.0.44"} })
		e.expectStatus("eip-prod", "172.18.0.44@node2")
		e.expectRows("one IP left",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.3"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.3")},
			[]string{sn("node2", "172.18.0.44", "10.244.1.5", "eip-prod"), sn("node2", "172.18.0.44", "10.244.3.6", "eip-prod")})

		e.deleteEgressIP("eip-prod")
		e.eventually("no row of ours", func() error {
			if got := e.ours(); len(got) != 0 {
				return fmt.Errorf("rows left: %v", got)
			}
			return nil
		})
		if got := e.foreignRows(); !slices.Equal(got, foreign) {
			t.Errorf("foreign rows changed:\n got  %v\n want %v", got, foreign)
		}
	})
}

// TestNamespaceAndPodChurn: namespace relabelled out and back; pods added,
// deleted, changing IP, completing; hostNetwork pods never served.
func TestNamespaceAndPodChurn(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		both := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2")}
		bothSNAT := []string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")}
		e.expectRows("served", both, bothSNAT)

		e.updateNamespace("prod", func(n *corev1.Namespace) { n.Labels["env"] = "staging" })
		e.expectRows("namespace out", map[string]string{}, nil)
		e.updateNamespace("prod", func(n *corev1.Namespace) { n.Labels["env"] = "prod" })
		e.expectRows("namespace back", both, bothSNAT)

		e.create(pod("prod", "web4", "10.244.2.9", web))
		hostnet := pod("prod", "hostnet", "172.18.0.12", web)
		hostnet.Spec.HostNetwork = true
		e.create(hostnet)
		e.create(pod("prod", "pending", "", web))
		withWeb4 := map[string]string{"prod/web1": both["prod/web1"], "prod/web2": both["prod/web2"], "prod/web4": rr("eip-prod", "10.244.2.9", "100.64.0.2")}
		e.expectRows("pod added", withWeb4, append(slices.Clone(bothSNAT), sn("node1", "172.18.0.33", "10.244.2.9", "eip-prod")))

		e.updatePod("prod", "web4", func(p *corev1.Pod) {
			p.Status.PodIP, p.Status.PodIPs = "10.244.2.10", []corev1.PodIP{{IP: "10.244.2.10"}}
		})
		withWeb4["prod/web4"] = rr("eip-prod", "10.244.2.10", "100.64.0.2")
		e.expectRows("pod IP changed", withWeb4, append(slices.Clone(bothSNAT), sn("node1", "172.18.0.33", "10.244.2.10", "eip-prod")))

		e.updatePod("prod", "web4", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded })
		e.expectRows("pod completed", both, bothSNAT)

		e.updatePod("prod", "web1", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "other"} })
		e.expectRows("pod relabelled out", map[string]string{"prod/web2": both["prod/web2"]}, bothSNAT[1:])

		e.deletePod("prod", "web2")
		e.expectRows("pod deleted", map[string]string{}, nil)
	})
}

// TestTwoEgressIPsOnePod: a pod matched by two EgressIPs is served by the older
// one; when it goes, the other takes over.
func TestTwoEgressIPsOnePod(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		// Both created while the master is stopped, so that one sync assigns them
		// (older first: eip-a gets node1). With the master running, a sync between
		// the two creates would rightly give node1 to eip-b (seen under load).
		e.stop()
		e.create(egressIP("eip-b", 5, []string{"172.18.0.44"}, prodNS, nil))
		e.create(egressIP("eip-a", 1, []string{"172.18.0.33"}, prodNS, web))
		e.start()
		e.expectStatus("eip-a", "172.18.0.33@node1")
		e.expectStatus("eip-b", "172.18.0.44@node2")
		e.expectRows("web pods by the older eip-a, db by eip-b",
			map[string]string{
				"prod/web1": rr("eip-a", "10.244.1.5", "100.64.0.2"),
				"prod/web2": rr("eip-a", "10.244.3.6", "100.64.0.2"),
				"prod/db":   rr("eip-b", "10.244.2.7", "100.64.0.3"),
			},
			[]string{
				sn("node1", "172.18.0.33", "10.244.1.5", "eip-a"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-a"),
				sn("node2", "172.18.0.44", "10.244.2.7", "eip-b"),
			})
		e.deleteEgressIP("eip-a")
		e.expectRows("eip-b took over",
			map[string]string{
				"prod/web1": rr("eip-b", "10.244.1.5", "100.64.0.3"),
				"prod/web2": rr("eip-b", "10.244.3.6", "100.64.0.3"),
				"prod/db":   rr("eip-b", "10.244.2.7", "100.64.0.3"),
			},
			[]string{
				sn("node2", "172.18.0.44", "10.244.1.5", "eip-b"), sn("node2", "172.18.0.44", "10.244.2.7", "eip-b"),
				sn("node2", "172.18.0.44", "10.244.3.6", "eip-b"),
			})
	})
}

// TestBadInput: each request that cannot be met gives a Warning Event naming the
// IP and the reason, and nothing else changes: no NB write, the good EgressIP's
// status and rows intact, the master alive.
func TestBadInput(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Shared)
		e.create(egressIP("good", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("good", "172.18.0.33@node1")
		goodRows := map[string]string{"prod/web1": rr("good", "10.244.1.5", "100.64.0.2"), "prod/web2": rr("good", "10.244.3.6", "100.64.0.2")}
		goodSNAT := []string{sn("node1", "172.18.0.33", "10.244.1.5", "good"), sn("node1", "172.18.0.33", "10.244.3.6", "good")}
		e.expectRows("good", goodRows, goodSNAT)
		before := e.ours()

		devNS := map[string]string{"env": "dev"}
		cases := []struct {
			name, reason, ip string
			pre, eip         *egressipv1.EgressIP
		}{
			{name: "no node's subnet", reason: "NoMatchingNodeFound", ip: "192.168.50.5",
				eip: egressIP("bad-subnet", 10, []string{"192.168.50.5"}, devNS, nil)},
			{name: "node IP", reason: "EgressIPConflict", ip: "172.18.0.12",
				eip: egressIP("bad-nodeip", 11, []string{"172.18.0.12"}, devNS, nil)},
			{name: "IP of another EgressIP", reason: "EgressIPConflict", ip: "172.18.0.33",
				eip: egressIP("bad-taken", 12, []string{"172.18.0.33"}, devNS, nil)},
			{name: "same IP written another way", reason: "EgressIPConflict", ip: "fc00:0::33",
				pre: egressIP("v6-first", 13, []string{"fc00::33"}, devNS, nil),
				eip: egressIP("bad-spelling", 14, []string{"fc00:0::33"}, devNS, nil)},
			{name: "IPv4-mapped", reason: "UnsupportedRequest", ip: "::ffff:ac12:21",
				eip: egressIP("bad-mapped", 15, []string{"::ffff:ac12:21"}, devNS, nil)},
			{name: "not an IP", reason: "InvalidEgressIP", ip: "172.18.0.300",
				eip: egressIP("bad-parse", 16, []string{"172.18.0.300"}, devNS, nil)},
			{name: "more IPs than nodes", reason: "UnassignedRequest", ip: "172.18.0.57",
				eip: egressIP("bad-toomany", 17, []string{"172.18.0.55", "172.18.0.56", "172.18.0.57"}, map[string]string{"none": "x"}, nil)},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				if tc.pre != nil {
					e.create(tc.pre)
					e.expectEvent("NoMatchingNodeFound", tc.pre.Name)
				}
				txns := e.metric(metricNBTransactions)
				e.create(tc.eip)
				e.expectEvent(tc.reason, tc.ip, tc.eip.Name)
				e.settle()
				e.expectStatus("good", "172.18.0.33@node1")
				if got := e.ours(); !slices.Equal(got, before) {
					t.Errorf("NB rows changed:\n got  %v\n want %v", got, before)
				}
				if got := e.metric(metricNBTransactions); got != txns {
					t.Errorf("%v NB transactions, want none", got-txns)
				}
			})
		}
		// A broken selector serves nothing and says so.
		bad := egressIP("bad-selector", 20, []string{"172.18.0.60"}, nil, nil)
		bad.Spec.NamespaceSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Sometimes"}}}
		e.create(bad)
		e.expectEvent(selection.ReasonInvalidSelector, "spec.namespaceSelector")
		e.expectRows("good intact", goodRows, goodSNAT)
	})
}

// ready sets the node's egress-ips-ready annotation (what its daemon publishes in
// local gateway mode once the host is programmed).
func ready(ips ...string) func(*corev1.Node) {
	return func(n *corev1.Node) {
		set := map[netip.Addr]bool{}
		for _, ip := range ips {
			set[netip.MustParseAddr(ip)] = true
		}
		n.Annotations[annotations.EgressIPsReady] = annotations.FormatEgressIPsReady(set)
	}
}

// TestLocalGatewayMode: reroute to the management port IP of holders that report
// the IP ready, no SNAT rows.
func TestLocalGatewayMode(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Local)
		// Every node's daemon takes part in the readiness handshake, nothing ready yet.
		for _, n := range []string{"node1", "node2", "node3"} {
			e.updateNode(n, ready())
		}
		e.createProdOnNodes12()
		e.settle()
		e.expectRows("no holder ready yet: no reroute", map[string]string{}, nil)

		e.updateNode("node1", ready("172.18.0.33"))
		e.expectRows("node1 ready",
			map[string]string{
				"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"),
				"prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2"),
			}, nil)
		e.updateNode("node2", ready("172.18.0.44"))
		e.expectRows("both ready",
			map[string]string{
				"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2", "10.244.2.2"),
				"prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2", "10.244.2.2"),
			}, nil)
	})
}

// TestLocalGatewayMakeBeforeBreak: when the IP moves, the reroute keeps the old
// next hop until the new holder reports the IP ready, then switches.
func TestLocalGatewayMakeBeforeBreak(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Local)
		for _, n := range []string{"node2", "node3"} {
			e.updateNode(n, ready())
		}
		e.updateNode("node1", ready("172.18.0.33"))
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		onNode1 := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2")}
		e.expectRows("on node1", onNode1, nil)

		e.updateNode("node1", unlabelAssignable)
		e.expectStatus("eip-prod", "172.18.0.33@node2")
		e.settle()
		e.expectRows("node2 not ready: still via node1", onNode1, nil)

		e.updateNode("node2", ready("172.18.0.33"))
		e.expectRows("switched to node2",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.2.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.2.2")}, nil)
	})
}

// daemon sets the node's egress-daemon-id annotation (the daemon run that wrote its facts).
func daemon(id string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Annotations[annotations.EgressDaemonID] = id }
}

// TestLocalGatewayRestartedDaemon: a holder's node daemon restarts (a DaemonSet roll) and its IP moves away
// meanwhile. The new daemon answers probes before the master's cache holds what it published: the cached
// annotations are the previous daemon's, still listing the IP ready. The master must not reroute to it on that
// list (the new daemon no longer SNATs the IP); once the cache holds the new daemon's facts, they decide.
func TestLocalGatewayRestartedDaemon(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Local)
		for _, n := range []string{"node2", "node3"} {
			e.updateNode(n, ready())
		}
		e.updateNode("node1", ready("172.18.0.33"), daemon("d1"))
		e.reach.answer("node1", "d1")
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		viaNode1 := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2")}
		e.expectRows("on node1, its daemon d1 probed and annotated", viaNode1, nil)

		e.reach.set("node1", false) // the daemon is down
		e.expectStatus("eip-prod", "172.18.0.33@node2")
		e.settle()
		// The new daemon answers; its first sync dropped the IP, but the master's cache still has d1's annotations.
		before := e.syncs.Load()
		e.reach.answer("node1", "d2")
		e.waitSyncs(before + 1)
		e.settle()
		// Read from the database itself (the test's cache may lag): the sync that saw d2's answer has committed.
		if nh := e.policyNexthopsInDB(); slices.Contains(nh, "10.244.1.2") {
			t.Errorf("after node1's new daemon d2 answered, with d1's ready list in the cache: reroute next hops %v include node1 (10.244.1.2)", nh)
		}
		e.expectRows("node1 answers as d2, cache still d1's ready list: not a next hop", map[string]string{}, nil)

		e.updateNode("node1", ready(), daemon("d2"))
		e.settle()
		e.expectRows("d2's facts arrived: nothing ready on node1", map[string]string{}, nil)
		e.updateNode("node2", ready("172.18.0.33"))
		e.expectRows("node2 ready",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.2.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.2.2")}, nil)
	})
}

// TestLocalGatewayAbsentReadyList: a holder whose ready list is absent (new node,
// restarting daemon, or its write not in the master's cache yet) or unparsable is
// not ready: no reroute goes to it until it lists the IP.
func TestLocalGatewayAbsentReadyList(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Local) // no node has the ready annotation
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.settle()
		e.expectRows("holder without a ready list: never rerouted to", map[string]string{}, nil)

		e.updateNode("node1", func(n *corev1.Node) { n.Annotations[annotations.EgressIPsReady] = `["172.18.0.33"` }) // truncated JSON
		e.settle()
		e.expectRows("holder with an unparsable ready list: not rerouted to", map[string]string{}, nil)

		e.updateNode("node1", ready("172.18.0.33"))
		e.expectRows("holder lists the IP ready",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2")}, nil)
	})
}

// TestLocalGatewayLingerExpires: when the IP moves to a node that never reports it
// ready, the pods stay rerouted to the previous holder while it publishes that it
// still SNATs the IP (egress-ips-lingering, with the end), never past the end it
// published, and a master restarted during the linger reads the same end (it has
// no clock of its own). Then their reroutes go (a sync runs at the end, with no
// event). While the rows reroute to node1, node1 is told so (egress-ips-rerouted).
func TestLocalGatewayLingerExpires(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := newEnv(t, start, gwmode.Local)
		populateObjects(e)
		e.start()
		e.updateNode("node2", ready())
		e.updateNode("node1", ready("172.18.0.33"))
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		viaNode1 := map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2")}
		e.expectRows("on node1", viaNode1, nil)
		e.expectRerouted("node1", `["172.18.0.33"]`)

		until := time.Now().Add(4 * time.Second)
		e.updateNode("node1", unlabelAssignable)
		e.updateNode("node1", ready())
		e.updateNode("node1", lingering(map[string]time.Time{"172.18.0.33": until}))
		e.expectStatus("eip-prod", "172.18.0.33@node2")
		e.settle()
		e.expectRows("node2 not ready: via node1 while it lingers", viaNode1, nil)
		e.stop()
		e.start()
		e.settle()
		e.expectRows("restarted master: via node1 while it lingers", viaNode1, nil)
		if time.Now().After(until) {
			t.Fatalf("the linger ended before the restarted master was seen rerouting to node1 (test too slow)")
		}
		e.expectRerouted("node1", `["172.18.0.33"]`)
		e.expectRows("node2 never ready, linger over: no reroute", map[string]string{}, nil)
		if now := time.Now(); now.Before(until) {
			t.Errorf("the reroutes went %v before the end node1 published", until.Sub(now))
		}
		e.expectRerouted("node1", `[]`)
	})
}

// TestLocalGatewayLingerFactsUnparsable: a node listing a lingering IP without a
// parsable end is not a next hop for it.
func TestLocalGatewayLingerFactsUnparsable(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := cluster(t, start, gwmode.Local)
		e.updateNode("node2", ready())
		e.updateNode("node1", ready("172.18.0.33"))
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.expectRows("on node1", map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2")}, nil)
		e.updateNode("node1", unlabelAssignable)
		e.updateNode("node1", func(n *corev1.Node) {
			n.Annotations[annotations.EgressIPsReady] = `[]`
			n.Annotations[annotations.EgressIPsLingering] = `["172.18.0.33"]`
			n.Annotations[annotations.EgressIPsLingeringUntil] = `{"172.18.0.33":"later"}`
		})
		e.expectStatus("eip-prod", "172.18.0.33@node2")
		e.expectRows("lingering without a parsable end: not a next hop", map[string]string{}, nil)
	})
}

// lingering sets what the node daemon publishes about the egress IPs it released
// and still SNATs, with their ends.
func lingering(until map[string]time.Time) func(*corev1.Node) {
	return func(n *corev1.Node) {
		m := map[netip.Addr]time.Time{}
		for ip, t := range until {
			m[netip.MustParseAddr(ip)] = t
		}
		n.Annotations[annotations.EgressIPsLingering], n.Annotations[annotations.EgressIPsLingeringUntil] = annotations.FormatLingering(m)
	}
}

// expectRerouted waits until the node's egress-ips-rerouted (written by the master) is want.
func (e *env) expectRerouted(node, want string) {
	e.t.Helper()
	e.eventually(node+" told "+want, func() error {
		n, err := e.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got := n.Annotations[annotations.EgressIPsRerouted]; got != want {
			return fmt.Errorf("%s is %q", annotations.EgressIPsRerouted, got)
		}
		return nil
	})
}

// TestDualStack: an EgressIP with an IPv4 and an IPv6 address (on two nodes, one
// IP per node) reroutes each family of a dual-stack pod to the holder of that
// family's egress IP, with SNAT of that family there.
func TestDualStack(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := newEnv(t, start, gwmode.Shared)
		for i := 1; i <= 2; i++ {
			n := node(i, true)
			n.Annotations[annotations.PrimaryIfAddr] = fmt.Sprintf(`{"ipv4":"172.18.0.1%d/16","ipv6":"fc00::1%d/64"}`, i, i)
			n.Annotations[annotations.GatewayRouterLRPIfAddr] = fmt.Sprintf(`{"ipv4":"100.64.0.%d/16","ipv6":"fd98::%d/64"}`, i+1, i+1)
			n.Annotations[annotations.NodeSubnets] = fmt.Sprintf(`{"default":["10.244.%d.0/24","fd00:10:244:%d::/64"]}`, i, i)
			e.create(n)
		}
		e.create(namespace("prod", prodNS))
		p := pod("prod", "web1", "10.244.1.5", web)
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00:10:244:1::5"})
		e.create(p)
		params := e.params()
		params.ClusterSubnets = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:10:244::/48")}
		params.JoinSubnets = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16"), netip.MustParsePrefix("fd98::/64")}
		e.startWith(params)

		e.create(egressIP("eip-ds", 0, []string{"172.18.0.33", "fc00::33"}, prodNS, web))
		e.expectStatus("eip-ds", "172.18.0.33@node1", "fc00::33@node2")
		e.eventually("dual-stack rows", func() error {
			got := e.ours()
			for _, w := range []string{
				`policy ovn_cluster_router 100 reroute "ip4.src == 10.244.1.5" nexthops=[100.64.0.2] owner-type=EgressIP,name=eip-ds,rule=reroute,ip-family=ip4,pod=prod/web1`,
				`policy ovn_cluster_router 100 reroute "ip6.src == fd00:10:244:1::5" nexthops=[fd98::3] owner-type=EgressIP,name=eip-ds,rule=reroute,ip-family=ip6,pod=prod/web1`,
				`nat GR_node1 snat 172.18.0.33 <- 10.244.1.5 owner-type=EgressIP,name=eip-ds,rule=snat,ip-family=ip4,pod=prod/web1,egress-ip=172.18.0.33`,
				`nat GR_node2 snat fc00::33 <- fd00:10:244:1::5 owner-type=EgressIP,name=eip-ds,rule=snat,ip-family=ip6,pod=prod/web1,egress-ip=fc00::33`,
				`policy ovn_cluster_router 102 allow "ip6.src == fd00:10:244::/48 && ip6.dst == fd98::/64" owner-type=Cluster,rule=pod-to-join,ip-family=ip6`,
				`address-set egressip_served_pods_v6 [fd00:10:244:1::5] owner-type=Cluster,rule=served-pods,ip-family=ip6`,
			} {
				if !slices.Contains(got, w) {
					return fmt.Errorf("missing\n  %s\nin\n  %s", w, strings.Join(got, "\n  "))
				}
			}
			if len(got) != 14 { // 2 reroutes, 2 SNAT, 3+3 no-reroute, 2+2 sets
				return fmt.Errorf("%d rows, want 14:\n  %s", len(got), strings.Join(got, "\n  "))
			}
			return nil
		})
	})
}
