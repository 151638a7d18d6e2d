package iproute

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
)

func TestSyncInNetns(t *testing.T) {
	hostnet.RequireRoot(t)
	ns := hostnet.NewNS(t, "iproute")
	peer := hostnet.NewNS(t, "iproutepeer")
	hostnet.Veth(t, ns, "eth1", peer, "eth0")
	ns.Exec(t, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.eth1.accept_dad=0")
	ns.Exec(t, "ip", "addr", "add", "192.168.50.10/24", "dev", "eth1")
	ns.Exec(t, "ip", "addr", "add", "fd00:50::10/64", "dev", "eth1", "nodad")
	idx, err := strconv.Atoi(strings.TrimSpace(ns.Exec(t, "cat", "/sys/class/net/eth1/ifindex")))
	if err != nil {
		t.Fatal(err)
	}
	table := hostegress.TableBase + idx
	tbl := strconv.Itoa(table)
	// Foreign rule and route in the same table, same priority: never touched.
	ns.Exec(t, "ip", "rule", "add", "from", "10.244.1.200", "lookup", tbl, "priority", "6000")
	ns.Exec(t, "ip", "route", "add", "10.77.0.0/16", "via", "192.168.50.1", "table", tbl)
	foreign := ns.Exec(t, "ip", "rule") + ns.Exec(t, "ip", "route", "show", "table", tbl, "10.77.0.0/16")

	rules := []hostegress.Rule{{PodIP: netip.MustParseAddr("10.244.1.4"), Table: table}, {PodIP: netip.MustParseAddr("fd00:10:244:1::4"), Table: table}}
	routes := []hostegress.Route{
		{Table: table, Route: hostinfo.Route{Dst: netip.MustParsePrefix("192.168.50.0/24"), LinkIndex: idx, Scope: 253, Src: netip.MustParseAddr("192.168.50.10")}},
		{Table: table, Route: hostinfo.Route{Dst: netip.MustParsePrefix("0.0.0.0/0"), Gw: netip.MustParseAddr("192.168.50.100"), LinkIndex: idx, Metric: 200}},
		{Table: table, Route: hostinfo.Route{Dst: netip.MustParsePrefix("fd00:50::/64"), LinkIndex: idx, Scope: 0, Metric: 256}},
		{Table: table, Route: hostinfo.Route{Dst: netip.MustParsePrefix("::/0"), Gw: netip.MustParseAddr("fd00:50::100"), LinkIndex: idx, Metric: 1024}},
	}
	sync := func(r []hostegress.Rule, rt []hostegress.Route) Stats {
		t.Helper()
		var st Stats
		if err := ns.Do(func() error {
			var err error
			st, err = Sync(r, rt)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := sync(rules, routes); st != (Stats{RulesAdded: 2, RoutesAdded: 4}) {
		t.Fatalf("first sync: %+v", st)
	}
	if st := sync(rules, routes); st != (Stats{}) {
		t.Fatalf("unchanged sync changed something: %+v", st)
	}
	got := ns.Exec(t, "ip", "route", "show", "table", tbl, "proto", "201") + ns.Exec(t, "ip", "-6", "route", "show", "table", tbl, "proto", "201")
	for _, want := range []string{"default via 192.168.50.100 dev eth1", "192.168.50.0/24 dev eth1", "fd00:50::/64 dev eth1", "default via fd00:50::100 dev eth1"} {
		if !strings.Contains(got, want) {
			t.Fatalf("table %s lacks %q:\n%s", tbl, want, got)
		}
	}
	// Drop one rule and one route from the desired state: only those go.
	if st := sync(rules[:1], routes[:2]); st != (Stats{RulesDeleted: 1, RoutesDeleted: 2}) {
		t.Fatalf("shrink: %+v", st)
	}
	if st := sync(nil, nil); st != (Stats{RulesDeleted: 1, RoutesDeleted: 2}) {
		t.Fatalf("clear: %+v", st)
	}
	if got := ns.Exec(t, "ip", "rule") + ns.Exec(t, "ip", "route", "show", "table", tbl, "10.77.0.0/16"); got != foreign {
		t.Fatalf("foreign rule/route changed:\nbefore:\n%s\nafter:\n%s", foreign, got)
	}
}
