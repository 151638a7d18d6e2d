package nbstate

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

func TestLingers(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	ip := netip.MustParseAddr("172.18.0.50")
	for _, tc := range []struct {
		name      string
		node      Node
		want      bool
		wantUntil time.Time
	}{
		{name: "nothing published", node: Node{}, want: false},
		{name: "lingering, end ahead", node: Node{LingeringUntil: map[netip.Addr]time.Time{ip: now.Add(time.Second)}}, want: true, wantUntil: now.Add(time.Second)},
		{name: "lingering, end reached", node: Node{LingeringUntil: map[netip.Addr]time.Time{ip: now}}, want: false, wantUntil: now},
		{name: "lingering, end passed, still listed ready", node: Node{LingeringUntil: map[netip.Addr]time.Time{ip: now.Add(-time.Second)},
			ReadyEgressIPs: map[netip.Addr]bool{ip: true}}, want: false, wantUntil: now.Add(-time.Second)},
		{name: "still listed ready (release not taken in yet)", node: Node{ReadyEgressIPs: map[netip.Addr]bool{ip: true}}, want: true},
		{name: "another IP lingers", node: Node{LingeringUntil: map[netip.Addr]time.Time{netip.MustParseAddr("172.18.0.51"): now.Add(time.Hour)}}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, until := Lingers(tc.node, ip, now)
			if got != tc.want || !until.Equal(tc.wantUntil) {
				t.Errorf("Lingers = %v, %v; want %v, %v", got, until, tc.want, tc.wantUntil)
			}
		})
	}
}

// Centralized layout, local gateway mode: with no ready holder, the pods are rerouted to the nodes whose published
// linger covers now, never past its end; strict drops after it.
func TestRoutesLingerFallback(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	ip := netip.MustParseAddr("172.18.0.50")
	for _, tc := range []struct {
		name     string
		lingerB  time.Duration // node-b's published end, relative to now (0: none)
		readyC   bool          // node-c still lists ip ready (not assigned)
		lingerC  time.Duration // node-c's published end, relative to now (0: none)
		assignA  bool          // node-a holds ip and lists it ready
		wantHops []string
		wantDrop bool
		wantEnd  time.Time
	}{
		{name: "linger ahead", lingerB: time.Second, wantHops: []string{"10.244.2.2"}, wantEnd: now.Add(time.Second)},
		{name: "linger ended", lingerB: -time.Millisecond, wantDrop: true},
		{name: "no facts", wantDrop: true},
		{name: "old holder still lists it ready", readyC: true, wantHops: []string{"10.244.3.2"}},
		// One node per IP, the last to release it (node-c has not even taken the release in): the address answers
		// there only, so traffic spread over both would lose half of its connections' replies.
		{name: "both: the last to release", lingerB: time.Second, readyC: true, wantHops: []string{"10.244.3.2"}, wantEnd: now.Add(time.Second)},
		{name: "two published ends: the later", lingerB: time.Second, lingerC: 2 * time.Second, wantHops: []string{"10.244.3.2"}, wantEnd: now.Add(time.Second)},
		{name: "two published ends: the later (other order)", lingerB: 3 * time.Second, lingerC: 2 * time.Second, wantHops: []string{"10.244.2.2"}, wantEnd: now.Add(2 * time.Second)},
		{name: "a ready holder wins", lingerB: time.Second, assignA: true, wantHops: []string{"10.244.1.2"}, wantEnd: now.Add(time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := readyNodes(nil)
			e := EgressIP{Name: "prod", IPs: []netip.Addr{ip}, Strict: true}
			if tc.lingerB != 0 {
				n := nodes["node-b"]
				n.LingeringUntil = map[netip.Addr]time.Time{ip: now.Add(tc.lingerB)}
				nodes["node-b"] = n
			}
			if tc.readyC {
				nodes["node-c"].ReadyEgressIPs[ip] = true
			}
			if tc.lingerC != 0 {
				n := nodes["node-c"]
				n.LingeringUntil = map[netip.Addr]time.Time{ip: now.Add(tc.lingerC)}
				nodes["node-c"] = n
			}
			if tc.assignA {
				nodes["node-a"].ReadyEgressIPs[ip] = true
				e.Assigned = []Assignment{{Node: "node-a", IP: ip}}
			}
			in := Input{Mode: gwmode.Local, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"), Nodes: nodes, Now: now}
			r := Routes(in, e)["ip4"]
			if !slices.Equal(r.Nexthops, tc.wantHops) || r.Drop != tc.wantDrop {
				t.Errorf("route %+v; want next hops %v, drop %v", r, tc.wantHops, tc.wantDrop)
			}
			if got := LingerEnd(in, e); !got.Equal(tc.wantEnd) {
				t.Errorf("LingerEnd = %v, want %v", got, tc.wantEnd)
			}
		})
	}
}
