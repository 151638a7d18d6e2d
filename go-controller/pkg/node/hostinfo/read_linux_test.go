package hostinfo

import (
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/addr"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
)

func TestReadInNetns(t *testing.T) {
	hostnet.RequireRoot(t)
	ns := hostnet.NewNS(t, "hostinfo")
	peer := hostnet.NewNS(t, "hostinfopeer")
	hostnet.Veth(t, ns, "eth0", peer, "eth0")
	ns.Exec(t, "ip", "addr", "add", "172.18.0.10/16", "dev", "eth0")
	ns.Exec(t, "ip", "addr", "add", "172.18.0.11/16", "dev", "eth0")
	ns.Exec(t, "ip", "route", "add", "default", "via", "172.18.0.100", "metric", "100")
	var snap Snapshot
	if err := ns.Do(func() error {
		l, err := netlinkIndex("eth0")
		if err != nil {
			return err
		}
		if err := addr.AddHost(l, netip.MustParseAddr("172.18.0.50"), Proto); err != nil {
			return err
		}
		snap, err = Read()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	eth0, ok := snap.LinkByName("eth0")
	if !ok || !eth0.Up || len(eth0.MAC) != 6 {
		t.Fatalf("eth0: %+v", eth0)
	}
	want := map[netip.Prefix]Addr{
		netip.MustParsePrefix("172.18.0.10/16"): {Prefix: netip.MustParsePrefix("172.18.0.10/16")},
		netip.MustParsePrefix("172.18.0.11/16"): {Prefix: netip.MustParsePrefix("172.18.0.11/16"), Secondary: true},
		netip.MustParsePrefix("172.18.0.50/32"): {Prefix: netip.MustParsePrefix("172.18.0.50/32"), Ours: true},
	}
	for _, a := range eth0.Addrs {
		if w, ok := want[a.Prefix]; ok {
			if a != w {
				t.Errorf("address %s: got %+v, want %+v", a.Prefix, a, w)
			}
			delete(want, a.Prefix)
		}
	}
	if len(want) != 0 {
		t.Errorf("missing addresses: %v (have %+v)", want, eth0.Addrs)
	}
	if idx, ok := snap.DefaultRouteLink(true); !ok || idx != eth0.Index {
		t.Errorf("default route link %d %v, want %d", idx, ok, eth0.Index)
	}
	found := false
	for _, r := range snap.Routes {
		if r.Dst == netip.MustParsePrefix("172.18.0.0/16") && r.LinkIndex == eth0.Index && r.Scope == 253 && r.Src == netip.MustParseAddr("172.18.0.10") {
			found = true
		}
		if r.Dst.Addr().Is6() && r.Dst.Addr().IsLinkLocalUnicast() {
			t.Errorf("link-local route kept: %+v", r)
		}
	}
	if !found {
		t.Errorf("connected route missing: %+v", snap.Routes)
	}
}

func netlinkIndex(name string) (int, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, err
	}
	return l.Attrs().Index, nil
}
