package node_test

import (
	"bufio"
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	kubefake "k8s.io/client-go/kubernetes/fake"

	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iptables"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// TestTakenOverConnectionSurvivesInNetns reproduces what a new holder of an egress
// IP sees after a move: a served pod's TCP connection, SNATed to the egress IP,
// whose conntrack entry the node does not have (flushed here, as on a node that
// never saw the connection). The server sends first: without the guard chain the
// node's stack answers with a RST and the server's connection dies; with it the
// segment is dropped, the pod's next segment through the node is picked up by
// conntrack and SNATed with the same source port, and the server's retransmission
// then reaches the pod. IPv4 and IPv6, both iptables backends.
func TestTakenOverConnectionSurvivesInNetns(t *testing.T) {
	hostnet.RequireRoot(t)
	for _, backend := range []string{"legacy", "nft"} {
		t.Run(backend, func(t *testing.T) {
			tp := newTopo(t, backend)
			kube := kubefake.NewClientset(kubeObjects()...)
			eips := eipfake.NewSimpleClientset(egressIP("eip-web", "web", eipV4.String(), eipV6.String()))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- node.Run(ctx, node.Params{Kube: kube, EgressIP: eips, NodeName: "node1",
					GatewayMode: gwmode.Local, ResyncInterval: resync,
					IPTablesPath: tp.ipt, IP6TablesPath: tp.ip6t, InNetns: tp.node.Do})
			}()
			t.Cleanup(func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			})
			expectSource(t, tp, webV4, extV4, eipV4)
			expectSource(t, tp, webV6, extV6, eipV6)

			var ln net.Listener
			if err := tp.ext.Do(func() error {
				var err error
				ln, err = net.Listen("tcp", ":9100")
				return err
			}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			for _, fam := range []struct {
				name     string
				pod, eip netip.Addr
				server   netip.Addr
				iptables string
			}{
				{"ipv4", webV4, eipV4, extV4.Addr(), tp.ipt},
				{"ipv6", webV6, eipV6, extV6.Addr(), tp.ip6t},
			} {
				t.Run(fam.name, func(t *testing.T) {
					takeOver(t, tp, ln, fam.pod, fam.eip, fam.server, fam.iptables)
				})
			}
		})
	}
}

func takeOver(t *testing.T, tp *topo, ln net.Listener, pod, eip, server netip.Addr, ipt string) {
	var client net.Conn
	if err := tp.pod.Do(func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: pod.AsSlice()}, Timeout: 3 * time.Second}
		var err error
		client, err = d.Dial("tcp", net.JoinHostPort(server.String(), "9100"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := ln.(*net.TCPListener).SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got := srv.RemoteAddr().(*net.TCPAddr).AddrPort(); got.Addr().Unmap() != eip {
		t.Fatalf("server sees %s, want the egress IP %s", got, eip)
	}
	sport := client.LocalAddr().(*net.TCPAddr).Port
	deadline := time.Now().Add(10 * time.Second)
	_ = client.SetDeadline(deadline)
	_ = srv.SetDeadline(deadline)
	cr, sr := bufio.NewReader(client), bufio.NewReader(srv)
	line := func(r *bufio.Reader, who string) string {
		t.Helper()
		s, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: read: %v", who, err)
		}
		return strings.TrimSpace(s)
	}
	write := func(c net.Conn, s, who string) {
		t.Helper()
		if _, err := c.Write([]byte(s + "\n")); err != nil {
			t.Fatalf("%s: write: %v", who, err)
		}
	}
	write(client, "hello", "pod")
	if got := line(sr, "server"); got != "hello" {
		t.Fatalf("server read %q", got)
	}

	// The node forgets the connection, as a new holder that never saw it.
	if err := tp.node.Do(func() error { return netlink.ConntrackTableFlush(netlink.ConntrackTable) }); err != nil {
		t.Fatal(err)
	}
	drops0 := guardDrops(t, tp, ipt)
	write(srv, "server-first", "server")
	// The server's segment reached the node: the guard counted it (without the
	// guard there is no counter, and the node's RST kills the connection).
	if err := waitfor.Until(context.Background(), 3*time.Second, 20*time.Millisecond, func() (bool, error) {
		return guardDrops(t, tp, ipt) != drops0, nil
	}); err != nil {
		t.Errorf("the guard dropped nothing: the server's segment reached the node's stack (%v)", err)
	}
	write(client, "pod-again", "pod")
	if got := line(sr, "server"); got != "pod-again" {
		t.Fatalf("server read %q, want pod-again", got)
	}
	if got := line(cr, "pod"); got != "server-first" {
		t.Fatalf("pod read %q, want server-first", got)
	}
	write(srv, "still-here", "server")
	if got := line(cr, "pod"); got != "still-here" {
		t.Fatalf("pod read %q", got)
	}
	if got := srv.RemoteAddr().(*net.TCPAddr).Port; got != sport {
		t.Fatalf("server sees source port %d, pod uses %d", got, sport)
	}
}

// guardDrops sums the packet counters of the guard chain's rules (0 when it does not exist).
func guardDrops(t *testing.T, tp *topo, ipt string) int {
	t.Helper()
	out, err := tp.node.TryExec(ipt, "-t", "filter", "-L", iptables.GuardChain, "-v", "-x", "-n")
	if err != nil {
		return 0
	}
	sum := 0
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[2] == "DROP" {
			n, err := strconv.Atoi(f[0])
			if err != nil {
				t.Fatalf("guard counter in %q: %v", l, err)
			}
			sum += n
		}
	}
	return sum
}
