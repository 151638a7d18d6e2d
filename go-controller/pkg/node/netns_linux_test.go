package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/addr"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iptables"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

const (
	echoPort = 9000
	resync   = 2 * time.Second
)

var (
	ma = netip.MustParseAddr

	webV4, dbV4   = ma("10.244.1.3"), ma("10.244.1.4")
	webV6, dbV6   = ma("fd00:10:244:1::3"), ma("fd00:10:244:1::4")
	nodeV4        = ma("172.18.0.10")
	nodeV6        = ma("fd00:18::10")
	eipV4, eipV6  = ma("172.18.0.50"), ma("fd00:18::50")
	eipSecondary  = ma("192.168.50.50")
	extV4, extV6  = netip.AddrPortFrom(ma("172.18.0.100"), echoPort), netip.AddrPortFrom(ma("fd00:18::100"), echoPort)
	stalePlantedA = ma("172.18.0.99")
)

// topo is the test network:
//
//	pod netns (eth0: 10.244.1.3, .4, fd00:10:244:1::3, ::4)
//	  └─ node netns k8s0 10.244.1.1 / fd00:10:244:1::1   (ip_forward on)
//	     node eth0 172.18.0.10/16 fd00:18::10/64  ── ext eth0 172.18.0.100 fd00:18::100 (echo server)
//	     node eth1 192.168.50.10/24               ── ext eth1 192.168.50.100
//	node routes: default via 172.18.0.100 metric 100, default via 192.168.50.100 metric 200, ::/0 via fd00:18::100.
//	node POSTROUTING: MASQUERADE of 10.244.0.0/16 out eth0 and eth1 and of fd00:10:244::/48 out eth0
//	(the generic node SNAT), a foreign SNAT rule, a foreign address and a foreign ip rule.
type topo struct {
	node, pod, ext *hostnet.NS
	ipt, ip6t      string
}

func newTopo(t *testing.T, backend string) *topo {
	tp := &topo{
		node: hostnet.NewNS(t, "node"), pod: hostnet.NewNS(t, "pod"), ext: hostnet.NewNS(t, "ext"),
		ipt: "/usr/sbin/iptables-" + backend, ip6t: "/usr/sbin/ip6tables-" + backend,
	}
	for _, ns := range []*hostnet.NS{tp.node, tp.pod, tp.ext} {
		ns.Exec(t, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	tp.node.Exec(t, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
	hostnet.Veth(t, tp.pod, "eth0", tp.node, "k8s0")
	hostnet.Veth(t, tp.node, "eth0", tp.ext, "eth0")
	hostnet.Veth(t, tp.node, "eth1", tp.ext, "eth1")
	run := func(ns *hostnet.NS, cmds ...string) {
		for _, c := range cmds {
			ns.Exec(t, strings.Fields(c)...)
		}
	}
	run(tp.pod,
		"ip addr add 10.244.1.3/24 dev eth0", "ip addr add 10.244.1.4/24 dev eth0",
		"ip addr add fd00:10:244:1::3/64 dev eth0 nodad", "ip addr add fd00:10:244:1::4/64 dev eth0 nodad",
		"ip route add default via 10.244.1.1", "ip -6 route add default via fd00:10:244:1::1")
	run(tp.node,
		"ip addr add 10.244.1.1/24 dev k8s0", "ip addr add fd00:10:244:1::1/64 dev k8s0 nodad",
		"ip addr add 172.18.0.10/16 dev eth0", "ip addr add fd00:18::10/64 dev eth0 nodad",
		"ip addr add 192.168.50.10/24 dev eth1",
		"ip route add default via 172.18.0.100 metric 100", "ip route add default via 192.168.50.100 metric 200",
		"ip -6 route add default via fd00:18::100",
		// foreign state that must survive everything
		"ip addr add 172.18.0.77/32 dev eth0",
		"ip rule add from 10.244.1.200 lookup 200 priority 6000",
		tp.ipt+" -t nat -A POSTROUTING -s 10.244.0.0/16 -o eth0 -j MASQUERADE",
		tp.ipt+" -t nat -A POSTROUTING -s 10.244.0.0/16 -o eth1 -j MASQUERADE",
		tp.ipt+" -t nat -A POSTROUTING -s 10.99.0.0/16 -j SNAT --to-source 172.18.0.10",
		tp.ip6t+" -t nat -A POSTROUTING -s fd00:10:244::/48 -o eth0 -j MASQUERADE")
	run(tp.ext,
		"ip addr add 172.18.0.100/16 dev eth0", "ip addr add fd00:18::100/64 dev eth0 nodad",
		"ip addr add 192.168.50.100/24 dev eth1")
	hostnet.EchoServer(t, tp.ext, echoPort)
	return tp
}

// foreignState is what must never change.
func (tp *topo) foreignState(t *testing.T) string {
	var b strings.Builder
	for _, l := range strings.Split(tp.node.Exec(t, tp.ipt, "-t", "nat", "-S", "POSTROUTING"), "\n") {
		if !strings.Contains(l, iptables.Chain) {
			b.WriteString(l + "\n")
		}
	}
	for _, l := range strings.Split(tp.node.Exec(t, tp.ip6t, "-t", "nat", "-S", "POSTROUTING"), "\n") {
		if !strings.Contains(l, iptables.Chain) {
			b.WriteString(l + "\n")
		}
	}
	for _, out := range []string{
		tp.node.Exec(t, "ip", "rule", "show", "from", "10.244.1.200"),
		tp.node.Exec(t, "ip", "addr", "show", "to", "172.18.0.77/32"),
	} {
		for _, l := range strings.SplitAfter(out, "\n") {
			// iproute2 prints this (to stderr, which Exec keeps) when it cannot resolve
			// a veth peer's netns id at that instant: a transient of the test bed (seen
			// in CI as the only difference between two snapshots), not a state change.
			if !strings.HasPrefix(l, "Error: Peer netns reference is invalid.") {
				b.WriteString(l)
			}
		}
	}
	return b.String()
}

// ours lists what carries our marks: addresses with IFA_PROTO, ip rules and routes
// with protocol 201, our chain and jump.
func (tp *topo) ours(t *testing.T) (addrs []netip.Prefix, rules, routes, chain4, jump string) {
	t.Helper()
	if err := tp.node.Do(func() error {
		list, err := addr.List()
		for _, e := range list {
			if e.Proto == hostinfo.Proto {
				addrs = append(addrs, e.Prefix)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rules = tp.ourRules(t)
	routes = strings.TrimSpace(tp.node.Exec(t, "ip", "route", "show", "table", "all", "proto", "201")) +
		strings.TrimSpace(tp.node.Exec(t, "ip", "-6", "route", "show", "table", "all", "proto", "201"))
	if out, err := tp.node.TryExec(tp.ipt, "-t", "nat", "-S", iptables.Chain); err == nil {
		chain4 = out
	}
	for _, bin := range []string{tp.ipt, tp.ip6t} {
		for _, l := range strings.Split(tp.node.Exec(t, bin, "-t", "nat", "-S", "POSTROUTING"), "\n") {
			if strings.Contains(l, iptables.Chain) {
				jump += l + "\n"
			}
		}
	}
	return
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	return waitfor.True(t, timeout, 50*time.Millisecond, what, cond)
}

func expectSource(t *testing.T, tp *topo, src netip.Addr, dst netip.AddrPort, want netip.Addr) {
	t.Helper()
	eventually(t, 10*time.Second, "source seen for "+src.String(), func() (bool, string) {
		got, err := hostnet.SourceSeen(tp.pod, src, dst, time.Second)
		if err != nil {
			return false, err.Error()
		}
		return got == want, "server saw " + got.String() + ", want " + want.String()
	})
}

func egressIP(name, app string, ips ...string) *egressipv1.EgressIP {
	e := &egressipv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Now()},
		Spec: egressipv1.EgressIPSpec{
			EgressIPs:         ips,
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		},
	}
	for _, ip := range ips {
		e.Status.Items = append(e.Status.Items, egressipv1.EgressIPStatusItem{Node: "node1", EgressIP: ip})
	}
	return e
}

func kubeObjects() []runtime.Object {
	pod := func(name, app string, ips ...netip.Addr) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: name, Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{NodeName: "node2"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ips[0].String()}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip.String()})
		}
		return p
	}
	return []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}},
		pod("web", "web", webV4, webV6),
		pod("db", "db", dbV4, dbV6),
	}
}

func TestLocalGatewayInNetns(t *testing.T) {
	hostnet.RequireRoot(t)
	for _, backend := range []string{"legacy", "nft"} {
		t.Run(backend, func(t *testing.T) { testLocalGateway(t, backend) })
	}
}

func testLocalGateway(t *testing.T, backend string) {
	start := time.Now()
	tp := newTopo(t, backend)
	foreign := tp.foreignState(t)

	// Leftovers of a previous run, carrying our marks: start-up repair removes them.
	eth0Idx, eth1Idx := tp.ifindex(t, "eth0"), tp.ifindex(t, "eth1")
	if err := tp.node.Do(func() error { return addr.AddHost(eth0Idx, stalePlantedA, hostinfo.Proto) }); err != nil {
		t.Fatal(err)
	}
	tp.node.Exec(t, "ip", "rule", "add", "from", "10.244.9.9", "lookup", "7999", "priority", "6000", "protocol", "201")
	tp.node.Exec(t, "ip", "route", "add", "10.9.9.0/24", "dev", "eth1", "table", "7999", "proto", "201")
	tp.node.Exec(t, tp.ipt, "-t", "nat", "-N", iptables.Chain)
	tp.node.Exec(t, tp.ipt, "-t", "nat", "-A", iptables.Chain, "-s", "10.244.9.9", "-o", "eth0", "-j", "SNAT", "--to-source", "172.18.0.99")
	tp.node.Exec(t, tp.ipt, "-t", "nat", "-A", "POSTROUTING", "-j", iptables.Chain)
	tp.node.Exec(t, tp.ip6t, "-N", iptables.GuardChain)
	tp.node.Exec(t, tp.ip6t, "-A", iptables.GuardChain, "-d", "fd00:18::99", "-j", "DROP")
	tp.node.Exec(t, tp.ip6t, "-A", "INPUT", "-j", iptables.GuardChain)

	// Stale neighbour entries on the external host: only our GARP / NA can fix them
	// this fast (no traffic is sent before the check).
	tp.ext.Exec(t, "ip", "neigh", "replace", eipV4.String(), "lladdr", "02:00:00:00:00:99", "dev", "eth0", "nud", "stale")
	tp.ext.Exec(t, "ip", "neigh", "replace", eipV6.String(), "lladdr", "02:00:00:00:00:99", "dev", "eth0", "nud", "stale")
	nodeMAC := strings.TrimSpace(tp.node.Exec(t, "cat", "/sys/class/net/eth0/address"))

	kube := kubefake.NewClientset(kubeObjects()...)
	eips := eipfake.NewSimpleClientset(egressIP("eip-web", "web", eipV4.String(), eipV6.String()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- node.Run(ctx, node.Params{
			Kube: kube, EgressIP: eips, NodeName: "node1", GatewayMode: gwmode.Local,
			ResyncInterval: resync, IPTablesPath: tp.ipt, IP6TablesPath: tp.ip6t, InNetns: tp.node.Do,
		})
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	}
	t.Cleanup(stop)

	// Readiness is published only after the host is programmed: once the Node
	// lists both egress IPs, their addresses and the SNAT rule are in place.
	ready := func() string {
		n, err := kube.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return n.Annotations[annotations.EgressIPsReady]
	}
	eventually(t, 10*time.Second, "egress-ips-ready lists both egress IPs", func() (bool, string) {
		v := ready()
		return v == `["172.18.0.50","fd00:18::50"]`, v
	})
	if a, _, _, chain, _ := tp.ours(t); len(a) != 2 || !strings.Contains(chain, "-s 10.244.1.3/32") {
		t.Fatalf("egress-ips-ready published before the host was programmed: addrs %v, chain %q", a, chain)
	}

	// 1. Assignment + start-up repair.
	took := eventually(t, 10*time.Second, "egress IPs programmed and leftovers removed", func() (bool, string) {
		a, rules, routes, chain, jump := tp.ours(t)
		ok := len(a) == 2 && rules == "" && routes == "" &&
			strings.Count(chain, "-A "+iptables.Chain) == 1 && strings.Contains(chain, "-s 10.244.1.3/32") &&
			strings.Count(jump, "\n") == 2
		return ok, strings.Join([]string{
			"addrs=" + strings.Trim(strings.ReplaceAll(strings.TrimSpace(joinPrefixes(a)), "\n", " "), " "),
			"rules=" + rules, "routes=" + routes, "chain=" + chain, "jump=" + jump}, " | ")
	})
	t.Logf("[%s] programmed and repaired %s after Run", backend, took)
	for i, bin := range []string{tp.ipt, tp.ip6t} {
		want := strings.Join(iptables.RenderGuard([]hostegress.Address{{IP: []netip.Addr{eipV4, eipV6}[i], EgressIP: "eip-web"}}, i == 0), "\n")
		if got, jumps := tp.guard(t, bin); got != want || jumps != 1 {
			t.Fatalf("%s guard chain (%d jumps):\n%s\nwant one jump and:\n%s", bin, jumps, got, want)
		}
	}
	for _, bin := range []string{tp.ipt, tp.ip6t} {
		first := strings.Split(tp.node.Exec(t, bin, "-t", "nat", "-S", "POSTROUTING"), "\n")[1]
		if !strings.HasSuffix(first, "-j "+iptables.Chain) {
			t.Fatalf("%s: our jump is not the first POSTROUTING rule: %s", bin, first)
		}
	}
	garp := eventually(t, 3*time.Second, "external host's neighbour entries point at the node", func() (bool, string) {
		v4 := tp.ext.Exec(t, "ip", "neigh", "show", eipV4.String(), "dev", "eth0")
		v6 := tp.ext.Exec(t, "ip", "-6", "neigh", "show", eipV6.String(), "dev", "eth0")
		return strings.Contains(v4, "lladdr "+nodeMAC) && strings.Contains(v6, "lladdr "+nodeMAC), v4 + v6
	})
	t.Logf("[%s] GARP and unsolicited NA updated the neighbour entries within %s", backend, garp)

	expectSource(t, tp, webV4, extV4, eipV4)
	expectSource(t, tp, dbV4, extV4, nodeV4)
	expectSource(t, tp, webV6, extV6, eipV6)
	expectSource(t, tp, dbV6, extV6, nodeV6)

	// Egress facts on the Node.
	eventually(t, 5*time.Second, "egress facts published", func() (bool, string) {
		n, err := kube.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		prim, cidrs := n.Annotations[annotations.PrimaryIfAddr], n.Annotations[annotations.HostCIDRs]
		var list []string
		if err := json.Unmarshal([]byte(cidrs), &list); err != nil {
			return false, fmt.Sprintf("%s %q: %v", annotations.HostCIDRs, cidrs, err)
		}
		want := map[string]bool{"172.18.0.10/16": true, "192.168.50.10/24": true, "10.244.1.1/24": true,
			"172.18.0.77/32": true, "fd00:18::10/64": true, "fd00:10:244:1::1/64": true}
		for _, c := range list {
			if strings.HasPrefix(c, "172.18.0.50") || strings.HasPrefix(c, "fd00:18::50") || strings.HasPrefix(c, "172.18.0.99") {
				return false, "host-cidrs contains an egress IP: " + cidrs
			}
			delete(want, c)
		}
		return prim == `{"ipv4":"172.18.0.10/16","ipv6":"fd00:18::10/64"}` && len(want) == 0, prim + " " + cidrs
	})

	// 2. Drift: a rule deleted by hand comes back within one resync; an address
	// deleted by hand comes back at once (netlink event).
	tp.node.Exec(t, tp.ipt, "-t", "nat", "-D", iptables.Chain, "-s", "10.244.1.3/32", "-o", "eth0",
		"-m", "comment", "--comment", iptables.RuleComment("eip-web"), "-j", "SNAT", "--to-source", eipV4.String())
	back := eventually(t, resync+5*time.Second, "hand-deleted SNAT rule restored", func() (bool, string) {
		out, err := tp.node.TryExec(tp.ipt, "-t", "nat", "-S", iptables.Chain)
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(out, "-s 10.244.1.3/32"), out
	})
	t.Logf("[%s] hand-deleted SNAT rule back after %s (resync interval %s)", backend, back, resync)
	// The next periodic resync is at most one interval after the last sync; the
	// second interval is slack for a loaded machine (still "within one resync" of it).
	if back > 2*resync {
		t.Errorf("rule came back after %s, later than the next resync (interval %s)", back, resync)
	}
	tp.node.Exec(t, "ip", "addr", "del", eipV4.String()+"/32", "dev", "eth0")
	back = eventually(t, resync+5*time.Second, "hand-deleted egress address restored", func() (bool, string) {
		a, _, _, _, _ := tp.ours(t)
		return len(a) == 2, joinPrefixes(a)
	})
	t.Logf("[%s] hand-deleted egress IP address back after %s", backend, back)
	expectSource(t, tp, webV4, extV4, eipV4)

	// 3. An egress IP on the interface that is not the default route's: policy routing.
	if _, err := eips.K8sV1().EgressIPs().Create(context.Background(), egressIP("eip-db", "db", eipSecondary.String()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectSource(t, tp, dbV4, extV4, eipSecondary)
	expectSource(t, tp, webV4, extV4, eipV4)
	if rules := tp.ourRules(t); !strings.Contains(rules, "from 10.244.1.4/32 lookup "+strconv.Itoa(hostegress.TableBase+eth1Idx)) {
		t.Fatalf("policy rule for the db pod missing:\n%s", rules)
	}
	eventually(t, 5*time.Second, "egress-ips-ready lists the secondary egress IP", func() (bool, string) {
		v := ready()
		return v == `["172.18.0.50","192.168.50.50","fd00:18::50"]`, v
	})

	// 4. Unassignment: everything of ours goes, traffic uses the node IP again.
	for _, name := range []string{"eip-web", "eip-db"} {
		e, err := eips.K8sV1().EgressIPs().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e.Status.Items = nil
		if _, err := eips.K8sV1().EgressIPs().UpdateStatus(context.Background(), e, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "nothing of ours left after unassignment", func() (bool, string) {
		a, rules, routes, chain, jump := tp.ours(t)
		return len(a) == 0 && rules == "" && routes == "" && chain == "" && jump == "",
			joinPrefixes(a) + "|" + rules + "|" + routes + "|" + chain + "|" + jump
	})
	for _, bin := range []string{tp.ipt, tp.ip6t} {
		if got, jumps := tp.guard(t, bin); got != "" || jumps != 0 {
			t.Fatalf("%s: guard chain or %d jumps left after unassignment:\n%s", bin, jumps, got)
		}
	}
	expectSource(t, tp, webV4, extV4, nodeV4)
	expectSource(t, tp, dbV4, extV4, nodeV4)
	expectSource(t, tp, webV6, extV6, nodeV6)
	eventually(t, 5*time.Second, "egress-ips-ready empty after unassignment", func() (bool, string) {
		v := ready()
		return v == `[]`, v
	})
	if got := tp.foreignState(t); got != foreign {
		t.Fatalf("foreign state changed:\nbefore:\n%s\nafter:\n%s", foreign, got)
	}
	stop()
	t.Logf("[%s] whole scenario %s", backend, time.Since(start).Round(time.Millisecond))
}

// guard returns the guard chain's rules ("" when it does not exist) and the
// number of INPUT rules jumping to it.
func (tp *topo) guard(t *testing.T, bin string) (string, int) {
	t.Helper()
	var lines []string
	if out, err := tp.node.TryExec(bin, "-S", iptables.GuardChain); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if strings.HasPrefix(l, "-A ") {
				lines = append(lines, l)
			}
		}
	}
	jumps := 0
	for _, l := range strings.Split(tp.node.Exec(t, bin, "-S", "INPUT"), "\n") {
		if strings.HasSuffix(l, "-j "+iptables.GuardChain) {
			jumps++
		}
	}
	return strings.Join(lines, "\n"), jumps
}

// ourRules lists the ip rules (both families) with our protocol, one per line
// ("from <src> lookup <table> prio <n>"). iproute2 6.1 cannot filter rules by protocol.
func (tp *topo) ourRules(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	if err := tp.node.Do(func() error {
		for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
			list, err := netlink.RuleList(fam)
			if err != nil {
				return err
			}
			for _, r := range list {
				if r.Protocol == hostinfo.Proto {
					fmt.Fprintf(&b, "from %v lookup %d prio %d\n", r.Src, r.Table, r.Priority)
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func (tp *topo) ifindex(t *testing.T, name string) int {
	n, err := strconv.Atoi(strings.TrimSpace(tp.node.Exec(t, "cat", "/sys/class/net/"+name+"/ifindex")))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func joinPrefixes(ps []netip.Prefix) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

// TestSharedGatewayInNetns: in shared gateway mode the node writes its egress
// facts but programs nothing, even for an egress IP assigned to it; leftovers of
// ours from an earlier local-mode run are removed once at start.
func TestSharedGatewayInNetns(t *testing.T) {
	hostnet.RequireRoot(t)
	for _, backend := range []string{"legacy", "nft"} {
		t.Run(backend, func(t *testing.T) {
			tp := newTopo(t, backend)
			foreign := tp.foreignState(t)
			if err := tp.node.Do(func() error { return addr.AddHost(tp.ifindex(t, "eth0"), stalePlantedA, hostinfo.Proto) }); err != nil {
				t.Fatal(err)
			}
			tp.node.Exec(t, tp.ipt, "-t", "nat", "-N", iptables.Chain)
			tp.node.Exec(t, tp.ipt, "-t", "nat", "-I", "POSTROUTING", "1", "-j", iptables.Chain)
			tp.node.Exec(t, tp.ipt, "-N", iptables.GuardChain)
			tp.node.Exec(t, tp.ipt, "-A", iptables.GuardChain, "-d", stalePlantedA.String(), "-j", "DROP")
			tp.node.Exec(t, tp.ipt, "-I", "INPUT", "1", "-j", iptables.GuardChain)

			kube := kubefake.NewClientset(kubeObjects()...)
			eips := eipfake.NewSimpleClientset(egressIP("eip-web", "web", eipV4.String()))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			var hostOps atomic.Int64 // host operations (each sync reads a snapshot: one or two per sync)
			inNetns := func(fn func() error) error { hostOps.Add(1); return tp.node.Do(fn) }
			go func() {
				done <- node.Run(ctx, node.Params{Kube: kube, EgressIP: eips, NodeName: "node1",
					GatewayMode: gwmode.Shared, ResyncInterval: resync,
					IPTablesPath: tp.ipt, IP6TablesPath: tp.ip6t, InNetns: inNetns})
			}()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			eventually(t, 10*time.Second, "egress facts published", func() (bool, string) {
				n, err := kube.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
				if err != nil {
					return false, err.Error()
				}
				return n.Annotations[annotations.PrimaryIfAddr] == `{"ipv4":"172.18.0.10/16","ipv6":"fd00:18::10/64"}`, n.Annotations[annotations.PrimaryIfAddr]
			})
			eventually(t, 10*time.Second, "leftovers removed", func() (bool, string) {
				a, rules, routes, chain, jump := tp.ours(t)
				guard, guardJumps := tp.guard(t, tp.ipt)
				return len(a) == 0 && rules == "" && routes == "" && chain == "" && jump == "" && guard == "" && guardJumps == 0,
					joinPrefixes(a) + chain + jump + guard
			})
			// At least one more sync ran to its end (three more host operations, at most two per sync; nothing
			// else changes, so it is a periodic resync): still nothing programmed.
			before := hostOps.Load()
			eventually(t, 3*resync+5*time.Second, "a periodic resync", func() (bool, string) {
				n := hostOps.Load() - before
				return n >= 3, fmt.Sprintf("%d host operations", n)
			})
			if a, rules, routes, chain, jump := tp.ours(t); len(a) != 0 || rules != "" || routes != "" || chain != "" || jump != "" {
				t.Fatalf("shared mode programmed the host: %v %q %q %q %q", a, rules, routes, chain, jump)
			}
			expectSource(t, tp, webV4, extV4, nodeV4)
			if got := tp.foreignState(t); got != foreign {
				t.Fatalf("foreign state changed:\nbefore:\n%s\nafter:\n%s", foreign, got)
			}
		})
	}
}
