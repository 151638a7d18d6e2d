package master

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// TestZoneLingerLocal: interconnect layout, local gateway mode. The old holder's zone keeps the other zones'
// reroutes to its management port while its node daemon publishes that it still SNATs the IP, and nbstate.LingerGrace
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
			now: t0, until: map[netip.Addr]time.Time{x: end}, wantKept: []netip.Addr{x}, wantWake: end.Add(nbstate.LingerGrace)},
		{name: "past the end, within the grace: still kept",
			now: end.Add(time.Second), until: map[netip.Addr]time.Time{x: end}, wantKept: []netip.Addr{x}, wantWake: end.Add(nbstate.LingerGrace)},
		{name: "past the end and the grace: gone",
			now: end.Add(nbstate.LingerGrace), until: map[netip.Addr]time.Time{x: end}},
		{name: "two lingers: the earlier one wakes first",
			now: t0, until: map[netip.Addr]time.Time{x: end, y: end.Add(-time.Second)}, wantKept: []netip.Addr{x, y},
			wantWake: end.Add(-time.Second).Add(nbstate.LingerGrace)},
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

// TestZoneLingerShared: interconnect layout, shared gateway mode. The old holder's zone sets the end of a release's
// linger once, when it sees the release, and from then on reads it from its Node (what publishZone wrote): it keeps
// its SNAT rows until nbstate.LingerGrace past that end and lists the IP with its end for as long. A memory that did
// not see the release (a restarted zone controller, explain) decides the same from the Node: it starts no linger of
// its own for an IP whose end is published.
func TestZoneLingerShared(t *testing.T) {
	x := netip.MustParseAddr("172.18.0.50")
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const linger = 5 * time.Second
	end := t0.Add(linger)
	for _, tc := range []struct {
		name     string
		now      time.Time
		held     bool
		listed   bool // egress-ips-snat-ready
		until    map[netip.Addr]time.Time
		pending  map[netip.Addr]time.Time
		wantEnd  time.Time // zero: no rows kept
		wantWake time.Time
		released bool
	}{
		{name: "held: not a linger", now: t0, held: true, listed: true},
		{name: "released, still listed ready: the linger starts now", now: t0, listed: true,
			wantEnd: end, wantWake: end.Add(nbstate.LingerGrace), released: true},
		{name: "released, still listed ready, end set by an earlier sync: that end, not a new one", now: t0.Add(time.Second), listed: true,
			pending: map[netip.Addr]time.Time{x: end}, wantEnd: end, wantWake: end.Add(nbstate.LingerGrace)},
		{name: "published end, a memory that never saw the release (restart, explain): the published end", now: t0.Add(3 * time.Second),
			until: map[netip.Addr]time.Time{x: end}, wantEnd: end, wantWake: end.Add(nbstate.LingerGrace)},
		{name: "past the published end, within the grace: rows kept", now: end.Add(time.Second),
			until: map[netip.Addr]time.Time{x: end}, wantEnd: end, wantWake: end.Add(nbstate.LingerGrace)},
		{name: "past the published end and the grace: gone", now: end.Add(nbstate.LingerGrace), until: map[netip.Addr]time.Time{x: end}},
		{name: "published end, held again: not a linger", now: t0, held: true, listed: true, until: map[netip.Addr]time.Time{x: end}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var zm zoneMemory
			zm.pending = tc.pending
			self := nbstate.Node{Name: "node1", LingeringUntil: tc.until}
			if tc.listed {
				self.ListedReady = map[netip.Addr]bool{x: true}
				self.ReadyEgressIPs = self.ListedReady
			}
			held := map[netip.Addr]bool{}
			if tc.held {
				held[x] = true
			}
			nodes := map[string]nbstate.Node{"node1": self}
			wake, released := zm.lingerShared("node1", linger, held, nodes, tc.now)
			if !wake.Equal(tc.wantWake) {
				t.Errorf("wake %v, want %v", wake, tc.wantWake)
			}
			if (len(released) > 0) != tc.released {
				t.Errorf("released now %v, want %v", released, tc.released)
			}
			kept := nodes["node1"].LingeringEgressIPs[x]
			if kept != !tc.wantEnd.IsZero() || !zm.lingering[x].Equal(tc.wantEnd) {
				t.Errorf("rows kept %v, published end %v; want end %v", kept, zm.lingering[x], tc.wantEnd)
			}
			if ok, until := nbstate.Lingers(nodes["node1"], x, tc.now); !tc.held && !tc.wantEnd.IsZero() && (!until.Equal(tc.wantEnd) || ok != tc.now.Before(tc.wantEnd)) {
				t.Errorf("own node lingers %v until %v, want until %v", ok, until, tc.wantEnd)
			}
		})
	}
}

// lingerEnd reads the linger end node publishes for ip (zero: none, or it does not parse).
func (ic *icEnv) lingerEnd(node string, ip netip.Addr) time.Time {
	n, err := ic.cm.kube.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		ic.cm.t.Fatal(err)
	}
	ends, err := annotations.ParseLingering(n)
	if err != nil {
		ic.cm.t.Logf("node %s: %v", node, err)
	}
	return ends[ip]
}

// moveOffNode1 starts the interconnect layout in shared gateway mode with eip-prod (172.18.0.33) on node1, moves
// it to node2 and returns when node1 lists it as lingering (and that time).
func moveOffNode1(t *testing.T, linger time.Duration) (*icEnv, time.Time) {
	ic := newICEnv(t, gwmode.Shared)
	cm := ic.cm
	ic.startWebPods(linger)
	cm.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	cm.expectStatus("eip-prod", "172.18.0.33@node1")
	cm.eventually("node1 lists the IP SNAT-ready", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsSNATReady); got != `["172.18.0.33"]` {
			return fmt.Errorf("%s = %q", annotations.EgressIPsSNATReady, got)
		}
		return nil
	})
	cm.updateNode("node1", unlabelAssignable)
	cm.expectStatus("eip-prod", "172.18.0.33@node2")
	var seen time.Time
	cm.eventually("node1 lists the IP as lingering", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsLingering); got != `["172.18.0.33"]` {
			return fmt.Errorf("%s = %q", annotations.EgressIPsLingering, got)
		}
		seen = time.Now()
		return nil
	})
	return ic, seen
}

// noSNATSince waits until zone z has no SNAT row and returns when it saw that.
func noSNATSince(t *testing.T, z *env, what string) time.Time {
	t.Helper()
	var gone time.Time
	z.eventually(what, func() error {
		if s := z.snats(); len(s) > 0 {
			return fmt.Errorf("SNAT rows %v", s)
		}
		gone = time.Now()
		return nil
	})
	return gone
}

// TestInterconnectSharedRestartKeepsLingerEnd: interconnect layout, shared gateway mode. The old holder's zone
// controller, restarted during the release linger, keeps the released IP's SNAT rows until the end its zone published
// (plus nbstate.LingerGrace, a constant every reader applies) and not longer: it reads the end from its Node and
// starts no linger of its own, and it publishes the same end again. Before, the zone kept a clock of its own (rows
// for the linger plus 2 s, unpublished) and a restarted zone started it again from the restart.
func TestInterconnectSharedRestartKeepsLingerEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and four ovsdb-servers")
	}
	const linger = 3 * time.Second
	x := netip.MustParseAddr("172.18.0.33")
	ic, seen := moveOffNode1(t, linger)
	z1 := ic.zones["node1"]
	end := ic.lingerEnd("node1", x)
	if end.IsZero() {
		t.Errorf("node1 lists %s as lingering with no end in %s: no other zone, restarted zone or explain can read when its rows go",
			x, annotations.EgressIPsLingeringUntil)
	}
	// Restart node1's zone controller two thirds into the linger (a clock is the event waited for here): a new linger
	// from the restart would keep the rows 2 s past the published one.
	if err := waitfor.Until(context.Background(), 2*linger, 10*time.Millisecond, func() (bool, error) {
		return time.Since(seen) >= 2*linger/3, nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(z1.snats()) == 0 {
		t.Fatal("node1's SNAT rows went before its zone controller was restarted")
	}
	z1.stop()
	ic.startZone("node1", linger)
	restarted := time.Now()
	if got := ic.lingerEnd("node1", x); !got.Equal(end) {
		t.Errorf("the restarted zone published the end %v, want the one published before the restart, %v", got, end)
	}
	gone := noSNATSince(t, z1, "node1's SNAT rows go after the linger")
	t.Logf("move seen lingering at %s; restart %s later; published end %s; rows gone %s after the move was seen lingering",
		seen.Format("15:04:05.000"), restarted.Sub(seen).Round(time.Millisecond), end.Format("15:04:05.000"), gone.Sub(seen).Round(time.Millisecond))
	// The end was set before the test saw it published: rows gone at most linger + grace after that, plus the
	// zone's sync and the test's polling.
	if limit := seen.Add(linger + nbstate.LingerGrace + 500*time.Millisecond); gone.After(limit) {
		t.Errorf("node1's SNAT rows stayed %s after its linger was published, want at most the linger (%s) + %s",
			gone.Sub(seen).Round(time.Millisecond), linger, nbstate.LingerGrace)
	}
	if !end.IsZero() && gone.Before(end.Add(nbstate.LingerGrace)) {
		t.Errorf("node1's SNAT rows went at %s, before the published end %s + %s", gone.Format("15:04:05.000"), end.Format("15:04:05.000"), nbstate.LingerGrace)
	}
	ic.cm.eventually("node1 lists nothing as lingering once its rows went", func() error {
		if got := ic.annotation("node1", annotations.EgressIPsLingering); got != "[]" {
			return fmt.Errorf("%s = %s", annotations.EgressIPsLingering, got)
		}
		return nil
	})
}

// TestInterconnectSharedExplainDuringLinger: interconnect layout, shared gateway mode. Explain's plan of the old
// holder's zone (zoneRows) agrees with that zone's rows throughout the release linger, in the grace after its
// published end, and after the rows went: both read the end from the Node. Only at the end of the grace, for the time
// the zone takes to commit, may they differ.
func TestInterconnectSharedExplainDuringLinger(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd, kube-apiserver and four ovsdb-servers")
	}
	const linger = 2 * time.Second
	x := netip.MustParseAddr("172.18.0.33")
	ic, _ := moveOffNode1(t, linger)
	z1 := ic.zones["node1"]
	// node2's zone has the SNAT: node1's own pod follows, the other zone's pod keeps node1's rows while it lingers.
	z1.expectRows("old holder's zone while it lingers", map[string]string{
		"prod/web1": rr("eip-prod", "10.244.1.5", "100.88.0.3"),
		"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2"),
	}, []string{sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod")})
	end := ic.lingerEnd("node1", x)
	if end.IsZero() {
		t.Errorf("node1 lists %s as lingering with no end in %s", x, annotations.EgressIPsLingeringUntil)
	}
	rowsEnd := end.Add(nbstate.LingerGrace)
	zoneDiff := func(r *EgressIPReport) []string {
		var out []string
		for _, l := range append(slices.Clone(r.NB.Missing), r.NB.Extra...) {
			if strings.HasPrefix(l, "zone node1:") {
				out = append(out, l)
			}
		}
		return out
	}
	var inLinger, inGrace, after int
	err := waitfor.Until(context.Background(), 15*time.Second, 50*time.Millisecond, func() (bool, error) {
		at := time.Now()
		snats := len(z1.snats())
		diff := zoneDiff(ic.explain("eip-prod"))
		done := time.Now() // explain read its clock somewhere in [at, done]
		switch {
		case len(diff) > 0 && !end.IsZero() && !done.Before(rowsEnd) && at.Before(rowsEnd.Add(time.Second)):
			// the zone's commit of the end of the grace (explain's clock may be past it while at is not)
		case len(diff) > 0:
			t.Errorf("explain at %s (published end %s): zone node1 differs: %v", at.Format("15:04:05.000"), end.Format("15:04:05.000"), diff)
		case at.Before(end):
			inLinger++
		case at.Before(rowsEnd):
			inGrace++
		default:
			after++
		}
		return snats == 0 && after > 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("explain agreed with zone node1 %d times in the linger, %d in the grace, %d after", inLinger, inGrace, after)
	if !end.IsZero() && (inLinger == 0 || inGrace == 0) {
		t.Errorf("explain sampled %d times in the linger and %d in the grace, want both", inLinger, inGrace)
	}
	z1.expectRows("old holder's zone after the linger", map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.88.0.3")}, nil)
	if diff := zoneDiff(ic.explain("eip-prod")); len(diff) > 0 {
		t.Errorf("explain after the linger: zone node1 differs: %v", diff)
	}
}
