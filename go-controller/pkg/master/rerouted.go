package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// reroutedTargets are, per node, the egress IPs whose served pods the planned rows
// reroute to that node's management port (centralized layout, local gateway mode):
// for every route whose next hops include the node, the IPs the EgressIP keeps
// (kept: keptIPs, as the routes were computed with) in the route's family that are
// the node's: status (items, as the rows follow it) gives it the IP, or the node
// still SNATs it after a release (it lists it ready, or lingering with an end after
// now). Not an IP of the same EgressIP that another node holds or lingers on: a node
// holding one IP of an EgressIP would otherwise be told that every other one is
// rerouted to it, and keep a released one's rules for as long as it holds the
// other. A node keeps the SNAT rules of a released IP while its list names it
// (annotations.EgressIPsRerouted).
func reroutedTargets(routes map[string]map[string]nbstate.Route, kept map[string][]netip.Addr, nodes map[string]nbstate.Node,
	items map[string][]egressipv1.EgressIPStatusItem, now time.Time) map[string]map[netip.Addr]bool {
	byHop := map[string]string{}
	for name, n := range nodes {
		for _, ip := range n.ManagementIPs {
			byHop[ip.String()] = name
		}
	}
	nodeHas := func(name, node string, ip netip.Addr) bool {
		for _, it := range items[name] {
			if it.Node == node && it.EgressIP == ip.String() {
				return true
			}
		}
		n := nodes[node]
		if end, ok := n.LingeringUntil[ip]; ok && now.Before(end) {
			return true
		}
		return n.ListedReady[ip] || n.ReadyEgressIPs[ip]
	}
	out := map[string]map[netip.Addr]bool{}
	for name, byFam := range routes {
		for fam, r := range byFam {
			for _, hop := range r.Nexthops {
				node, ok := byHop[hop]
				if !ok {
					continue
				}
				for _, ip := range kept[name] {
					if nbstate.Family(ip) != fam || !nodeHas(name, node, ip) {
						continue
					}
					if out[node] == nil {
						out[node] = map[netip.Addr]bool{}
					}
					out[node][ip] = true
				}
			}
		}
	}
	return out
}

// publishRerouted writes each node's EgressIPsRerouted where it differs from want.
// What this process last wrote is remembered (its own writes may not be in the
// informer cache yet); a node it has not written is read from its annotation, so a
// restarted master starts from what the nodes were told. widen keeps what was
// published (before a commit: nothing published is dropped until the rows that
// reroute there are gone). A node whose write fails keeps its old memory: the
// caller must not commit.
func (c *controller) publishRerouted(ctx context.Context, nodes []*corev1.Node, want map[string]map[netip.Addr]bool, widen bool) error {
	if c.rerouted == nil {
		c.rerouted = map[string]map[netip.Addr]bool{}
	}
	var errs []error
	present := map[string]bool{}
	for _, n := range nodes {
		present[n.Name] = true
		cur, known := c.rerouted[n.Name]
		if !known {
			var err error
			if cur, err = annotations.ParseIPList(n, annotations.EgressIPsRerouted); err != nil {
				klog.ErrorS(err, "Reading what this node was told is rerouted to it; rewriting it", "node", n.Name)
				cur = map[netip.Addr]bool{}
			}
		}
		next := map[netip.Addr]bool{}
		for ip := range want[n.Name] {
			next[ip] = true
		}
		if widen {
			for ip := range cur {
				next[ip] = true
			}
		}
		v := annotations.FormatEgressIPsReady(next)
		if known && annotations.FormatEgressIPsReady(cur) == v {
			continue
		}
		if !known && n.Annotations[annotations.EgressIPsRerouted] == v {
			c.rerouted[n.Name] = next
			continue
		}
		if len(next) == 0 && !known {
			if _, has := n.Annotations[annotations.EgressIPsRerouted]; !has {
				c.rerouted[n.Name] = next
				continue
			}
		}
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotations.EgressIPsRerouted: v}}})
		if _, err := c.s.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("node %s: publish %s: %w", n.Name, annotations.EgressIPsRerouted, err))
			continue
		}
		c.rerouted[n.Name] = next
		klog.V(2).InfoS("Published the egress IPs rerouted to node", "node", n.Name, "ips", v, "beforeCommit", widen)
	}
	for name := range c.rerouted {
		if !present[name] {
			delete(c.rerouted, name)
		}
	}
	return errors.Join(errs...)
}

// publishesRerouted: the centralized master in local gateway mode tells nodes what
// it reroutes to them.
func (c *controller) publishesRerouted() bool {
	return c.s.publishesRerouted()
}

func (s settings) publishesRerouted() bool {
	return s.mode == gwmode.Local && !s.interconnect && !s.noNB
}

// watchesDataPlane: the writers that wait for OVN's sequence number (NB_Global's
// nb_cfg and hv_cfg, nbstate.DataPlane): a zone controller, before it lists an
// egress IP SNAT-ready, and the centralized master in local gateway mode, before it
// tells a node that its reroutes are gone.
func (s settings) watchesDataPlane() bool {
	return s.Role == RoleZone || s.publishesRerouted()
}

// rerouteApplyBound is how long the master waits for every chassis to apply a
// commit before it tells nodes what is no longer rerouted to them anyway (a
// chassis that is gone and still listed holds NB_Global's hv_cfg back for good).
const rerouteApplyBound = 30 * time.Second

// reroutesApplied says whether every chassis (a zone: its own) has applied the
// last commit of this master or zone controller
// (NB_Global's hv_cfg has reached its nb_cfg, nbstate.CommitPlanSeq): only then may
// a node be told that a reroute to it is gone. Before that a chassis may still
// send a pod's packets to the node's management port (ovn-northd reconnecting to
// a new Northbound leader, say), and a node told too early would drop its SNAT
// rules: the pod would leave with the node's address. While it waits, an
// NB_Global update queues a sync (dataPlaneChanged), and one is queued for the
// bound. With no NB_Global row (no ovn-northd serves this NB) there is nothing to
// wait for.
func (c *controller) reroutesApplied(now time.Time) bool {
	c.waitingNarrow.Store(true) // before the read: see inDataPlane
	dp, err := nbstate.ReadDataPlane(c.nb.Cache())
	if err != nil {
		klog.ErrorS(err, "Reading NB_Global; nodes keep what was rerouted to them")
		return false
	}
	if !dp.Known {
		c.waitingNarrow.Store(false)
		if !c.narrow.unknownLogged {
			c.narrow.unknownLogged = true
			klog.InfoS("OVN Northbound has no NB_Global row: nodes are told what is no longer rerouted to them at commit, without waiting for ovn-controller to apply it",
				"annotation", annotations.EgressIPsRerouted)
		}
		return true
	}
	ok, wait := c.narrow.applied(dp, now)
	c.waitingNarrow.Store(!ok)
	switch {
	case ok && wait:
		klog.InfoS("The chassis have not applied the last commit within the bound; telling nodes what is no longer rerouted to them anyway",
			"hvCfg", dp.HVCfg, "want", c.narrow.want(dp), "bound", rerouteApplyBound, "annotation", annotations.EgressIPsRerouted)
	case !ok:
		klog.V(2).InfoS("Nodes keep what was rerouted to them until the chassis have applied the last commit",
			"hvCfg", dp.HVCfg, "want", c.narrow.want(dp))
		c.queue.AddAfter(syncKey, c.narrow.since.Add(rerouteApplyBound).Sub(now))
	}
	return ok
}

// wouldNarrow says whether publishing want would tell some node that an egress IP
// it was told is rerouted to it is no longer. When nothing would, the master does
// not wait for the data plane.
func (c *controller) wouldNarrow(want map[string]map[netip.Addr]bool) bool {
	for name, told := range c.rerouted {
		if drops(told, want[name]) {
			return true
		}
	}
	c.notNarrowing()
	return false
}

// notNarrowing: nothing waits for the data plane before nodes are told less.
func (c *controller) notNarrowing() {
	c.waitingNarrow.Store(false)
	c.narrow.since = time.Time{}
}

// drops says whether next leaves out an IP of told.
func drops(told, next map[netip.Addr]bool) bool {
	for ip := range told {
		if !next[ip] {
			return true
		}
	}
	return false
}

// narrowMemory is what the master (centralized layout) or a zone controller
// remembers of its commits' sequence numbers, in local gateway mode.
type narrowMemory struct {
	// seq is the nb_cfg the last commit that changed rows set (0: none yet).
	seq int
	// since is when narrowing began to wait (zero: not waiting).
	since time.Time
	// unknownLogged: said once that NB has no NB_Global row.
	unknownLogged bool
}

// want is the nb_cfg the chassis must have applied: the later of the master's last
// commit and NB's nb_cfg (that covers a previous master's commits; the master's
// own may not be in the cache yet).
func (nm *narrowMemory) want(dp nbstate.DataPlane) int {
	return max(nm.seq, dp.NBCfg)
}

// applied says whether nodes may be told what is no longer rerouted to them: the
// chassis have applied every commit (hv_cfg reached want), or they have not within
// rerouteApplyBound of the first time it waited (bound is then true).
func (nm *narrowMemory) applied(dp nbstate.DataPlane, now time.Time) (ok, bound bool) {
	if dp.HVCfg >= nm.want(dp) {
		nm.since = time.Time{}
		return true, false
	}
	if nm.since.IsZero() {
		nm.since = now
	}
	if now.Sub(nm.since) >= rerouteApplyBound {
		nm.since = time.Time{}
		return true, true
	}
	return false, false
}
