package node_test

import (
	"context"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"

	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iptables"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
)

// TestLocalGatewayRestartsTwiceWithIPv6InNetns: the node daemon holds two IPv6
// egress IPs, one on the default route's interface (address, ip6tables SNAT) and
// one on a second interface (also ip -6 rules and routes in its own table: the
// field's "file exists on an IPv6 rule after a restart"). It is started three
// times in a row on the same host; each start syncs without an error (it publishes
// both IPs as ready again), traffic leaves with the egress IPs, and the host holds
// exactly what the first start programmed: one copy of every address, rule, route
// and iptables rule.
func TestLocalGatewayRestartsTwiceWithIPv6InNetns(t *testing.T) {
	hostnet.RequireRoot(t)
	tp := newTopo(t, "nft")
	tp.node.Exec(t, "ip", "addr", "add", "fd00:50::10/64", "dev", "eth1", "nodad")
	tp.ext.Exec(t, "ip", "addr", "add", "fd00:50::100/64", "dev", "eth1", "nodad")
	eipEth1 := ma("fd00:50::50")
	kube := kubefake.NewClientset(kubeObjects()...)
	eips := eipfake.NewSimpleClientset(egressIP("eip-web", "web", eipV6.String()), egressIP("eip-db", "db", eipEth1.String()))
	ctx := context.Background()
	ready := func() string {
		n, err := kube.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return n.Annotations[annotations.EgressIPsReady]
	}
	snapshot := func() string {
		a, rules, routes, chain4, jump := tp.ours(t)
		chain6, err := tp.node.TryExec(tp.ip6t, "-t", "nat", "-S", iptables.Chain)
		if err != nil {
			chain6 = "error: " + err.Error() // part of the snapshot: the chain is absent before and after alike
		}
		guard6, jumps6 := tp.guard(t, tp.ip6t)
		return strings.Join([]string{"addrs " + joinPrefixes(a), "rules\n" + rules, "routes\n" + routes,
			"chain4\n" + chain4, "chain6\n" + chain6, "jump\n" + jump, "guard6\n" + guard6,
			"guard6 jumps " + strconv.Itoa(jumps6)}, "\n")
	}
	var first string
	for start := 1; start <= 3; start++ {
		// Forget what the previous run published: the new run must publish it again.
		n, err := kube.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		delete(n.Annotations, annotations.EgressIPsReady)
		if _, err := kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- node.Run(rctx, node.Params{
				Kube: kube, EgressIP: eips, NodeName: "node1", GatewayMode: gwmode.Local,
				ResyncInterval: resync, IPTablesPath: tp.ipt, IP6TablesPath: tp.ip6t, InNetns: tp.node.Do,
			})
		}()
		eventually(t, 10*time.Second, "start "+strconv.Itoa(start)+": both IPv6 egress IPs ready", func() (bool, string) {
			v := ready()
			return v == `["fd00:18::50","fd00:50::50"]`, v
		})
		expectSource(t, tp, webV6, extV6, eipV6)
		expectSource(t, tp, dbV6, netip.AddrPortFrom(ma("fd00:50::100"), echoPort), eipEth1)
		got := snapshot()
		if start == 1 {
			first = got
			if !strings.Contains(got, "from fd00:10:244:1::4/128") || strings.Count(got, "from fd00:10:244:1::4/128") != 1 {
				t.Fatalf("want exactly one ip -6 rule for the db pod:\n%s", got)
			}
			if !strings.Contains(got, "fd00:50::/64") {
				t.Fatalf("want the eth1 route in our table:\n%s", got)
			}
		} else if got != first {
			t.Fatalf("start %d left the host different from the first start:\n%s\nfirst:\n%s", start, got, first)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("start %d: Run: %v", start, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("start %d: Run did not return after cancel", start)
		}
	}
	t.Logf("three starts, host state each time:\n%s", first)
}
