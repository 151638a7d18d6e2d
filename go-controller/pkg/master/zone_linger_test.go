package master

import (
	"net/netip"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// TestZoneLingerLocal: interconnect layout, local gateway mode. The old holder's zone keeps the other zones'
// reroutes to its management port while its node daemon publishes that it still SNATs the IP, and lingerGrace
// past the published end (the other zones stop rerouting at that end, in their next commit); what it keeps is what
// it lists as rerouted to the node, so that the node keeps its SNAT rules as long. All of it from the Node: a
// restarted zone controller keeps the same.
func TestZoneLingerLocal(t *testing.T) {
	x, y := netip.MustParseAddr("172.18.0.50"), netip.MustParseAddr("172.18.0.51")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	end := t0.Add(5 * time.Second)
	for _, tc := range []struct {
		name     string
		now      time.Time
		held     map[netip.Addr]bool
		listed   map[netip.Addr]bool // the node daemon's egress-ips-ready
		until    map[netip.Addr]time.Time
		wantKept []netip.Addr
		wantWake time.Time
	}{
		{name: "released, the daemon has not taken it in (still lists it ready): kept, no end known yet",
			now: t0, listed: map[netip.Addr]bool{x: true}, wantKept: []netip.Addr{x}},
		{name: "held: not a linger", now: t0, held: map[netip.Addr]bool{x: true}, listed: map[netip.Addr]bool{x: true}},
		{name: "within the published linger: kept until the end plus the grace",
			now: t0, until: map[netip.Addr]time.Time{x: end}, wantKept: []netip.Addr{x}, wantWake: end.Add(lingerGrace)},
		{name: "past the end, within the grace: still kept",
			now: end.Add(time.Second), until: map[netip.Addr]time.Time{x: end}, wantKept: []netip.Addr{x}, wantWake: end.Add(lingerGrace)},
		{name: "past the end and the grace: gone",
			now: end.Add(lingerGrace), until: map[netip.Addr]time.Time{x: end}},
		{name: "two lingers: the earlier one wakes first",
			now: t0, until: map[netip.Addr]time.Time{x: end, y: end.Add(-time.Second)}, wantKept: []netip.Addr{x, y},
			wantWake: end.Add(-time.Second).Add(lingerGrace)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &controller{s: settings{mode: gwmode.Local}}
			c.s.Zone = "node3"
			nodes := map[string]nbstate.Node{"node3": {Name: "node3", ReadyEgressIPs: tc.listed, ListedReady: tc.listed, LingeringUntil: tc.until}}
			wake := c.zone.lingerLocal(c.s.Zone, tc.held, nodes, tc.now)
			if !wake.Equal(tc.wantWake) {
				t.Errorf("wake %v, want %v", wake, tc.wantWake)
			}
			got := nodes["node3"].LingeringEgressIPs
			if len(got) != len(tc.wantKept) {
				t.Errorf("kept %v, want %v", got, tc.wantKept)
			}
			for _, ip := range tc.wantKept {
				if !got[ip] || !c.zone.kept[ip] {
					t.Errorf("kept %v (memory %v), want %v", got, c.zone.kept, tc.wantKept)
				}
			}
		})
	}
}
