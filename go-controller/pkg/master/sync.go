package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// snapshot is one consistent-enough read of the informer caches: every EgressIP
// and node (few), not the pods and namespaces (read one by one, as changed).
type snapshot struct {
	eips  []*egressipv1.EgressIP // sorted by name
	nodes []*corev1.Node         // sorted by name
}

func (c *controller) snapshot() (snapshot, error) {
	var s snapshot
	var err error
	if s.eips, err = c.eips.List(labels.Everything()); err != nil {
		return s, err
	}
	sort.Slice(s.eips, func(i, j int) bool { return s.eips[i].Name < s.eips[j].Name })
	if s.nodes, err = c.nodes.List(labels.Everything()); err != nil {
		return s, err
	}
	// In name order too: the lister's order changes from one List to the next,
	// and assignment's memo compares its inputs in order.
	sort.Slice(s.nodes, func(i, j int) bool { return s.nodes[i].Name < s.nodes[j].Name })
	return s, nil
}

// outcome collects what a sync changed, for metrics and logs.
type outcome struct {
	assigned, unassigned, moved int
}

// sync converges EgressIP status and the NB rows we own with the caches. It is
// the only writer of both; the workqueue never runs it twice at once. Each role
// runs the stages that are its own (docs/egressip.md, "Follow one pod"):
//
//	readInputs     the informer caches (snapshot) and what changed (dirty)
//	readNodes      node facts, vetted (not by a zone controller)
//	decide         status: assignment (master, cluster manager) or as read (zone)
//	writeStatus    status writes; in an incremental sync the rows are planned meanwhile (speculate)
//	planRows       the rows for the status written (not by the cluster manager)
//	report         Events for what cannot be met (not by a zone controller)
//	commit         one NB transaction (not by the cluster manager)
//	afterCommit    conditions (master, cluster manager) or the zone's published lists (zone)
//
// Assignment runs over every EgressIP and node (few, and contested IPs need all
// of them). Selection, desired rows and the NB diff cover only what changed since
// the last sync: pods and namespaces the informers reported (dirty), EgressIPs
// whose selection or routes changed. A full sync (start-up, NB reconnect or a
// router appearing, the periodic resync, after any NB error) selects every pod
// again and compares every row we own in NB, repairing drift.
func (c *controller) sync(ctx context.Context) error {
	r, err := c.readInputs()
	if err != nil {
		return err
	}
	c.readNodes(r)
	c.decide(r)
	c.writeStatus(ctx, r)
	c.planRows(ctx, r)
	c.report(r)
	c.commit(ctx, r)
	c.afterCommit(ctx, r)
	c.finish(r)
	return errors.Join(r.errs...)
}

// round is one sync's working state, handed from stage to stage.
type round struct {
	began, trigger time.Time
	dirty          dirty
	full           bool
	snap           snapshot

	assignNodes []assign.Node
	nbNodes     map[string]nbstate.Node
	status      statusInput
	decision    statusDecision
	// Status items per EgressIP: believed before this sync, assumed written
	// (speculation), and written: what the rows follow.
	believed, assumed, written map[string][]egressipv1.EgressIPStatusItem
	out                        outcome

	speculated bool
	rows       nbRows
	pre        prepared
	planErr    error
	rank       selection.Ranked
	wake       time.Time // a fallback ends: a sync must run then
	statusAt   time.Time // the status writes done
	plannedAt  time.Time // the rows planned and compared while status was written
	errs       []error
}

// readInputs starts a sync: what changed, and the caches.
func (c *controller) readInputs() (*round, error) {
	r := &round{}
	_, r.trigger = c.startSync()
	r.began = time.Now()
	c.metrics.syncs.Inc()
	r.dirty = c.takeDirty()
	r.full = r.dirty.full || c.mirror == nil
	if c.nb != nil && !c.nb.Connected() {
		c.requestFull()
		return nil, errors.New("not connected to OVN Northbound")
	}
	var err error
	if r.snap, err = c.snapshot(); err != nil {
		c.requestFull()
		return nil, fmt.Errorf("read informer caches: %w", err)
	}
	if len(r.snap.eips) == 0 && c.mirror != nil && c.mirror.Len() > 0 {
		r.full = true // the last EgressIP went: every row of ours goes, shared ones too
	}
	return r, nil
}

// readNodes parses the nodes and takes out of their facts what cannot be true.
// Node claims are vetted, and reported, by whoever assigns: a zone controller
// takes the status and the facts as they are.
func (c *controller) readNodes(r *round) {
	facts := c.nodeParser.parse(r.snap.nodes)
	if c.s.Role != RoleZone {
		believedItems := func(e *egressipv1.EgressIP) []egressipv1.EgressIPStatusItem {
			st, _ := c.status.current(e)
			return st.Items
		}
		if wait := c.doubts.vetNodes(r.snap.nodes, facts, r.snap.eips, believedItems, c.s.Recorder, r.began, c.s.doubtGrace); wait > 0 {
			c.queue.AddAfter(syncKey, wait) // a doubt's report falls due: no event will say so
		}
	}
	r.nbNodes = make(map[string]nbstate.Node, len(r.snap.nodes))
	for i, n := range r.snap.nodes {
		f := facts[i]
		c.noteNode(f.assign, f.readyErr)
		r.assignNodes = append(r.assignNodes, f.assign)
		r.nbNodes[n.Name] = f.nb
	}
	c.pruneNodes(r.nbNodes)
}

// decide is assignment over the status believed current, and the status it makes
// (decideStatus): status is written only on change, the rows follow what is
// written, and the conditions written with new items say they are not programmed
// yet (afterCommit updates them). A zone controller reads the status as it is and
// updates what its node lingers on.
func (c *controller) decide(r *round) {
	r.status = c.statusInput(r.snap.eips, r.assignNodes, r.nbNodes, metav1.NewTime(r.began))
	if c.s.Role == RoleZone {
		r.decision = readStatus(r.status)
		if wake := c.zoneLinger(r.decision.kept, r.nbNodes, r.began); !wake.IsZero() {
			c.queue.AddAfter(syncKey, wake.Sub(r.began)) // a linger ends: no event will say so
		}
	} else {
		r.decision = decideStatus(r.status)
	}
	r.believed = make(map[string][]egressipv1.EgressIPStatusItem, len(r.snap.eips))
	for _, e := range r.snap.eips {
		r.believed[e.Name] = r.status.current(e).status.Items
	}
	r.written = r.decision.kept
	if r.full {
		c.serving = newServing()
	}
}

// planFor is what the rows are planned from, for the status items given.
func (c *controller) planFor(r *round, items map[string][]egressipv1.EgressIPStatusItem) planInput {
	nbIn := nbstate.Input{Mode: c.s.mode, ClusterSubnets: c.s.ClusterSubnets, JoinSubnets: c.s.JoinSubnets, Nodes: r.nbNodes, Zone: c.s.Zone, Now: r.began}
	return c.planInput(r.snap.eips, items, r.dirty, r.full, nbIn, r.began)
}

// writeStatus sends the status writes and records what landed in r.written. In an
// incremental sync with NB rows to follow, the rows are planned and compared
// while the writes are in flight, as if every write lands (speculate: a node loss
// overlaps the API round trips and the planning); planRows plans again for what
// did not land.
func (c *controller) writeStatus(ctx context.Context, r *round) {
	writes := r.decision.writes
	r.speculated = !r.full && len(writes) > 0 && !c.s.noNB
	if r.speculated {
		// What the speculation assumes is read off the writes before they are sent:
		// the writers fill in their results.
		r.assumed = maps.Clone(r.written)
		for _, w := range writes {
			r.assumed[w.eip.Name] = w.status.Items
		}
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			writeStatuses(ctx, c.s.EgressIP, writes, c.s.StatusWriters)
			r.statusAt = time.Now()
		}()
		c.speculate(ctx, r)
		<-wrote
	} else {
		writeStatuses(ctx, c.s.EgressIP, writes, c.s.StatusWriters)
		r.statusAt = time.Now()
	}
	for _, w := range writes {
		e, want, have := w.eip, w.status.Items, r.believed[w.eip.Name]
		if w.err != nil {
			r.errs = append(r.errs, w.err)
			r.written[e.Name] = have
			continue
		}
		if w.updated == nil {
			// Deleted meanwhile: its rows go. (Also what a CRD without the status
			// subresource answers: say so, it would never be programmed.)
			klog.InfoS("EgressIP status update: not found; treating it as deleted", "egressip", e.Name, "field", "status")
			continue
		}
		c.metrics.statusUpdates.Inc()
		c.status.remember(e, w.updated)
		r.written[e.Name] = want
		r.out.add(have, want)
		klog.InfoS("EgressIP status updated", "egressip", e.Name, "field", "status.items", "items", describe(want), "was", describe(have))
	}
}

// speculate plans and compares the rows as if every status write lands
// (r.assumed), while the writes are in flight: it must not read them.
func (c *controller) speculate(ctx context.Context, r *round) {
	r.rows, r.wake, r.planErr = plan(c.serving, c.planFor(r, r.assumed))
	if r.planErr == nil {
		r.pre, r.planErr = c.prepare(ctx, r.rows, r.full)
	}
	r.plannedAt = time.Now()
}

// planRows plans and compares the rows for the status written: afresh, or again
// for the pods a speculation touched when some write did not land. The cluster
// manager writes no rows: what its status says is what the zones program.
func (c *controller) planRows(ctx context.Context, r *round) {
	in := c.planFor(r, r.written)
	r.rank = in.rank
	switch {
	case c.s.noNB:
	case !r.speculated:
		r.rows, r.wake, r.planErr = plan(c.serving, in)
		if r.planErr == nil {
			r.pre, r.planErr = c.prepare(ctx, r.rows, r.full)
		}
	case r.planErr == nil && !sameStatus(r.assumed, r.written):
		klog.V(2).InfoS("EgressIP status writes did not all land; NB rows planned again", "statusWrites", len(r.decision.writes))
		r.pre.restore()
		var again time.Time
		r.rows, again, r.planErr = replan(c.serving, in, r.rows)
		r.wake = earliest(r.wake, again)
		if r.planErr == nil {
			r.pre, r.planErr = c.prepare(ctx, r.rows, r.full)
		}
	}
	if !r.wake.IsZero() {
		c.queue.AddAfter(syncKey, r.wake.Sub(r.began)) // a fallback ends: no event will say so
	}
}

// report writes the Events for what cannot be met, and forgets what is gone.
func (c *controller) report(r *round) {
	uids := map[types.UID]bool{}
	names := map[string]bool{}
	for _, e := range r.snap.eips {
		uids[e.UID] = true
		names[e.Name] = true
		if c.s.Role != RoleZone {
			c.reporter.report(e, r.decision.problems[e.Name], r.rank.Errors[e.Name])
		}
	}
	c.reporter.prune(uids)
	c.status.prune(names)
}

// commit writes the rows of what changed (everything in a full sync) in one
// transaction; after a failure the next sync is a full one.
func (c *controller) commit(ctx context.Context, r *round) {
	err := r.planErr
	var targets map[string]map[netip.Addr]bool
	if err == nil && c.publishesRerouted() {
		// Make before break: a node is told before the rows reroute to it, and
		// told no more only once they are gone.
		targets = reroutedTargets(c.serving.routes, c.serving.kept, r.nbNodes, r.written, r.began)
		err = c.publishRerouted(ctx, r.snap.nodes, targets, true)
	}
	if err == nil && !c.s.noNB {
		err = c.transact(ctx, r.pre)
	}
	if err == nil && targets != nil && (c.s.noNB || !c.wouldNarrow(targets) || c.reroutesApplied(r.began)) {
		r.errs = append(r.errs, c.publishRerouted(ctx, r.snap.nodes, targets, false))
	}
	if err != nil {
		c.requestFull()
		r.errs = append(r.errs, fmt.Errorf("program OVN Northbound: %w", err))
		r.planErr = err
		return
	}
	c.committed = r.written
}

// afterCommit tells what is programmed: the conditions (master, cluster manager),
// or the zone node's SNAT-ready and lingering lists (zone controller).
func (c *controller) afterCommit(ctx context.Context, r *round) {
	switch {
	case r.planErr != nil:
	case c.s.Role == RoleZone:
		r.errs = append(r.errs, c.publishZone(ctx, r.snap.nodes, r.written, r.status.routers))
	default:
		c.observe(r.out, r.trigger)
		in := c.statusInput(r.snap.eips, r.assignNodes, r.nbNodes, metav1.NewTime(r.began))
		r.errs = append(r.errs, c.writeConditions(ctx, in, r.written, r.decision.problems))
	}
}

// finish records the sync's metrics and its log line.
func (c *controller) finish(r *round) {
	c.countEgressIPs(r.snap.eips, r.written)
	kind := "incremental"
	if r.full {
		kind = "full"
	}
	took := time.Since(r.began)
	c.metrics.syncDuration.WithLabelValues(kind).Observe(took.Seconds())
	if n := len(r.decision.writes); n > 0 {
		klog.V(2).InfoS("EgressIP sync wrote status", "kind", kind, "statusWrites", n,
			"queued", r.began.Sub(r.trigger).Round(time.Microsecond),
			"statusWritten", r.statusAt.Sub(r.began).Round(time.Microsecond), "planned", since(r.began, r.plannedAt),
			"took", took.Round(time.Microsecond))
	}
}

// planInput is what a sync plans its rows from, for EgressIPs as programmed
// (name -> status items; an EgressIP not in it has no rows).
func (c *controller) planInput(eips []*egressipv1.EgressIP, programmed map[string][]egressipv1.EgressIPStatusItem,
	d dirty, full bool, nbIn nbstate.Input, now time.Time) planInput {
	withStatus := asProgrammed(eips, programmed)
	return planInput{dirty: d, full: full, nb: nbIn, eips: withStatus, rank: c.compiler.Rank(withStatus),
		now: now, cache: listerCache{pods: c.pods, namespaces: c.namespaces}}
}

// asProgrammed is eips with the status items of programmed (name -> items); an
// EgressIP not in it is left out (it has no rows).
func asProgrammed(eips []*egressipv1.EgressIP, programmed map[string][]egressipv1.EgressIPStatusItem) []*egressipv1.EgressIP {
	out := make([]*egressipv1.EgressIP, 0, len(programmed))
	for _, e := range eips {
		items, ok := programmed[e.Name]
		if !ok {
			continue
		}
		cp := *e // shallow: only Status is replaced, nothing is mutated
		cp.Status = egressipv1.EgressIPStatus{Items: items}
		out = append(out, &cp)
	}
	return out
}

// sameStatus says whether two name -> status items maps are equal.
func sameStatus(a, b map[string][]egressipv1.EgressIPStatusItem) bool {
	return maps.EqualFunc(a, b, slices.Equal[[]egressipv1.EgressIPStatusItem])
}

// since is t-began for a log line ("-" when t is zero).
func since(began, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Sub(began).Round(time.Microsecond).String()
}

// earliest is the earlier of two times, zero meaning none.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// add counts, between two status lists of one EgressIP, the IPs newly assigned,
// unassigned and moved to another node.
func (o *outcome) add(have, want []egressipv1.EgressIPStatusItem) {
	old := map[string]string{}
	for _, it := range have {
		old[it.EgressIP] = it.Node
	}
	now := map[string]bool{}
	for _, it := range want {
		now[it.EgressIP] = true
		node, was := old[it.EgressIP]
		switch {
		case !was:
			o.assigned++
		case node != it.Node:
			o.moved++
		}
	}
	for ip := range old {
		if !now[ip] {
			o.unassigned++
		}
	}
}

func (c *controller) observe(out outcome, trigger time.Time) {
	since := time.Since(trigger).Seconds()
	if out.assigned+out.moved > 0 {
		c.metrics.assignLatency.Observe(since)
	}
	if out.unassigned+out.moved > 0 {
		c.metrics.unassignLatency.Observe(since)
	}
	c.metrics.rebalance.Add(float64(out.moved))
}

func (c *controller) countEgressIPs(eips []*egressipv1.EgressIP, programmed map[string][]egressipv1.EgressIPStatusItem) {
	var total, assigned int
	for _, e := range eips {
		total += len(e.Spec.EgressIPs)
		assigned += len(programmed[e.Name])
	}
	c.metrics.numEgressIPs.WithLabelValues("assigned").Set(float64(assigned))
	c.metrics.numEgressIPs.WithLabelValues("unassigned").Set(float64(max(total-assigned, 0)))
}

// noteNode logs, once per change, why a labelled node cannot host egress IPs, and
// counts reachable -> unreachable transitions.
func (c *controller) noteNode(n assign.Node, readyErr error) {
	note := ""
	switch {
	case !n.Labelled:
	case n.ConfigErr != nil:
		note = "annotations: " + n.ConfigErr.Error()
	case readyErr != nil:
		note = "annotations: " + readyErr.Error() + " (no egress IP of it counts as ready)"
	case !n.Ready:
		note = "not Ready"
	case !n.Reachable:
		note = "unreachable"
	}
	if note != c.lastNote[n.Name] {
		if note != "" && n.ConfigErr != nil && c.s.interconnect && c.s.Role != RoleZone {
			// The interconnect layout's node facts come from the rest of OVN-Kubernetes:
			// say on the Node which annotation keeps it from holding egress IPs.
			c.s.Recorder.Event(&corev1.ObjectReference{Kind: "Node", Name: n.Name, APIVersion: "v1"}, corev1.EventTypeWarning,
				ReasonInvalidNodeFacts, "node "+n.Name+" cannot host egress IPs: "+n.ConfigErr.Error())
		}
		if note != "" {
			klog.InfoS("Egress-assignable node cannot host egress IPs", "node", n.Name, "reason", note)
		} else if c.lastNote[n.Name] != "" {
			klog.InfoS("Egress-assignable node can host egress IPs again", "node", n.Name)
		}
		c.lastNote[n.Name] = note
	}
	if n.Labelled {
		if was, seen := c.reachable[n.Name]; seen && was && !n.Reachable {
			c.metrics.unreachable.Inc()
		}
		c.reachable[n.Name] = n.Reachable
	} else {
		delete(c.reachable, n.Name)
	}
}

func (c *controller) pruneNodes(exists map[string]nbstate.Node) {
	for name := range c.lastNote {
		if _, ok := exists[name]; !ok {
			delete(c.lastNote, name)
		}
	}
	for name := range c.reachable {
		if _, ok := exists[name]; !ok {
			delete(c.reachable, name)
		}
	}
}

// noteSkipped logs rows that cannot be written (missing router, taken address set
// name) when that list changes.
func (c *controller) noteSkipped(keys []nbstate.Key) {
	routers := map[string]int{}
	for _, k := range keys {
		routers[k.Router]++
	}
	var parts []string
	for r, n := range routers {
		if r == "" {
			r = "(address set name owned by someone else)"
		}
		parts = append(parts, fmt.Sprintf("%s: %d rows", r, n))
	}
	sort.Strings(parts)
	note := strings.Join(parts, "; ")
	if note != c.lastSkipped {
		if note != "" {
			klog.InfoS("Some OVN Northbound rows cannot be written yet: their logical router does not exist", "skipped", note)
		}
		c.lastSkipped = note
	}
}

func describe(items []egressipv1.EgressIPStatusItem) string {
	parts := make([]string, 0, len(items))
	for _, it := range items {
		parts = append(parts, it.EgressIP+"@"+it.Node)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// statusInput gathers what the status decisions read: the status believed
// current of each EgressIP (statusMemory), the nodes, the items committed to NB.
func (c *controller) statusInput(eips []*egressipv1.EgressIP, nodes []assign.Node, nbNodes map[string]nbstate.Node, now metav1.Time) statusInput {
	in := statusInput{eips: eips, believed: make(map[string]believed, len(eips)), nodes: nodes, nbNodes: nbNodes,
		committed: c.committed, mode: c.s.mode, now: now, routers: map[string]bool{}, assign: c.assignMemo.assign,
		interconnect: c.s.interconnect}
	// From the NB cache (router names only); unreadable: no router, nothing
	// counts as programmed. The cluster manager has no NB (routers stays nil).
	if c.s.noNB {
		in.routers = nil
	} else if routers, err := nbstate.ReadRouters(c.nb); err == nil {
		for name := range routers {
			in.routers[name] = true
		}
	} else {
		klog.InfoS("Cannot read OVN Northbound routers; no egress IP counts as programmed", "err", err)
	}
	for _, e := range eips {
		st, rv := c.status.current(e)
		in.believed[e.Name] = believed{status: st, rv: rv}
	}
	return in
}

// writeConditions writes, after NB was committed with programmed, the status of
// every EgressIP whose conditions changed (nothing when nothing changed).
func (c *controller) writeConditions(ctx context.Context, in statusInput, programmed map[string][]egressipv1.EgressIPStatusItem,
	problems map[string][]assign.Problem) error {
	writes := decideConditions(in, programmed, problems)
	writeStatuses(ctx, c.s.EgressIP, writes, c.s.StatusWriters)
	var errs []error
	for _, w := range writes {
		if w.err != nil {
			errs = append(errs, w.err)
			continue
		}
		if w.updated == nil {
			continue // deleted meanwhile
		}
		c.metrics.statusUpdates.Inc()
		c.status.remember(w.eip, w.updated)
		klog.V(2).InfoS("EgressIP conditions updated", "egressip", w.eip.Name, "field", "status.conditions", "assigned", w.status.Assigned,
			"ready", w.status.Conditions[0].Status, "reason", w.status.Conditions[0].Reason)
	}
	return errors.Join(errs...)
}
