package master

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// nbRows is what one sync wants of NB.
type nbRows struct {
	// desired: the shared rows and the rows of the pods in pods (in a full sync:
	// of every pod, and the served-pods address sets).
	desired nbstate.State
	pods    map[string]bool
	// touched are the pod IPs whose membership of the served-pods sets may have
	// changed (incremental syncs).
	touched map[netip.Addr]bool
	anyEIP  bool
}

// podCache is what planning reads of pods and namespaces (the informers' listers;
// maps in tests). Pod and Namespace return nil, nil when the object is absent.
type podCache interface {
	Pod(namespace, name string) (*corev1.Pod, error)
	Pods() ([]*corev1.Pod, error)
	PodsIn(namespace string) ([]*corev1.Pod, error)
	Namespace(name string) (*corev1.Namespace, error)
	Namespaces() ([]*corev1.Namespace, error)
}

// listerCache is the informers' podCache.
type listerCache struct {
	pods       podStore
	namespaces corelisters.NamespaceLister
}

func (l listerCache) Pod(ns, name string) (*corev1.Pod, error) { return l.pods.get(ns, name) }

func (l listerCache) Pods() ([]*corev1.Pod, error) { return l.pods.list("") }

func (l listerCache) PodsIn(ns string) ([]*corev1.Pod, error) { return l.pods.list(ns) }

func (l listerCache) Namespace(name string) (*corev1.Namespace, error) {
	ns, err := l.namespaces.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return ns, err
}

func (l listerCache) Namespaces() ([]*corev1.Namespace, error) {
	return l.namespaces.List(labels.Everything())
}

// planInput is what one sync plans its NB rows from.
type planInput struct {
	dirty dirty
	full  bool
	nb    nbstate.Input // mode, subnets, nodes
	// eips as programmed (status = what is written), rank their serving order.
	eips  []*egressipv1.EgressIP
	rank  selection.Ranked
	now   time.Time
	cache podCache
}

// plan updates the memory s with what changed (in a full sync s must be fresh)
// and returns the rows to converge, and when a fallback next expires (zero: none;
// a sync must run then). It reads only in.cache and s: no client, no clock.
func plan(s *serving, in planInput) (nbRows, time.Time, error) {
	rowDirty, wake, err := choose(s, in)
	if err != nil {
		return nbRows{}, wake, err
	}
	return build(s, in, rowDirty), wake, nil
}

// replan is plan, in an incremental sync, for the same sync planned before as prev
// with other status (prev planned with every status write landed; some did not):
// s has prev's changes and takes in's; the rows returned are those of the pods
// either plan found dirty, as s now serves them.
func replan(s *serving, in planInput, prev nbRows) (nbRows, time.Time, error) {
	rowDirty, wake, err := choose(s, in)
	if err != nil {
		return nbRows{}, wake, err
	}
	for k := range prev.pods {
		rowDirty[k] = true
	}
	r := build(s, in, rowDirty)
	for ip := range prev.touched {
		r.touched[ip] = true
	}
	return r, wake, nil
}

// choose updates the memory s with what changed and returns the pods whose rows
// may have changed: the pods to select again (changedPods, changedSelections),
// the pods of EgressIPs whose routes changed (changedRoutes), and the pods whose
// selection changed (reselect).
func choose(s *serving, in planInput) (map[string]bool, time.Time, error) {
	rowDirty := map[string]bool{}
	reselect, err := changedPods(in)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := changedSelections(s, in, reselect, rowDirty); err != nil {
		return nil, time.Time{}, err
	}
	wake := changedRoutes(s, in, rowDirty)
	if err := reselectPods(s, in, reselect, rowDirty); err != nil {
		return nil, wake, err
	}
	return rowDirty, wake, nil
}

// changedPods are the pods to select again: every pod in a full sync, else the
// pods and the pods of the namespaces the informers reported.
func changedPods(in planInput) (map[string]bool, error) {
	reselect := map[string]bool{}
	if in.full {
		if len(in.rank.Names) > 0 {
			pods, err := in.cache.Pods()
			if err != nil {
				return nil, fmt.Errorf("list pods: %w", err)
			}
			for _, p := range pods {
				reselect[podKey(p.Namespace, p.Name)] = true
			}
		}
		return reselect, nil
	}
	for k := range in.dirty.pods {
		reselect[k] = true
	}
	for ns := range in.dirty.namespaces {
		if err := podsIn(in.cache, ns, reselect); err != nil {
			return nil, err
		}
	}
	return reselect, nil
}

// changedSelections adds to reselect, for every EgressIP whose selection changed
// (or that went), the pods it served and the pods of the namespaces it now
// selects; the pods it served are rowDirty too.
func changedSelections(s *serving, in planInput, reselect, rowDirty map[string]bool) error {
	var namespaces []*corev1.Namespace
	live := make(map[string]bool, len(in.eips))
	for _, e := range in.eips {
		live[e.Name] = true
		sig := s.sigOf(e)
		if old, ok := s.sigs[e.Name]; ok && old == sig {
			continue
		}
		s.sigs[e.Name] = sig
		if in.full {
			continue
		}
		for k := range s.eipPods[e.Name] {
			reselect[k], rowDirty[k] = true, true
		}
		i, ok := in.rank.Rank(e.Name)
		if !ok {
			continue
		}
		if namespaces == nil {
			var err error
			if namespaces, err = in.cache.Namespaces(); err != nil {
				return fmt.Errorf("list namespaces: %w", err)
			}
		}
		for _, ns := range namespaces {
			if in.rank.SelectsNamespace(i, ns) {
				if err := podsIn(in.cache, ns.Name, reselect); err != nil {
					return err
				}
			}
		}
	}
	for name := range s.sigs {
		if !live[name] {
			delete(s.sigs, name)
			delete(s.selectors, name)
			delete(s.routes, name)
			for k := range s.eipPods[name] {
				reselect[k] = true
			}
		}
	}
	return nil
}

// changedRoutes computes every EgressIP's routes (nbstate.Routes, with the
// lingering fallback of local gateway mode and the interconnect layout, and
// strict drops); a change makes every pod of that EgressIP rowDirty. It returns
// when a fallback next expires (zero: none). The fallback is to the lingering
// holders of the IPs each EgressIP keeps (keptIPs, remembered in s.kept), never
// of an IP another EgressIP keeps.
func changedRoutes(s *serving, in planInput, rowDirty map[string]bool) time.Time {
	var wake time.Time
	s.kept = keptIPs(in.eips, in.nb.Nodes)
	for _, e := range in.eips {
		ne := routeInput(e, s.kept)
		routes := nbstate.Routes(in.nb, ne) // ready holders only: what the fallback remembers
		if in.nb.Mode == gwmode.Local || in.nb.Zone != "" {
			// The fallback is what the nodes published (nbstate.Lingers): no clock here.
			wake = earliest(wake, nbstate.LingerEnd(in.nb, ne))
		}
		if e.Spec.Strict {
			// A family with neither a holder nor a fallback drops (strict).
			ne.Strict = true
			routes = nbstate.Routes(in.nb, ne)
		}
		if !sameRoutes(routes, s.routes[e.Name]) {
			s.routes[e.Name] = routes
			for k := range s.eipPods[e.Name] {
				rowDirty[k] = true
			}
		}
	}
	return wake
}

// reselectPods decides again which EgressIP serves each pod of reselect
// (selection.Ranked.Serve); a pod whose choice changed, and the pods sharing an IP
// with a rowDirty pod (which of them has the rows may change), are rowDirty.
func reselectPods(s *serving, in planInput, reselect, rowDirty map[string]bool) error {
	for k := range reselect {
		ns, name, _ := strings.Cut(k, "/")
		pod, err := in.cache.Pod(ns, name)
		if err != nil {
			return fmt.Errorf("pod %s: %w", k, err)
		}
		eip := ""
		if pod != nil {
			nsObj, err := in.cache.Namespace(ns)
			if err != nil {
				return fmt.Errorf("namespace %s: %w", ns, err)
			}
			eip = in.rank.Serve(nsObj, pod)
		}
		old := s.pods[k].ips
		if s.choose(k, pod, eip) {
			rowDirty[k] = true
			s.coClaimants(old, rowDirty)
		}
	}
	for k := range rowDirty {
		s.coClaimants(s.pods[k].ips, rowDirty)
		s.coClaimants(s.servedIPs[k], rowDirty)
	}
	return nil
}

// build returns the rows of the pods in rowDirty as s serves them (in a full sync,
// with the served-pods address sets).
func build(s *serving, in planInput, rowDirty map[string]bool) nbRows {
	r := nbRows{pods: rowDirty, touched: map[netip.Addr]bool{}, anyEIP: len(in.eips) > 0, desired: nbstate.NewState()}
	if r.anyEIP {
		r.desired = nbstate.ClusterRows(in.nb)
	}
	for k := range rowDirty {
		before, after := s.rows(k, in.nb.Mode, in.nb.Zone, &r.desired)
		for _, ip := range before {
			r.touched[ip] = true
		}
		for _, ip := range after {
			r.touched[ip] = true
		}
	}
	if in.full && r.anyEIP {
		for _, fam := range nbstate.Families(in.nb.ClusterSubnets) {
			r.desired.AddressSets[nbstate.ServedPodsKey(fam)] = nbstate.ServedPodsRow(fam, s.servedAddresses(fam))
		}
	}
	return r
}

// podsIn adds the keys of the pods of namespace ns to set.
func podsIn(cache podCache, ns string, set map[string]bool) error {
	pods, err := cache.PodsIn(ns)
	if err != nil {
		return fmt.Errorf("list pods of namespace %s: %w", ns, err)
	}
	for _, p := range pods {
		set[podKey(p.Namespace, p.Name)] = true
	}
	return nil
}

// prepared is a sync's NB plan, compared and not yet committed.
type prepared struct {
	plan nbstate.Plan
	cur  nbstate.Current // a full sync's reading of NB: the Mirror once committed
	full bool
	diff time.Duration
	// restore sets the garbage collector back (see prepare); transact calls it,
	// whoever drops a prepared plan must.
	restore func()
}

// prepare compares r with NB, and writes nothing: a full sync with every row we own
// in NB (read from the libovsdb cache and one select), an incremental one with the
// Mirror's rows of r.pods and the shared rows. transact commits what it returns.
func (c *controller) prepare(ctx context.Context, r nbRows, full bool) (prepared, error) {
	p := prepared{full: full, restore: func() {}}
	mirrored := 0
	if c.mirror != nil {
		mirrored = c.mirror.Len()
	}
	if n := r.desired.Len(); n >= bulkChanges && n >= mirrored/2 {
		// A plan this large (at least half the rows we own: start-up, the periodic
		// verification, every EgressIP created at once) holds its rows, their
		// changes, the operations and their JSON at once, on top of the caches:
		// collect more often while it is compared and committed (the heap then
		// grows to about 1.25x what is live, not 2x), some CPU in a rare sync for
		// a lower peak. Smaller plans (a node loss) keep the default: their
		// garbage is small beside the caches. A lower setting (GOGC, or GOGC=off)
		// is kept.
		if old := debug.SetGCPercent(bulkGCPercent); old < 0 || old <= bulkGCPercent {
			debug.SetGCPercent(old)
		} else {
			p.restore = func() { debug.SetGCPercent(old) }
		}
	}

	began := time.Now()
	if full {
		tctx, cancelTimeout := context.WithTimeout(ctx, c.s.NBTimeout)
		defer cancelTimeout()
		gctx, cancelGuard := c.nb.Guard(tctx)
		defer cancelGuard()
		cur, err := nbstate.ReadCurrentLive(gctx, c.nb, c.nb)
		if err != nil {
			p.restore()
			return prepared{}, err
		}
		p.cur = cur
		c.foreignSets = cur.ForeignAddressSets
	} else {
		routers, err := nbstate.ReadRouters(c.nb)
		if err != nil {
			p.restore()
			return prepared{}, err
		}
		p.cur = c.mirror.Current(r.pods, routers)
	}
	p.plan = nbstate.Diff(r.desired, p.cur)
	if !full && r.anyEIP {
		p.plan.Changes = append(c.servedChanges(r.touched), p.plan.Changes...)
	}
	if full {
		c.noteSkipped(p.plan.Skipped)
	}
	p.diff = time.Since(began)
	return p, nil
}

// transact commits a prepared plan in one transaction; the Mirror follows what was
// committed.
func (c *controller) transact(ctx context.Context, p prepared) error {
	defer p.restore()
	tctx, cancelTimeout := context.WithTimeout(ctx, c.s.NBTimeout)
	defer cancelTimeout()
	gctx, cancelGuard := c.nb.Guard(tctx)
	defer cancelGuard()
	began := time.Now()
	var uuids []string
	var err error
	if c.s.Role == RoleZone {
		// Other zones reroute to this node once it lists an IP SNAT-ready: that
		// waits until this zone's chassis has applied the rows (publishZone).
		var seq int
		var known bool
		if uuids, seq, known, err = nbstate.CommitPlanSeq(gctx, c.nb, p.plan); err == nil && known {
			c.zone.seq, c.narrow.seq = seq, seq
		}
	} else if c.publishesRerouted() {
		// A node is told a reroute to it is gone only once every chassis has
		// applied the commit that removed it (reroutesApplied).
		var seq int
		var known bool
		if uuids, seq, known, err = nbstate.CommitPlanSeq(gctx, c.nb, p.plan); err == nil && known {
			c.narrow.seq = seq
		}
	} else {
		uuids, err = nbstate.CommitPlan(gctx, c.nb, p.plan)
	}
	if err != nil {
		return err
	}
	took := time.Since(began)
	if p.full {
		c.mirror = nbstate.NewMirror(p.cur)
	}
	if err := c.mirror.Commit(p.plan, uuids); err != nil {
		return err
	}
	if ins, upd, del := p.plan.Counts(); ins+upd+del > 0 {
		klog.V(2).InfoS("OVN Northbound rows updated", "inserted", ins, "updated", upd, "deleted", del, "full", p.full,
			"diff", p.diff.Round(time.Microsecond), "transaction", took.Round(time.Microsecond))
	}
	if len(p.plan.Changes) >= bulkChanges {
		// A bulk transaction leaves hundreds of MiB of garbage (its rows, operations
		// and JSON): collect it now, while nothing waits, rather than during the
		// small syncs that follow (their transactions then took 30-60 ms instead of
		// 2 ms at 20,000 pods), and give the memory back to the system.
		gcStart := time.Now()
		// Two collections: encoding/json keeps the transaction's encode buffer
		// (15-35 MiB at 20,000 pods) in a sync.Pool, which drops an object only
		// after two collections without use; one would leave it to every later
		// small transaction, live for the master's lifetime.
		runtime.GC()
		debug.FreeOSMemory()
		klog.V(2).InfoS("Memory of a bulk NB transaction released", "changes", len(p.plan.Changes), "took", time.Since(gcStart).Round(time.Microsecond))
	}
	return nil
}

// bulkChanges is the plan size after which transact collects garbage at once; a
// desired state this large, and at least half the rows we own, is compared and
// committed with GOGC bulkGCPercent.
const (
	bulkChanges   = 10000
	bulkGCPercent = 25
)

// servedChanges returns the changes of the served-pods address sets for the pod
// IPs in touched: only the difference travels. A set not in NB yet is inserted
// whole (unless a set of that name is someone else's: the full sync reports it).
func (c *controller) servedChanges(touched map[netip.Addr]bool) []nbstate.Change {
	var out []nbstate.Change
	for _, fam := range nbstate.Families(c.s.ClusterSubnets) {
		key := nbstate.ServedPodsKey(fam)
		row, ok := c.mirror.ServedPods(fam)
		if !ok {
			if !c.foreignSets[nbstate.ServedPodsAddressSet(fam)] {
				out = append(out, nbstate.Change{Op: nbstate.Insert, Table: nbdb.AddressSetTable, Key: key,
					Row: nbstate.ServedPodsRow(fam, c.serving.servedAddresses(fam))})
			}
			continue
		}
		var add, del []string
		for ip := range touched {
			if nbstate.Family(ip) != fam {
				continue
			}
			_, want := c.serving.servedBy[ip]
			have := c.mirror.HasServed(fam, ip.String())
			switch {
			case want && !have:
				add = append(add, ip.String())
			case !want && have:
				del = append(del, ip.String())
			}
		}
		if len(add)+len(del) > 0 {
			out = append(out, nbstate.Change{Op: nbstate.Update, Table: nbdb.AddressSetTable, Key: key, UUID: row.UUID,
				AddAddresses: add, DelAddresses: del})
		}
	}
	return out
}

// keptIPs are, per EgressIP of eips (with their status as programmed), the spec
// IPs it keeps under assignment's claim rule (assign.Kept; nodes give the node
// addresses no egress IP may be): the only IPs whose holders, ready or lingering,
// may carry its pods (its fallback, what is rerouted to a node for it). An entry
// refused to it (ClaimedByOtherEgressIP) is the other EgressIP's IP: its holders
// SNAT with it for that EgressIP's pods only.
func keptIPs(eips []*egressipv1.EgressIP, nodes map[string]nbstate.Node) map[string][]netip.Addr {
	claims := make([]assign.EgressIP, 0, len(eips))
	for _, e := range eips {
		claims = append(claims, claimOf(e, e.Status.Items))
	}
	addrs := make([]assign.Node, 0, len(nodes))
	for name, n := range nodes {
		addrs = append(addrs, assign.Node{Name: name, Addresses: n.Addresses})
	}
	return assign.Kept(claims, addrs)
}

// routeInput is e (status as programmed) as nbstate.Routes reads it: its
// assignments, and as IPs whose lingering holders are a fallback the ones it keeps
// (kept: keptIPs of every EgressIP).
func routeInput(e *egressipv1.EgressIP, kept map[string][]netip.Addr) nbstate.EgressIP {
	ne := toNB(e.Name, e.Status.Items)
	ne.IPs = kept[e.Name]
	return ne
}
