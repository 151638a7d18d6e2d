package node

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/addr"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iproute"
)

// fakeWriters implements every host writer in memory and logs each call in order.
type fakeWriters struct {
	log   []string
	addrs []addr.Entry
	// Failures to inject.
	listErr, guardErr, routesErr, snatErr error
	addErr                                map[netip.Addr]error
	announceErr                           map[netip.Addr]error
	dropMark                              bool // the "kernel" forgets IFA_PROTO
}

func (f *fakeWriters) List() ([]addr.Entry, error) {
	return slices.Clone(f.addrs), f.listErr
}

func (f *fakeWriters) AddHost(link int, ip netip.Addr) error {
	f.log = append(f.log, "add "+ip.String())
	if err := f.addErr[ip]; err != nil {
		return err
	}
	p := netip.PrefixFrom(ip, ip.BitLen())
	for _, e := range f.addrs {
		if e.LinkIndex == link && e.Prefix == p {
			return unix.EEXIST
		}
	}
	proto := hostinfo.Proto
	if f.dropMark {
		proto = 0
	}
	f.addrs = append(f.addrs, addr.Entry{LinkIndex: link, Prefix: p, Proto: proto})
	return nil
}

func (f *fakeWriters) Delete(link int, p netip.Prefix) error {
	f.log = append(f.log, "delete "+p.Addr().String())
	for i, e := range f.addrs {
		if e.LinkIndex == link && e.Prefix == p {
			f.addrs = slices.Delete(f.addrs, i, i+1)
			return nil
		}
	}
	return unix.EADDRNOTAVAIL
}

func (f *fakeWriters) Sync(rules []hostegress.Rule, routes []hostegress.Route) (iproute.Stats, error) {
	f.log = append(f.log, fmt.Sprintf("routes %d/%d", len(rules), len(routes)))
	return iproute.Stats{}, f.routesErr
}

func (f *fakeWriters) SyncSNAT(rules []hostegress.SNAT) error {
	f.log = append(f.log, fmt.Sprintf("snat %d", len(rules)))
	return f.snatErr
}

func (f *fakeWriters) SyncGuard(addrs []hostegress.Address) error {
	var ips []string
	for _, a := range addrs {
		ips = append(ips, a.IP.String())
	}
	f.log = append(f.log, "guard "+strings.Join(ips, ","))
	return f.guardErr
}

func (f *fakeWriters) Announce(_ string, ip netip.Addr) error {
	f.log = append(f.log, "announce "+ip.String())
	return f.announceErr[ip]
}

func fakeLinuxHost(f *fakeWriters) *linuxHost {
	return &linuxHost{inNetns: func(fn func() error) error { return fn() },
		addrs: f, routes: f, rules: f, announce: f, announced: map[addrKey]bool{}}
}

var (
	ipA, ipB = netip.MustParseAddr("172.18.0.50"), netip.MustParseAddr("fd00:18::50")
	addrA    = hostegress.Address{IP: ipA, LinkIndex: 2, Link: "eth0", EgressIP: "a"}
	addrB    = hostegress.Address{IP: ipB, LinkIndex: 2, Link: "eth0", EgressIP: "b"}
)

func set(ips ...netip.Addr) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, ip := range ips {
		out[ip] = true
	}
	return out
}

func TestReadyIPs(t *testing.T) {
	both := []hostegress.Address{addrA, addrB}
	all := map[addrKey]bool{keyOf(addrA): true, keyOf(addrB): true}
	onlyA := map[addrKey]bool{keyOf(addrA): true}
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		want []hostegress.Address
		rep  applyReport
		out  map[netip.Addr]bool
	}{
		{"all done", both, applyReport{held: all, announced: all}, set(ipA, ipB)},
		{"nothing reported", both, applyReport{}, set()},
		{"held, not announced", both, applyReport{held: all, announced: onlyA}, set(ipA)},
		{"announced earlier, not held now", both, applyReport{held: onlyA, announced: all}, set(ipA)},
		{"guard failed", both, applyReport{held: all, announced: all, guardErr: boom}, set()},
		{"policy routing failed", both, applyReport{held: all, announced: all, routesErr: boom}, set()},
		{"SNAT failed", both, applyReport{held: all, announced: all, snatErr: boom}, set()},
		{"not wanted is never ready", []hostegress.Address{addrB}, applyReport{held: all, announced: all}, set(ipB)},
		{"nothing wanted", nil, applyReport{held: all, announced: all}, set()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := readyIPs(tc.want, tc.rep); !maps.Equal(got, tc.out) {
				t.Fatalf("readyIPs = %v, want %v", got, tc.out)
			}
		})
	}
}

// TestApplyWithFakeWriters checks linuxHost.Apply without root: the order of the
// writes (guard before the address appears, announcements after SNAT, deletions
// last) and the readiness it reports from what the writers said.
func TestApplyWithFakeWriters(t *testing.T) {
	stale := netip.MustParsePrefix("172.18.0.99/32")
	foreign := netip.MustParsePrefix("172.18.0.77/32")
	st := hostegress.State{Addresses: []hostegress.Address{addrA, addrB},
		SNAT: []hostegress.SNAT{{PodIP: netip.MustParseAddr("10.244.1.3"), EgressIPAddr: ipA, Link: "eth0", EgressIP: "a"}}}

	t.Run("order", func(t *testing.T) {
		f := &fakeWriters{addrs: []addr.Entry{
			{LinkIndex: 2, Prefix: stale, Proto: hostinfo.Proto}, {LinkIndex: 2, Prefix: foreign}}}
		ready, err := fakeLinuxHost(f).Apply(st)
		if err != nil || !maps.Equal(ready, set(ipA, ipB)) {
			t.Fatalf("ready %v, err %v", ready, err)
		}
		want := []string{"guard 172.18.0.50,fd00:18::50", "add 172.18.0.50", "add fd00:18::50", "routes 0/0", "snat 1",
			"announce 172.18.0.50", "announce fd00:18::50", "delete 172.18.0.99"}
		if !slices.Equal(f.log, want) {
			t.Fatalf("writes:\n%s\nwant:\n%s", strings.Join(f.log, "\n"), strings.Join(want, "\n"))
		}
	})
	t.Run("announced once per process", func(t *testing.T) {
		f := &fakeWriters{}
		h := fakeLinuxHost(f)
		if _, err := h.Apply(st); err != nil {
			t.Fatal(err)
		}
		f.log = nil
		ready, err := h.Apply(st)
		if err != nil || !maps.Equal(ready, set(ipA, ipB)) || slices.ContainsFunc(f.log, func(s string) bool { return strings.HasPrefix(s, "announce") }) {
			t.Fatalf("second Apply: ready %v, err %v, writes %v", ready, err, f.log)
		}
	})
	for _, tc := range []struct {
		name   string
		inject func(*fakeWriters)
		ready  map[netip.Addr]bool
	}{
		{"guard fails", func(f *fakeWriters) { f.guardErr = errors.New("guard") }, set()},
		{"routes fail", func(f *fakeWriters) { f.routesErr = errors.New("routes") }, set()},
		{"snat fails", func(f *fakeWriters) { f.snatErr = errors.New("snat") }, set()},
		{"list fails", func(f *fakeWriters) { f.listErr = errors.New("list") }, set()},
		{"one add fails", func(f *fakeWriters) { f.addErr = map[netip.Addr]error{ipB: errors.New("add")} }, set(ipA)},
		{"address exists, not ours", func(f *fakeWriters) {
			f.addrs = []addr.Entry{{LinkIndex: 2, Prefix: netip.PrefixFrom(ipB, 128)}}
		}, set(ipA)},
		{"one announce fails", func(f *fakeWriters) { f.announceErr = map[netip.Addr]error{ipA: errors.New("garp")} }, set(ipB)},
		{"kernel drops the mark", func(f *fakeWriters) { f.dropMark = true }, set()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWriters{}
			tc.inject(f)
			ready, err := fakeLinuxHost(f).Apply(st)
			if !maps.Equal(ready, tc.ready) {
				t.Fatalf("ready %v, want %v (writes %v)", ready, tc.ready, f.log)
			}
			if len(tc.ready) < 2 && err == nil && tc.name != "address exists, not ours" {
				t.Fatalf("no error reported")
			}
		})
	}
}
