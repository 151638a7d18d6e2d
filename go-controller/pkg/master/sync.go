package master

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// the only writer of both; the workqueue never runs it twice at once.
//
// Assignment runs over every EgressIP and node (few, and contested IPs need all
// of them). Selection, desired rows and the NB diff cover only what changed since
// the last sync: pods and namespaces the informers reported (dirty), EgressIPs
// whose selection or routes changed. A full sync (start-up, NB reconnect or a
// router appearing, the periodic resync, after any NB error) selects every pod
// again and compares every row we own in NB, repairing drift.
func (c *controller) sync(ctx context.Context) error {
	_, trigger := c.startSync()
	began := time.Now()
	c.metrics.syncs.Inc()
	d := c.takeDirty()
	full := d.full || c.mirror == nil
	if c.nb != nil && !c.nb.Connected() {
		c.requestFull()
		return errors.New("not connected to OVN Northbound")
	}
	snap, err := c.snapshot()
	if err != nil {
		c.requestFull()
		return fmt.Errorf("read informer caches: %w", err)
	}
	if len(snap.eips) == 0 && c.mirror != nil && c.mirror.Len() > 0 {
		full = true // the last EgressIP went: every row of ours goes, shared ones too
	}

	// Nodes, without what they publish that cannot be true.
	var assignNodes []assign.Node
	nbNodes := make(map[string]nbstate.Node, len(snap.nodes))
	facts := c.nodeParser.parse(snap.nodes)
	believedItems := func(e *egressipv1.EgressIP) []egressipv1.EgressIPStatusItem {
		st, _ := c.status.current(e)
		return st.Items
	}
	// Node claims are vetted, and reported, by whoever assigns: a zone controller
	// takes the status and the facts as they are.
	if c.s.Role != RoleZone {
		if wait := c.doubts.vetNodes(snap.nodes, facts, snap.eips, believedItems, c.s.Recorder, began, c.s.doubtGrace); wait > 0 {
			c.queue.AddAfter(syncKey, wait) // a doubt's report falls due: no event will say so
		}
	}
	for i, n := range snap.nodes {
		f := facts[i]
		c.noteNode(f.assign, f.readyErr)
		assignNodes = append(assignNodes, f.assign)
		nbNodes[n.Name] = f.nb
	}
	c.pruneNodes(nbNodes)

	// Assignment, over the status we believe current, and the status it makes
	// (decideStatus). Status is written only on change; NB follows what is
	// written. The conditions written with new items say they are not programmed
	// yet; once NB is written they are updated (decideConditions, below).
	now := metav1.NewTime(began)
	in := c.statusInput(snap.eips, assignNodes, nbNodes, now)
	var decision statusDecision
	if c.s.Role == RoleZone {
		decision = readStatus(in)
		if wake := c.zoneLinger(decision.kept, nbNodes, began); !wake.IsZero() {
			c.queue.AddAfter(syncKey, wake.Sub(began)) // a linger ends: no event will say so
		}
	} else {
		decision = decideStatus(in)
	}
	problems, writes := decision.problems, decision.writes
	current := map[string][]egressipv1.EgressIPStatusItem{}
	for _, e := range snap.eips {
		current[e.Name] = in.current(e).status.Items
	}
	var errs []error
	var out outcome
	programmed := decision.kept
	nbIn := nbstate.Input{Mode: c.s.mode, ClusterSubnets: c.s.ClusterSubnets, JoinSubnets: c.s.JoinSubnets, Nodes: nbNodes, Zone: c.s.Zone}
	if full {
		fresh := newServing()
		fresh.ready = c.serving.ready // timing memory, not derived from NB
		c.serving = fresh
	}
	planFor := func(programmed map[string][]egressipv1.EgressIPStatusItem) planInput {
		return c.planInput(snap.eips, programmed, d, full, nbIn, began)
	}

	// The NB rows follow the status written. In an incremental sync they are
	// planned and compared while the status writes are in flight, as if every
	// write lands (a node loss: the API round trips and the planning overlap);
	// the transaction waits for the writes, and is planned again for what did
	// not land. A full sync plans after the writes.
	var (
		rows      nbRows
		wake      time.Time
		pre       prepared
		planErr   error
		statusAt  time.Time // the status writes done
		plannedAt time.Time // the rows planned and compared (speculate)
		speculate = !full && len(writes) > 0 && !c.s.noNB
		assumed   map[string][]egressipv1.EgressIPStatusItem
	)
	if speculate {
		assumed = maps.Clone(programmed)
		for _, w := range writes {
			assumed[w.eip.Name] = w.status.Items
		}
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			writeStatuses(ctx, c.s.EgressIP, writes, c.s.StatusWriters)
			statusAt = time.Now()
		}()
		rows, wake, planErr = plan(c.serving, planFor(assumed))
		if planErr == nil {
			pre, planErr = c.prepare(ctx, rows, full)
		}
		plannedAt = time.Now()
		<-wrote
	} else {
		writeStatuses(ctx, c.s.EgressIP, writes, c.s.StatusWriters)
		statusAt = time.Now()
	}
	for _, w := range writes {
		e, want, have := w.eip, w.status.Items, current[w.eip.Name]
		updated, err := w.updated, w.err
		if err != nil {
			errs = append(errs, err)
			programmed[e.Name] = have
			continue
		}
		if updated == nil {
			// Deleted meanwhile: its rows go. (Also what a CRD without the status
			// subresource answers: say so, it would never be programmed.)
			klog.InfoS("EgressIP status update: not found; treating it as deleted", "egressip", e.Name, "field", "status")
			continue
		}
		c.metrics.statusUpdates.Inc()
		c.status.remember(e, updated)
		programmed[e.Name] = want
		out.add(have, want)
		klog.InfoS("EgressIP status updated", "egressip", e.Name, "field", "status.items", "items", describe(want), "was", describe(have))
	}
	in2 := planFor(programmed)
	switch {
	case c.s.noNB:
		// The cluster manager writes no rows: what its status says is what the
		// zones program (its conditions wait for the holders' ready lists).
	case !speculate:
		rows, wake, planErr = plan(c.serving, in2)
		if planErr == nil {
			pre, planErr = c.prepare(ctx, rows, full)
		}
	case planErr == nil && !sameStatus(assumed, programmed):
		klog.V(2).InfoS("EgressIP status writes did not all land; NB rows planned again", "statusWrites", len(writes))
		pre.restore()
		var again time.Time
		rows, again, planErr = replan(c.serving, in2, rows)
		wake = earliest(wake, again)
		if planErr == nil {
			pre, planErr = c.prepare(ctx, rows, full)
		}
	}
	if !wake.IsZero() {
		c.queue.AddAfter(syncKey, wake.Sub(began)) // a fallback ends: no event will say so
	}

	// Events for what cannot be met.
	uids := map[types.UID]bool{}
	names := map[string]bool{}
	for _, e := range snap.eips {
		uids[e.UID] = true
		names[e.Name] = true
		if c.s.Role != RoleZone {
			c.reporter.report(e, problems[e.Name], in2.rank.Errors[e.Name])
		}
	}
	c.reporter.prune(uids)
	c.status.prune(names)

	// NB: the rows of what changed (everything in a full sync), one transaction.
	err = planErr
	if err == nil && !c.s.noNB {
		err = c.transact(ctx, pre)
	}
	switch {
	case err != nil:
		c.requestFull()
		errs = append(errs, fmt.Errorf("program OVN Northbound: %w", err))
	case c.s.Role == RoleZone:
		c.committed = programmed
		errs = append(errs, c.publishZone(ctx, snap.nodes, programmed))
	default:
		c.observe(out, trigger)
		c.committed = programmed
		errs = append(errs, c.writeConditions(ctx, c.statusInput(snap.eips, assignNodes, nbNodes, now), programmed, problems))
	}
	c.countEgressIPs(snap.eips, programmed)
	kind := "incremental"
	if full {
		kind = "full"
	}
	took := time.Since(began)
	c.metrics.syncDuration.WithLabelValues(kind).Observe(took.Seconds())
	if len(writes) > 0 {
		klog.V(2).InfoS("EgressIP sync wrote status", "kind", kind, "statusWrites", len(writes),
			"queued", began.Sub(trigger).Round(time.Microsecond),
			"statusWritten", statusAt.Sub(began).Round(time.Microsecond), "planned", since(began, plannedAt),
			"took", took.Round(time.Microsecond))
	}
	return errors.Join(errs...)
}

// planInput is what a sync plans its rows from, for EgressIPs as programmed
// (name -> status items; an EgressIP not in it has no rows).
func (c *controller) planInput(eips []*egressipv1.EgressIP, programmed map[string][]egressipv1.EgressIPStatusItem,
	d dirty, full bool, nbIn nbstate.Input, now time.Time) planInput {
	withStatus := make([]*egressipv1.EgressIP, 0, len(programmed))
	for _, e := range eips {
		items, ok := programmed[e.Name]
		if !ok {
			continue
		}
		cp := *e // shallow: only Status is replaced, nothing is mutated
		cp.Status = egressipv1.EgressIPStatus{Items: items}
		withStatus = append(withStatus, &cp)
	}
	return planInput{dirty: d, full: full, nb: nbIn, eips: withStatus, rank: c.compiler.Rank(withStatus),
		now: now, linger: c.s.linger, cache: listerCache{pods: c.pods, namespaces: c.namespaces}}
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
