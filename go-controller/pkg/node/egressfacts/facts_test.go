package egressfacts

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

var mp = netip.MustParsePrefix

func snap() hostinfo.Snapshot {
	return hostinfo.Snapshot{
		Links: []hostinfo.Link{
			{Index: 1, Name: "lo", Loopback: true, Addrs: []hostinfo.Addr{{Prefix: mp("127.0.0.1/8")}, {Prefix: mp("::1/128")}}},
			{Index: 2, Name: "eth0", Addrs: []hostinfo.Addr{
				{Prefix: mp("172.18.0.50/32"), Ours: true}, // our egress IP, listed first on purpose
				{Prefix: mp("172.18.0.10/16")},
				{Prefix: mp("172.18.0.11/16"), Secondary: true},
				{Prefix: mp("fd00:18::50/128"), Ours: true},
				{Prefix: mp("fe80::1/64")},
				{Prefix: mp("fd00:18::10/64")},
			}},
			{Index: 3, Name: "eth1", Addrs: []hostinfo.Addr{
				{Prefix: mp("192.168.50.10/24")},
				{Prefix: mp("192.168.50.60/32")}, // not ours, but equal to an EgressIP status item
			}},
		},
		Routes: []hostinfo.Route{
			{Dst: mp("0.0.0.0/0"), LinkIndex: 3, Metric: 200},
			{Dst: mp("0.0.0.0/0"), LinkIndex: 2, Metric: 100},
			{Dst: mp("::/0"), LinkIndex: 3, Metric: 1},
		},
	}
}

func TestGatewayLink(t *testing.T) {
	s := snap()
	for _, tc := range []struct {
		name, override, want, err string
		routes                    []hostinfo.Route
	}{
		{name: "best IPv4 default route wins over IPv6 and higher metric", want: "eth0"},
		{name: "override", override: "eth1", want: "eth1"},
		{name: "override names a missing link", override: "nope", err: `"nope"`},
		{name: "IPv6 only", routes: s.Routes[2:], want: "eth1"},
		{name: "no default route", routes: []hostinfo.Route{}, err: "no default route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := snap()
			if tc.routes != nil {
				in.Routes = tc.routes
			}
			l, err := GatewayLink(in, tc.override)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want error containing %q", err, tc.err)
				}
				return
			}
			if err != nil || l.Name != tc.want {
				t.Fatalf("got %q, %v; want %q", l.Name, err, tc.want)
			}
		})
	}
}

func TestCompute(t *testing.T) {
	s := snap()
	eth0, _ := s.LinkByName("eth0")
	eips := map[netip.Addr]bool{netip.MustParseAddr("192.168.50.60"): true, netip.MustParseAddr("172.18.0.50"): true}
	f := Compute(s, eth0, eips)
	want := Facts{
		Primary: annotations.DualPrefix{V4: mp("172.18.0.10/16"), V6: mp("fd00:18::10/64")},
		HostCIDRs: []netip.Prefix{
			mp("172.18.0.10/16"), mp("172.18.0.11/16"), mp("192.168.50.10/24"), mp("fd00:18::10/64"),
		},
	}
	if !reflect.DeepEqual(f, want) {
		t.Fatalf("got  %+v\nwant %+v", f, want)
	}
	// Only a host address on the gateway link: it is still the primary (nothing better).
	only := hostinfo.Link{Name: "x", Addrs: []hostinfo.Addr{{Prefix: mp("10.0.0.5/32")}}}
	if got := Compute(hostinfo.Snapshot{}, only, nil).Primary.V4; got != mp("10.0.0.5/32") {
		t.Fatalf("primary of a /32-only link: %v", got)
	}
}

func TestPatch(t *testing.T) {
	f := Facts{
		Primary:   annotations.DualPrefix{V4: mp("172.18.0.10/16")},
		HostCIDRs: []netip.Prefix{mp("172.18.0.10/16"), mp("fd00::1/64")},
	}
	patch, changed := Patch(nil, f)
	if !changed {
		t.Fatal("empty annotations: want a patch")
	}
	var got struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &got); err != nil {
		t.Fatal(err)
	}
	a := got.Metadata.Annotations
	if *a[annotations.PrimaryIfAddr] != `{"ipv4":"172.18.0.10/16"}` || *a[annotations.HostCIDRs] != `["172.18.0.10/16","fd00::1/64"]` {
		t.Fatalf("patch %s", patch)
	}
	// The shared parser reads back what we write.
	if d, err := annotations.ParseIfAddr(*a[annotations.PrimaryIfAddr]); err != nil || d != f.Primary {
		t.Fatalf("round trip: %v %v", d, err)
	}

	current := map[string]string{
		annotations.PrimaryIfAddr: `{"ipv4": "172.18.0.10/16"}`, // same value, other spacing
		annotations.HostCIDRs:     `["172.18.0.10/16","fd00::1/64"]`,
		"other":                   "kept",
	}
	if p, changed := Patch(current, f); changed {
		t.Fatalf("equal facts: unexpected patch %s", p)
	}
	current[annotations.HostCIDRs] = `["172.18.0.10/16"]`
	p, changed := Patch(current, f)
	if !changed || strings.Contains(string(p), annotations.PrimaryIfAddr) || strings.Contains(string(p), "other") {
		t.Fatalf("only host-cidrs should change: %s %v", p, changed)
	}
	// No primary address any more: the annotation is removed (null in a merge patch).
	p, changed = Patch(current, Facts{})
	if !changed || !strings.Contains(string(p), `"`+annotations.PrimaryIfAddr+`":null`) || !strings.Contains(string(p), `"`+annotations.HostCIDRs+`":"[]"`) {
		t.Fatalf("removal patch %s", p)
	}
}
