package master

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// lingerGrace is how long, after a zone stops listing an egress IP as lingering,
// its SNAT rows for that IP stay: the time the other zones have to see the Node
// update and stop rerouting to it (docs/interconnect.md, "Moves across zones").
const lingerGrace = 2 * time.Second

// readStatus is a zone controller's status decision: the status every EgressIP
// has (written by the cluster manager), nothing to write.
func readStatus(in statusInput) statusDecision {
	d := statusDecision{kept: make(map[string][]egressipv1.EgressIPStatusItem, len(in.eips)), problems: map[string][]assign.Problem{}}
	for _, e := range in.eips {
		d.kept[e.Name] = in.current(e).status.Items
	}
	return d
}

// lingerTimes are when a released egress IP stops being listed as lingering, and
// when its rows go.
type lingerTimes struct{ listUntil, rowsUntil time.Time }

// zoneMemory is a zone controller's memory of the egress IPs its node held and
// released (shared gateway mode), and (local gateway mode) the released IPs whose
// rows its last sync kept, as derived from its node daemon's published linger.
type zoneMemory struct {
	started  bool
	held     map[netip.Addr]bool
	released map[netip.Addr]lingerTimes
	kept     map[netip.Addr]bool
}

// heldBy returns the egress IPs the status gives node.
func heldBy(items map[string][]egressipv1.EgressIPStatusItem, node string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, its := range items {
		for _, it := range its {
			if it.Node != node {
				continue
			}
			if ip, err := netip.ParseAddr(it.EgressIP); err == nil {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

// zoneLinger updates what the zone's node lingers on (zoneMemory.linger) and logs
// each egress IP its node has just released.
func (c *controller) zoneLinger(items map[string][]egressipv1.EgressIPStatusItem, nodes map[string]nbstate.Node, now time.Time) time.Time {
	wake, released := c.zone.linger(c.s.Zone, c.s.mode, c.s.linger, items, nodes, now)
	for _, ip := range released {
		klog.InfoS("Egress IP released by this zone's node; its rows stay while it lingers", "zone", c.s.Zone, "ip", ip,
			"listedFor", c.s.linger, "rowsFor", c.zone.released[ip].rowsUntil.Sub(now))
	}
	return wake
}

// linger updates what zone's node lingers on, for the status items given. In
// shared gateway mode an egress IP the status took away from it keeps its SNAT
// rows (and the reroutes of every pod it served to this gateway router) for the
// release linger plus lingerGrace, and is listed as lingering for the release
// linger; a memory that has not started (a restarted controller, or explain) takes
// what its node still lists (ready or lingering) but does not hold as released now.
// In local gateway mode the node daemon's published linger decides (lingerLocal). It
// sets the zone node's LingeringEgressIPs in nodes to the IPs whose rows stay, and
// returns when the next linger step falls due (zero: none) and the IPs released now.
func (zm *zoneMemory) linger(zone string, mode gwmode.Mode, linger time.Duration, items map[string][]egressipv1.EgressIPStatusItem,
	nodes map[string]nbstate.Node, now time.Time) (time.Time, []netip.Addr) {
	held := heldBy(items, zone)
	if mode == gwmode.Local {
		return zm.lingerLocal(zone, held, nodes, now), nil
	}
	self, ok := nodes[zone]
	if !zm.started {
		zm.started, zm.released = true, map[netip.Addr]lingerTimes{}
		zm.held = map[netip.Addr]bool{}
		if ok {
			for ip := range self.ReadyEgressIPs {
				zm.held[ip] = true
			}
			for ip := range self.LingeringEgressIPs {
				zm.held[ip] = true
			}
		}
	}
	var released []netip.Addr
	for ip := range zm.held {
		if !held[ip] {
			if _, was := zm.released[ip]; !was && linger > 0 {
				until := now.Add(linger)
				// others stop rerouting here once it is no longer listed
				zm.released[ip] = lingerTimes{listUntil: until, rowsUntil: until.Add(lingerGrace)}
				released = append(released, ip)
			}
		}
	}
	zm.held = held
	var wake time.Time
	rows := map[netip.Addr]bool{}
	for ip, t := range zm.released {
		switch {
		case held[ip] || !now.Before(t.rowsUntil):
			delete(zm.released, ip)
		default:
			rows[ip] = true
			next := t.rowsUntil
			if now.Before(t.listUntil) {
				next = t.listUntil
			}
			wake = earliest(wake, next)
		}
	}
	if ok {
		self.LingeringEgressIPs = rows
		nodes[zone] = self
	}
	return wake, released
}

// lingerLocal is linger in local gateway mode. The zone's node daemon publishes
// what it still SNATs after a release and until when (nbstate.Lingers), and every
// zone reroutes to it no longer than that end. The zone keeps the reroutes of the
// other zones' pods to its node's management port until lingerGrace after that end
// (the other zones commit their change after it), and lists those IPs in its node's
// EgressIPsRerouted (publishZone), so that the node daemon keeps its SNAT rules until
// these rows are gone. Nothing here is a clock of its own: a restarted zone
// controller (and explain) derives the same from the Node.
func (zm *zoneMemory) lingerLocal(zone string, held map[netip.Addr]bool, nodes map[string]nbstate.Node, now time.Time) time.Time {
	zm.kept = map[netip.Addr]bool{}
	self, ok := nodes[zone]
	if !ok {
		return time.Time{}
	}
	var wake time.Time
	consider := func(ip netip.Addr) {
		if held[ip] || zm.kept[ip] {
			return
		}
		lingers, until := nbstate.Lingers(self, ip, now)
		switch {
		case until.IsZero():
			zm.kept[ip] = lingers // still listed ready: the daemon has not taken the release in
		case now.Before(until.Add(lingerGrace)):
			zm.kept[ip] = true
			wake = earliest(wake, until.Add(lingerGrace))
		}
	}
	for ip := range self.LingeringUntil {
		consider(ip)
	}
	for ip := range self.ListedReady {
		consider(ip)
	}
	for ip := range self.ReadyEgressIPs {
		consider(ip)
	}
	self.LingeringEgressIPs = zm.kept
	nodes[zone] = self
	return wake
}

// publishZone writes, after a committed transaction, the zone node's SNAT-ready
// list: the IPs it holds whose rows for every pod they serve are now in NB (shared
// gateway mode: the SNAT rows on its gateway router; local gateway mode: the
// reroutes of the pods to its management port, where its node daemon SNATs). None
// while its routers are not among routers, as this sync read them. In shared
// gateway mode also its lingering list; in local gateway mode what it reroutes to
// the node (the node daemon publishes its own linger). Only what differs from what
// the Node carries is written.
func (c *controller) publishZone(ctx context.Context, nodes []*corev1.Node, items map[string][]egressipv1.EgressIPStatusItem,
	routers map[string]bool) error {
	var self *corev1.Node
	for _, n := range nodes {
		if n.Name == c.s.Zone {
			self = n
		}
	}
	if self == nil {
		return nil // not registered yet: the Node's add event syncs again
	}
	ready := heldBy(items, c.s.Zone)
	if c.s.mode == gwmode.Local {
		// Rows for an IP are written once the node daemon lists it (nexthop): hold
		// back what it does not list yet.
		host, err := annotations.ParseEgressIPsReady(self)
		if err != nil {
			host = nil
		}
		for ip := range ready {
			if !host[ip] {
				delete(ready, ip)
			}
		}
	}
	if !routers[nbstate.ClusterRouter] || (c.s.mode == gwmode.Shared && !routers[nbstate.GatewayRouter(c.s.Zone)]) {
		ready = map[netip.Addr]bool{} // no row of ours could be written
	}
	now := time.Now()
	lingering := map[netip.Addr]bool{}
	for ip, t := range c.zone.released {
		if now.Before(t.listUntil) {
			lingering[ip] = true
		}
	}
	want := map[string]string{annotations.EgressIPsSNATReady: annotations.FormatEgressIPsReady(ready)}
	if c.s.mode == gwmode.Shared {
		want[annotations.EgressIPsLingering] = annotations.FormatEgressIPsReady(lingering)
	} else {
		// What this zone still reroutes to the node's management port: the IPs it
		// holds and the released ones whose rows it keeps (zoneMemory.lingerLocal). Written
		// after the commit, so narrowed only once those rows are gone.
		rerouted := maps.Clone(ready)
		maps.Copy(rerouted, c.zone.kept)
		want[annotations.EgressIPsRerouted] = annotations.FormatEgressIPsReady(rerouted)
	}
	patch := map[string]any{}
	for k, v := range want {
		if self.Annotations[k] != v {
			patch[k] = v
		}
	}
	if len(patch) == 0 {
		return nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch}})
	if err != nil {
		return err
	}
	if _, err := c.s.Kube.CoreV1().Nodes().Patch(ctx, c.s.Zone, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("node %s: publish %s: %w", c.s.Zone, strings.Join(slices.Sorted(maps.Keys(patch)), ", "), err)
	}
	klog.V(2).InfoS("Zone published its egress IPs", "node", c.s.Zone, "snatReady", want[annotations.EgressIPsSNATReady],
		"lingering", want[annotations.EgressIPsLingering], "rerouted", want[annotations.EgressIPsRerouted])
	return nil
}
