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

// readStatus is a zone controller's status decision: the status every EgressIP
// has (written by the cluster manager), nothing to write.
func readStatus(in statusInput) statusDecision {
	d := statusDecision{kept: make(map[string][]egressipv1.EgressIPStatusItem, len(in.eips)), problems: map[string][]assign.Problem{}}
	for _, e := range in.eips {
		d.kept[e.Name] = in.current(e).status.Items
	}
	return d
}

// zoneMemory is what a zone controller's last sync derived of the egress IPs its
// node released, from what the node published (nbstate.Lingers, KeepsRows): no
// clock of its own, so a restarted controller (and explain) derives the same.
type zoneMemory struct {
	// pending (shared gateway mode) are the linger ends this zone set for egress
	// IPs its node released and that the Node does not carry yet: set once, when
	// the zone first sees the release, and kept until publishZone's write is read
	// back, so that a sync before that does not move the end.
	pending map[netip.Addr]time.Time
	// lingering (shared gateway mode) are the released egress IPs whose rows the
	// last sync kept, with the end of their linger: what publishZone writes.
	lingering map[netip.Addr]time.Time
	// kept (local gateway mode) are the released egress IPs whose reroutes to the
	// node's management port the last sync kept.
	kept map[netip.Addr]bool
	// seq is NB_Global's nb_cfg as this zone's last commit set it
	// (nbstate.CommitPlanSeq). since is, per egress IP the zone would list
	// SNAT-ready but holds back, the nb_cfg its chassis must have applied first.
	seq   int
	since map[netip.Addr]int
	// unknownLogged: the zone said once that its NB has no NB_Global row.
	unknownLogged bool
}

// applied narrows ready (the egress IPs the zone would list SNAT-ready) to those
// whose rows this zone's chassis has applied: listed already (published), or
// committed at an nb_cfg that NB_Global's hv_cfg has reached (dp). It returns
// the IPs held back. With no NB_Global row (dp not Known) nothing is held back:
// no ovn-northd serves that NB, there is no sequence number to wait for.
func (zm *zoneMemory) applied(ready, published map[netip.Addr]bool, dp nbstate.DataPlane) []netip.Addr {
	since := map[netip.Addr]int{}
	var held []netip.Addr
	for ip := range ready {
		if published[ip] || !dp.Known {
			continue
		}
		// The rows were committed at or before the later of this zone's last
		// commit and NB's nb_cfg; an nb_cfg beyond both is from before a reset.
		floor := max(zm.seq, dp.NBCfg)
		at, ok := zm.since[ip]
		if !ok || at > floor {
			at = floor
		}
		if dp.HVCfg >= at {
			continue
		}
		since[ip] = at
		held = append(held, ip)
		delete(ready, ip)
	}
	zm.since = since
	slices.SortFunc(held, netip.Addr.Compare)
	return held
}

// dataPlaneChanged is called when NB_Global changes: a sync publishes the egress
// IPs held back for the data plane (applied), or narrows what nodes are told is
// rerouted to them (reroutesApplied).
func (c *controller) dataPlaneChanged() {
	if c.waitingDataPlane.Load() || c.waitingNarrow.Load() {
		c.enqueue()
	}
}

// inDataPlane is applied for this zone: it reads NB_Global from the cache, logs
// what it holds back, and arms dataPlaneChanged.
func (c *controller) inDataPlane(ready map[netip.Addr]bool, self *corev1.Node) error {
	// Armed before NB_Global is read: an hv_cfg that arrives after the read queues
	// a sync, and one that arrived before it is in what is read. (Armed after the
	// read, an hv_cfg written in between would be missed until an unrelated sync.)
	c.waitingDataPlane.Store(true)
	dp, err := nbstate.ReadDataPlane(c.nb.Cache())
	if err != nil {
		return fmt.Errorf("zone %s: read NB_Global: %w", c.s.Zone, err)
	}
	if !dp.Known && !c.zone.unknownLogged {
		c.zone.unknownLogged = true
		klog.InfoS("OVN Northbound has no NB_Global row: egress IPs are listed SNAT-ready at commit, without waiting for ovn-controller to apply them",
			"zone", c.s.Zone, "annotation", annotations.EgressIPsSNATReady)
	}
	published, err := annotations.ParseIPList(self, annotations.EgressIPsSNATReady)
	if err != nil {
		published = nil // rewritten below
	}
	held := c.zone.applied(ready, published, dp)
	c.waitingDataPlane.Store(len(held) > 0)
	if len(held) > 0 {
		klog.V(2).InfoS("Egress IPs not listed SNAT-ready until this zone's chassis has applied their rows",
			"zone", c.s.Zone, "ips", held, "hvCfg", dp.HVCfg, "want", c.zone.since[held[0]])
	}
	return nil
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
		end := c.zone.pending[ip]
		klog.InfoS("Egress IP released by this zone's node; its rows stay while it lingers", "zone", c.s.Zone, "ip", ip,
			"lingeringUntil", end, "rowsUntil", end.Add(nbstate.LingerGrace))
	}
	return wake
}

// linger updates what zone's node lingers on, for the status items given, and sets
// the zone node's LingeringEgressIPs in nodes to the IPs whose rows stay
// (nbstate.KeepsRows). In shared gateway mode the zone publishes the linger itself
// (lingerShared); in local gateway mode its node daemon does (lingerLocal). It
// returns when the next linger step falls due (zero: none) and the IPs released now.
func (zm *zoneMemory) linger(zone string, mode gwmode.Mode, linger time.Duration, items map[string][]egressipv1.EgressIPStatusItem,
	nodes map[string]nbstate.Node, now time.Time) (time.Time, []netip.Addr) {
	held := heldBy(items, zone)
	if mode == gwmode.Local {
		return zm.lingerLocal(zone, held, nodes, now), nil
	}
	return zm.lingerShared(zone, linger, held, nodes, now)
}

// lingerShared is linger in shared gateway mode. The zone's node publishes, for
// each egress IP it released, the end of its linger (EgressIPsLingeringUntil,
// written by this zone: publishZone); every zone reroutes to it no longer than
// that end (nbstate.Lingers) and this zone keeps its SNAT rows, and the reroutes of
// the other zones' pods to its gateway router, until nbstate.LingerGrace after it
// (nbstate.KeepsRows). An IP the node still lists SNAT-ready, or lingering without
// an end, and does not hold is released now: its end is now plus the release
// linger, kept in pending until the Node carries it. A linger of 0 keeps nothing.
// The zone node's LingeringUntil in nodes becomes those ends (its own pods follow
// Lingers too).
func (zm *zoneMemory) lingerShared(zone string, linger time.Duration, held map[netip.Addr]bool, nodes map[string]nbstate.Node,
	now time.Time) (time.Time, []netip.Addr) {
	zm.lingering = map[netip.Addr]time.Time{}
	self, ok := nodes[zone]
	if !ok {
		return time.Time{}, nil
	}
	ends := map[netip.Addr]time.Time{}
	for ip, end := range self.LingeringUntil {
		if !held[ip] {
			ends[ip] = end
		}
	}
	pending := map[netip.Addr]time.Time{}
	var released []netip.Addr
	release := func(ip netip.Addr) {
		if _, published := ends[ip]; published || held[ip] || linger <= 0 {
			return
		}
		end, was := zm.pending[ip]
		if !was {
			end = now.Add(linger)
			released = append(released, ip)
		}
		ends[ip], pending[ip] = end, end
	}
	for ip := range self.ListedReady {
		release(ip)
	}
	for ip := range self.LingeringEgressIPs {
		release(ip)
	}
	zm.pending = pending
	self.LingeringUntil = ends
	rows := map[netip.Addr]bool{}
	var wake time.Time
	for ip, end := range ends {
		if keeps, until := nbstate.KeepsRows(self, ip, now); keeps {
			rows[ip], zm.lingering[ip] = true, end
			wake = earliest(wake, until)
		}
	}
	self.LingeringEgressIPs = rows
	nodes[zone] = self
	return wake, released
}

// lingerLocal is linger in local gateway mode. The zone's node daemon publishes
// what it still SNATs after a release and until when (nbstate.Lingers), and every
// zone reroutes to it no longer than that end. The zone keeps the reroutes of the
// other zones' pods to its node's management port until nbstate.LingerGrace after
// that end (nbstate.KeepsRows), and lists those IPs in its node's
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
		// Still listed ready (the daemon has not taken the release in): kept, no end yet.
		keeps, until := nbstate.KeepsRows(self, ip, now)
		if !keeps {
			return
		}
		zm.kept[ip] = true
		if !until.IsZero() {
			wake = earliest(wake, until)
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
// gateway mode also its lingering list with the end of each linger (in the same
// patch as the ready list it leaves); in local gateway mode what it reroutes to
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
	held := maps.Clone(ready)
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
	if err := c.inDataPlane(ready, self); err != nil {
		return err
	}
	want := map[string]string{annotations.EgressIPsSNATReady: annotations.FormatEgressIPsReady(ready)}
	if c.s.mode == gwmode.Shared {
		// Each released IP with the end of its linger, for as long as its rows stay
		// (zoneMemory.lingerShared): other zones read the end, a restarted zone too.
		want[annotations.EgressIPsLingering], want[annotations.EgressIPsLingeringUntil] = annotations.FormatLingering(c.zone.lingering)
	} else {
		// What this zone still reroutes to the node's management port: the IPs it
		// holds (ready or not: nbstate.Routes) and the released ones whose rows it
		// keeps (zoneMemory.lingerLocal). Written after the commit, so narrowed only
		// once those rows are gone.
		rerouted := held
		maps.Copy(rerouted, c.zone.kept)
		// Narrowed only once this zone's chassis has applied the commit that
		// removed those rows (reroutesApplied): until then OVN may still send the
		// pods to the management port.
		if told, err := annotations.ParseIPList(self, annotations.EgressIPsRerouted); err == nil && drops(told, rerouted) {
			if !c.reroutesApplied(time.Now()) {
				maps.Copy(rerouted, told)
			}
		} else {
			c.notNarrowing()
		}
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
		"lingering", want[annotations.EgressIPsLingeringUntil], "rerouted", want[annotations.EgressIPsRerouted])
	return nil
}
