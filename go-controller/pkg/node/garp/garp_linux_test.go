package garp_test

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/garp"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// AnnounceFor, sent from a host that does not hold the address, moves a
// neighbour's existing entry for it to the named MAC (what a shared-gateway node
// does for its gateway router's IPv6 egress IPs); the neighbour sends nothing.
func TestAnnounceForUpdatesANeighboursEntryInNetns(t *testing.T) {
	hostnet.RequireRoot(t)
	node, ext := hostnet.NewNS(t, "node"), hostnet.NewNS(t, "ext")
	for _, ns := range []*hostnet.NS{node, ext} {
		ns.Exec(t, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0")
	}
	hostnet.Veth(t, node, "eth0", ext, "eth0")
	node.Exec(t, "ip", "addr", "add", "fd00:18::10/64", "dev", "eth0", "nodad")
	ext.Exec(t, "ip", "addr", "add", "fd00:18::100/64", "dev", "eth0", "nodad")
	const eip = "fd00:18::50"
	ext.Exec(t, "ip", "-6", "neigh", "replace", eip, "lladdr", "02:00:00:00:00:99", "dev", "eth0", "nud", "stale")
	gr := net.HardwareAddr{0x0a, 0x58, 0xac, 0x12, 0x00, 0x15}
	// the link-local address must exist before the socket binds to it
	waitfor.True(t, 5*time.Second, 20*time.Millisecond, "a link-local address on eth0", func() (bool, string) {
		out := node.Exec(t, "ip", "-6", "addr", "show", "dev", "eth0", "scope", "link")
		return strings.Contains(out, "fe80::"), out
	})
	if err := node.Do(func() error { return garp.AnnounceFor("eth0", netip.MustParseAddr(eip), gr) }); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, 3*time.Second, 20*time.Millisecond, "neighbour entry for "+eip+" with lladdr "+gr.String(), func() (bool, string) {
		out := ext.Exec(t, "ip", "-6", "neigh", "show", eip, "dev", "eth0")
		return strings.Contains(out, "lladdr "+gr.String()), out
	})
	if err := garp.AnnounceFor("eth0", netip.MustParseAddr("172.18.0.50"), gr); err == nil {
		t.Error("AnnounceFor accepted an IPv4 address")
	}
}
