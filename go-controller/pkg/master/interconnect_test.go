package master

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// icNode is node(i) as the interconnect layout describes it: node-id i+1 (so its gateway router join IP,
// derived, is 100.64.0.(i+1), as node() has it) and transit switch IP 100.88.0.(i+1); the deprecated join IP
// annotation is gone.
func icNode(i int, assignable bool) *corev1.Node {
	n := node(i, assignable)
	delete(n.Annotations, annotations.GatewayRouterLRPIfAddr)
	n.Annotations[annotations.NodeID] = fmt.Sprint(i + 1)
	n.Annotations[annotations.NodeTransitSwitchPortIfAddr] = fmt.Sprintf(`{"ipv4":"100.88.0.%d/16"}`, i+1)
	n.Annotations[annotations.NodeChassisID] = fmt.Sprintf("chassis-%d", i)
	n.Annotations[annotations.NodeEncapIPs] = fmt.Sprintf(`["172.18.0.1%d"]`, i)
	return n
}

// icEnv is a cluster in the interconnect layout: a real kube-apiserver, a cluster manager (no NB) and, per node,
// a zone controller with an NB database of its own (real ovsdb-servers).
type icEnv struct {
	cm    *env
	zones map[string]*env
}

func newICEnv(t *testing.T, mode gwmode.Mode) *icEnv {
	cm := newAPIServerEnv(t, nbserver.Start, mode)
	ic := &icEnv{cm: cm, zones: map[string]*env{}}
	for i := 1; i <= 3; i++ {
		z := &env{t: t, api: cm.api, kube: cm.kube, eip: cm.eip}
		z.init(nbserver.Start, mode)
		ic.zones[fmt.Sprintf("node%d", i)] = z
	}
	return ic
}

func (ic *icEnv) startCM() {
	p := ic.cm.params()
	p.Role, p.NBAddress = RoleClusterManager, ""
	ic.cm.startWith(p)
}

func (ic *icEnv) startZone(name string, linger time.Duration) {
	z := ic.zones[name]
	p := z.params()
	p.Role, p.Zone, p.ReleaseLinger = RoleZone, name, linger
	z.startWith(p)
}

// createProd creates node1 (egress-assignable), node2 (egress-assignable when node2Assignable) and node3, namespace
// prod and pods.
func (ic *icEnv) createProd(node2Assignable bool, pods ...*corev1.Pod) {
	cm := ic.cm
	cm.create(icNode(1, true))
	cm.create(icNode(2, node2Assignable))
	cm.create(icNode(3, false))
	cm.create(namespace("prod", prodNS))
	for _, p := range pods {
		cm.create(p)
	}
}

// web2OnNode3 is createProd with node2 not egress-assignable and prod's pod web2 on node3 (10.244.3.6).
func (ic *icEnv) web2OnNode3() {
	ic.createProd(false, icPod("prod", "web2", "10.244.3.6", "node3", web))
}

func icPod(ns, name, ip, node string, labels map[string]string) *corev1.Pod {
	p := pod(ns, name, ip, labels)
	p.Spec.NodeName = node
	return p
}

// startWebPods creates node1 and node2 (egress-assignable) and node3, namespace prod with web1 on node1 (10.244.1.5),
// web2 on node3 (10.244.3.6) and extra, then starts the cluster manager and the three zone controllers.
func (ic *icEnv) startWebPods(linger time.Duration, extra ...*corev1.Pod) {
	ic.createProd(true, append([]*corev1.Pod{icPod("prod", "web1", "10.244.1.5", "node1", web),
		icPod("prod", "web2", "10.244.3.6", "node3", web)}, extra...)...)
	ic.startCM()
	for _, name := range []string{"node1", "node2", "node3"} {
		ic.startZone(name, linger)
	}
}

// annotation reads one annotation of a Node.
func (ic *icEnv) annotation(node, key string) string {
	n, err := ic.cm.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		ic.cm.t.Fatal(err)
	}
	return n.Annotations[key]
}

// TestInterconnect: a cluster manager and three zone controllers, each zone with its own NB. The holder's zone
// SNATs every pod its IP serves (its own and other zones'), each pod's zone reroutes it toward the holder (the
// join IP derived from node-id when local, the transit switch IP when not). A move is make-before-break across
// zones: a pod's zone reroutes to the new holder only once the new holder's zone lists the IP as SNAT-ready,
// and the old holder keeps its SNAT rows while it lingers. A stopped zone controller keeps its rows and converges
// when it starts again. The cluster manager writes no NB row, and no zone writes status.
func TestInterconnect(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and four ovsdb-servers")
	}
	ic := newICEnv(t, gwmode.Shared)
	cm := ic.cm
	const linger = 1500 * time.Millisecond
	ic.startWebPods(linger, icPod("prod", "db", "10.244.2.7", "node2", map[string]string{"app": "db"}))

	cm.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	cm.expectStatus("eip-prod", "172.18.0.33@node1")
	z1, z2, z3 := ic.zones["node1"], ic.zones["node2"], ic.zones["node3"]
	z1.expectRows("holder zone: both pods to its own gateway router, SNAT for both",
		map[string]string{
			"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"),
			"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2"),
		},
		[]string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")})
	z3.expectRows("pod zone: its pod to the holder's transit switch IP, no NAT",
		map[string]string{"prod/web2": rr("eip-prod", "10.244.3.6", "100.88.0.2")}, nil)
	z2.expectRows("a zone neither holding nor running a served pod", map[string]string{}, nil)
	cm.eventually("node1 lists the IP SNAT-ready", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsSNATReady); got != `["172.18.0.33"]` {
			return fmt.Errorf("%s = %q", annotations.EgressIPsSNATReady, got)
		}
		return nil
	})
	cm.eventually("Ready condition once the holder's zone has programmed it", func() error {
		e, err := cm.eip.K8sV1().EgressIPs().Get(context.Background(), "eip-prod", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range e.Status.Conditions {
			if c.Type == "Ready" && c.Status == metav1.ConditionTrue {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", e.Status.Conditions)
	})

	// Explain reads every zone's NB and compares each with what its zone controller computes.
	rep := ic.explain("eip-prod")
	if len(rep.NB.Missing)+len(rep.NB.Extra) != 0 || len(rep.NB.Present) != 5 {
		t.Errorf("explain: present %v, missing %v, extra %v; want the 5 rows of zones node1 and node3 present", rep.NB.Present, rep.NB.Missing, rep.NB.Extra)
	}
	for _, want := range []string{"zone node1: nat GR_node1 snat 172.18.0.33 <- 10.244.3.6", `zone node3: policy ovn_cluster_router 100 reroute "ip4.src == 10.244.3.6" nexthops=[100.88.0.2]`} {
		if !strings.Contains(strings.Join(rep.NB.Present, "\n"), want) {
			t.Errorf("explain: no row %q among %v", want, rep.NB.Present)
		}
	}
	if rep.Computed == nil || rep.Computed.Status != metav1.ConditionTrue {
		t.Errorf("explain: computed Ready %+v, want True", rep.Computed)
	}

	// The move, with the new holder's zone controller down: no zone may reroute to node2 before node2's zone has
	// programmed the IP. Meanwhile node3's pod stays on node1 while node1 lingers, then leaves without reroute.
	z2.stop()
	cm.updateNode("node1", unlabelAssignable)
	cm.expectStatus("eip-prod", "172.18.0.33@node2")
	lingered := false
	cm.eventually("node1's linger ends; node3's pod is not rerouted meanwhile to node2", func() error {
		got, ok := z3.reroutes()["prod/web2"]
		if strings.Contains(got, "100.88.0.3") {
			t.Fatalf("zone node3 reroutes to node2 (%s), whose zone has programmed nothing", got)
		}
		if got == rr("eip-prod", "10.244.3.6", "100.88.0.2") && ic.annotation("node1", annotations.EgressIPsLingering) == `["172.18.0.33"]` {
			lingered = true
		}
		if ok {
			return fmt.Errorf("web2: %s", got)
		}
		return nil
	})
	if !lingered {
		t.Error("node3's pod was never seen rerouted to node1 while node1 listed the IP as lingering")
	}
	ic.startZone("node2", linger)
	cm.eventually("node3's pod moves to node2 once its zone has the SNAT", func() error {
		got := z3.reroutes()["prod/web2"]
		if !strings.Contains(got, "100.88.0.3") {
			return fmt.Errorf("web2: %s", got)
		}
		if !strings.Contains(strings.Join(z2.snats(), ","), sn("node2", "172.18.0.33", "10.244.3.6", "eip-prod")) {
			t.Fatalf("zone node3 reroutes to node2 (%s) before node2's zone has the SNAT: %v", got, z2.snats())
		}
		return nil
	})
	z1.expectRows("old holder's zone: its pod follows to node2; its SNAT rows gone once the linger ends",
		map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.88.0.3")}, nil)
	// The list follows the rows: the sync that deletes them stops listing the IP after its commit.
	cm.eventually("node1 lists no lingering IP once its rows went", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsLingering); got != "[]" {
			return fmt.Errorf("%s = %q", annotations.EgressIPsLingering, got)
		}
		return nil
	})
	z2.expectRows("new holder's zone",
		map[string]string{
			"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.3"),
			"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.3"),
		},
		[]string{sn("node2", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node2", "172.18.0.33", "10.244.3.6", "eip-prod")})

	// Zone node3's controller is down while the IP moves back to node1: its rows stay as they were (its pod
	// keeps leaving through node2, which lingers), and it converges when it starts.
	z3.stop()
	cm.updateNode("node1", labelAssignable)
	cm.updateNode("node2", unlabelAssignable)
	cm.expectStatus("eip-prod", "172.18.0.33@node1")
	z1.expectRows("node1 holds it again", map[string]string{
		"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2"),
		"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2"),
	}, []string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")})
	if got := z3.reroutes()["prod/web2"]; got != rr("eip-prod", "10.244.3.6", "100.88.0.3") {
		t.Errorf("stopped zone's row changed: %s", got)
	}
	ic.startZone("node3", linger)
	z3.expectRows("restarted zone converged", map[string]string{"prod/web2": rr("eip-prod", "10.244.3.6", "100.88.0.2")}, nil)

	// A labelled node without node-id / transit switch address is not given the IP.
	bad := icNode(4, true)
	delete(bad.Annotations, annotations.NodeID)
	cm.create(bad)
	cm.updateNode("node1", unlabelAssignable)
	cm.expectStatus("eip-prod")
	cm.expectEvent("NoMatchingNodeFound", "172.18.0.33", "node4: Misconfigured")
	cm.expectEvent(ReasonInvalidNodeFacts, "node4", annotations.NodeID+" is missing")
}

// explain runs ExplainEgressIP over the API objects and every zone's NB.
func (ic *icEnv) explain(name string) *EgressIPReport {
	t, ctx := ic.cm.t, context.Background()
	in := ExplainInput{Mode: ic.cm.mode, ClusterSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		JoinSubnets: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")}, ZoneNB: map[string]*nbstate.Current{}}
	eips, err := ic.cm.eip.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	nodes, err2 := ic.cm.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	nss, err3 := ic.cm.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	pods, err4 := ic.cm.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err := errors.Join(err, err2, err3, err4); err != nil {
		t.Fatal(err)
	}
	for i := range eips.Items {
		in.EgressIPs = append(in.EgressIPs, &eips.Items[i])
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, &nodes.Items[i])
	}
	for i := range nss.Items {
		in.Namespaces = append(in.Namespaces, &nss.Items[i])
	}
	for i := range pods.Items {
		in.Pods = append(in.Pods, &pods.Items[i])
	}
	for zone, z := range ic.zones {
		cur, err := nbstate.ReadCurrent(ctx, z.nbc)
		if err != nil {
			t.Fatal(err)
		}
		in.ZoneNB[zone] = &cur
	}
	r, err := ExplainEgressIP(in, name)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestInterconnectLocalGateway: in local gateway mode a holder is ready for the other zones once both its node
// daemon lists the IP (address and iptables SNAT) and its own zone has committed the reroutes of the IP's pods to
// its management port (and lists the IP in egress-ips-snat-ready). A pod's zone that rerouted on the daemon's list
// alone sent the pod's traffic into a zone with no reroute for it, out of that node's gateway router with its
// address (CI saw one such request during a failover).
func TestInterconnectLocalGateway(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and four ovsdb-servers")
	}
	ic := newICEnv(t, gwmode.Local)
	cm := ic.cm
	ic.web2OnNode3()
	ic.startCM()
	ic.startZone("node3", time.Second)
	z1, z3 := ic.zones["node1"], ic.zones["node3"]

	cm.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	cm.expectStatus("eip-prod", "172.18.0.33@node1")
	// node1's daemon has its address and rules; its zone controller is not running. The same update adds a host
	// address of node1: zone node3's node-IPs address set shows when it has read the update.
	cm.updateNode("node1", func(n *corev1.Node) {
		n.Annotations[annotations.EgressIPsReady] = `["172.18.0.33"]`
		n.Annotations[annotations.HostCIDRs] = `["172.18.0.111/16"]`
	})
	z3.eventually("zone node3 read node1's update", func() error {
		if rows := strings.Join(z3.ours(), "\n"); !strings.Contains(rows, "172.18.0.111") {
			return fmt.Errorf("no node IP 172.18.0.111 in %s", rows)
		}
		return nil
	})
	if got := z3.reroutes()["prod/web2"]; strings.Contains(got, "100.88.0.2") {
		t.Fatalf("zone node3 reroutes to node1 (%s) before node1's zone has a reroute for the pod", got)
	}

	ic.startZone("node1", time.Second)
	toMgmt := rr("eip-prod", "10.244.3.6", "10.244.1.2")
	cm.eventually("zone node3 reroutes to node1 once node1's zone has programmed the IP", func() error {
		got := z3.reroutes()["prod/web2"]
		if !strings.Contains(got, "100.88.0.2") {
			return fmt.Errorf("web2: %q", got)
		}
		if h := z1.reroutes()["prod/web2"]; h != toMgmt {
			t.Fatalf("zone node3 reroutes to node1 (%s) while node1's zone has %q, want %q", got, h, toMgmt)
		}
		return nil
	})
	if got := ic.annotation("node1", annotations.EgressIPsSNATReady); got != `["172.18.0.33"]` {
		t.Errorf("%s = %q, want the IP", annotations.EgressIPsSNATReady, got)
	}
	n1, err := cm.kube.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := n1.Annotations[annotations.EgressIPsLingering]; ok {
		t.Errorf("local gateway mode: the zone wrote %s = %q (the pod zones time the linger)", annotations.EgressIPsLingering, v)
	}
}

// TestInterconnectLocalEditKeepsRemoteReroute: the EgressIP's IP is edited to another that the same node takes. Until
// that node's daemon lists the new IP ready, its zone keeps rerouting the other zones' pods to its management port
// (its daemon still SNATs them with the IP it released): a pod's zone that has not caught up with the edit still
// sends the pod there, and without the reroute it left through the node's gateway router with that router's address
// (CI's interconnect local-gateway soak, round 10: ns3/p6 from 172.18.0.22 for 165 ms).
func TestInterconnectLocalEditKeepsRemoteReroute(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and four ovsdb-servers")
	}
	ic := newICEnv(t, gwmode.Local)
	cm, z1 := ic.cm, ic.zones["node1"]
	ic.web2OnNode3()
	ic.startCM()
	ic.startZone("node1", time.Second)
	cm.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	cm.expectStatus("eip-prod", "172.18.0.33@node1")
	cm.updateNode("node1", ready("172.18.0.33"))
	toMgmt := rr("eip-prod", "10.244.3.6", "10.244.1.2")
	z1.eventually("holder zone reroutes web2 to node1's management port", func() error {
		if got := z1.reroutes()["prod/web2"]; got != toMgmt {
			return fmt.Errorf("web2: %q", got)
		}
		return nil
	})

	cm.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) { o.Spec.EgressIPs = []string{"172.18.0.34"} })
	cm.expectStatus("eip-prod", "172.18.0.34@node1")
	z1.eventually("zone node1 has seen the new status", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsRerouted); !strings.Contains(got, "172.18.0.34") {
			return fmt.Errorf("%s = %q", annotations.EgressIPsRerouted, got)
		}
		return nil
	})
	z1.settle()
	if got := z1.reroutes()["prod/web2"]; got != toMgmt {
		t.Fatalf("node1's daemon lists only the released .33 ready: zone node1 has web2 %q, want %q (a pod zone that has not caught up still sends it here)",
			got, toMgmt)
	}
}
