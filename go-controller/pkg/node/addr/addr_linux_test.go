package addr

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
)

func TestAddListDeleteInNetns(t *testing.T) {
	hostnet.RequireRoot(t)
	ns := hostnet.NewNS(t, "addr")
	peer := hostnet.NewNS(t, "addrpeer")
	hostnet.Veth(t, ns, "eth0", peer, "eth0")
	ns.Exec(t, "ip", "addr", "add", "172.18.0.10/16", "dev", "eth0")
	idx := 0
	find := func(want netip.Prefix) (Entry, bool) {
		var list []Entry
		if err := ns.Do(func() error {
			var err error
			list, err = List()
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for _, e := range list {
			if e.Prefix == want {
				return e, true
			}
		}
		return Entry{}, false
	}
	foreign, ok := find(netip.MustParsePrefix("172.18.0.10/16"))
	if !ok || foreign.Proto != 0 {
		t.Fatalf("foreign address: %+v %v", foreign, ok)
	}
	idx = foreign.LinkIndex

	v4, v6 := netip.MustParseAddr("172.18.0.50"), netip.MustParseAddr("fd00:18::50")
	for _, ip := range []netip.Addr{v4, v6} {
		if err := ns.Do(func() error { return AddHost(idx, ip, 201) }); err != nil {
			t.Fatal(err)
		}
		if err := ns.Do(func() error { return AddHost(idx, ip, 201) }); !errors.Is(err, unix.EEXIST) {
			t.Fatalf("second add of %s: %v, want EEXIST", ip, err)
		}
	}
	e4, ok4 := find(netip.PrefixFrom(v4, 32))
	e6, ok6 := find(netip.PrefixFrom(v6, 128))
	if !ok4 || !ok6 || e4.Proto != 201 || e6.Proto != 201 || e4.LinkIndex != idx {
		t.Fatalf("added addresses: %+v %+v", e4, e6)
	}
	if e4.Flags&unix.IFA_F_NOPREFIXROUTE == 0 || e4.Flags&unix.IFA_F_DEPRECATED != 0 {
		t.Fatalf("IPv4 flags %#x", e4.Flags)
	}
	if e6.Flags&unix.IFA_F_NODAD == 0 || e6.Flags&unix.IFA_F_DEPRECATED == 0 || e6.Flags&unix.IFA_F_TENTATIVE != 0 {
		t.Fatalf("IPv6 flags %#x: want nodad, deprecated, not tentative", e6.Flags)
	}
	if out := ns.Exec(t, "ip", "-6", "addr", "show", "dev", "eth0"); !strings.Contains(out, "fd00:18::50/128") || !strings.Contains(out, "valid_lft forever preferred_lft 0sec") {
		t.Fatalf("ip addr:\n%s", out)
	}
	for _, p := range []netip.Prefix{netip.PrefixFrom(v4, 32), netip.PrefixFrom(v6, 128)} {
		if err := ns.Do(func() error { return Delete(idx, p) }); err != nil {
			t.Fatal(err)
		}
		if _, ok := find(p); ok {
			t.Fatalf("%s still there after Delete", p)
		}
	}
	if _, ok := find(netip.MustParsePrefix("172.18.0.10/16")); !ok {
		t.Fatal("foreign address gone")
	}
}
