package node

import (
	"errors"
	"maps"
	"net/netip"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iptables"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
)

// TestApplyReportsReadyEgressIPs checks what linuxHost.Apply reports as ready in
// a throwaway netns: an IP whose announcement failed is not ready and is announced
// again by the next Apply; an IP is announced once per process (a restarted
// daemon announces again); an SNAT chain that cannot be synced makes nothing ready.
func TestApplyReportsReadyEgressIPs(t *testing.T) {
	hostnet.RequireRoot(t)
	nodeNS, ext := hostnet.NewNS(t, "node"), hostnet.NewNS(t, "ext")
	hostnet.Veth(t, nodeNS, "eth0", ext, "eth0")
	nodeNS.Exec(t, "ip", "addr", "add", "172.18.0.10/16", "dev", "eth0")
	snap, err := newLinuxHost(nodeNS.Do, iptables.Config{}).Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	eth0, ok := snap.LinkByName("eth0")
	if !ok {
		t.Fatal("no eth0 in the node namespace")
	}
	idx := eth0.Index
	a, b := netip.MustParseAddr("172.18.0.50"), netip.MustParseAddr("172.18.0.60")
	st := hostegress.State{
		Addresses: []hostegress.Address{
			{IP: a, LinkIndex: idx, Link: "eth0", EgressIP: "eip-a"},
			{IP: b, LinkIndex: idx, Link: "eth0", EgressIP: "eip-b"},
		},
		SNAT: []hostegress.SNAT{{PodIP: netip.MustParseAddr("10.244.1.3"), EgressIPAddr: a, Link: "eth0", EgressIP: "eip-a"}},
	}
	var announced []netip.Addr
	failB := true
	newHost := func(cfg iptables.Config) *linuxHost {
		h := newLinuxHost(nodeNS.Do, cfg)
		h.announce = announceFunc(func(_ string, ip netip.Addr) error {
			if ip == b && failB {
				return errors.New("fake announce failure")
			}
			announced = append(announced, ip)
			return nil
		})
		return h
	}
	set := func(ips ...netip.Addr) map[netip.Addr]bool {
		out := map[netip.Addr]bool{}
		for _, ip := range ips {
			out[ip] = true
		}
		return out
	}
	t.Cleanup(func() {
		if _, err := newHost(iptables.Config{}).Apply(hostegress.State{}); err != nil {
			t.Errorf("clean-up: %v", err)
		}
	})

	h := newHost(iptables.Config{})
	ready, err := h.Apply(st)
	if err == nil || !strings.Contains(err.Error(), "fake announce failure") {
		t.Fatalf("first Apply: err = %v, want the announce failure", err)
	}
	if !maps.Equal(ready, set(a)) {
		t.Fatalf("first Apply: ready = %v, want only %s (%s was not announced)", ready, a, b)
	}
	failB = false
	if ready, err = h.Apply(st); err != nil || !maps.Equal(ready, set(a, b)) {
		t.Fatalf("second Apply: ready = %v, %v; want both", ready, err)
	}
	if ready, err = h.Apply(st); err != nil || !maps.Equal(ready, set(a, b)) {
		t.Fatalf("third Apply: ready = %v, %v; want both", ready, err)
	}
	if got := fmtAddrs(announced); got != "172.18.0.50,172.18.0.60" {
		t.Fatalf("announced %s; want each IP once (b retried after its failure)", got)
	}

	// A restarted daemon announces what it holds once more.
	announced = nil
	if ready, err = newHost(iptables.Config{}).Apply(st); err != nil || !maps.Equal(ready, set(a, b)) {
		t.Fatalf("after restart: ready = %v, %v", ready, err)
	}
	if got := fmtAddrs(announced); got != "172.18.0.50,172.18.0.60" {
		t.Fatalf("after restart announced %s, want both", got)
	}

	// The SNAT chain cannot be synced (no such iptables binary): nothing is ready.
	broken := newHost(iptables.Config{IPTablesPath: "/nonexistent/iptables", IP6TablesPath: "/nonexistent/ip6tables"})
	if ready, err = broken.Apply(st); err == nil || len(ready) != 0 {
		t.Fatalf("with a failing SNAT sync: ready = %v, err = %v; want nothing ready and an error", ready, err)
	}

	// An IP no longer wanted is not ready (and its address is removed).
	st.Addresses, st.SNAT = st.Addresses[1:], nil
	if ready, err = h.Apply(st); err != nil || !maps.Equal(ready, set(b)) {
		t.Fatalf("after dropping %s: ready = %v, %v", a, ready, err)
	}
}

func fmtAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, ip := range ips {
		s[i] = ip.String()
	}
	return strings.Join(s, ",")
}
