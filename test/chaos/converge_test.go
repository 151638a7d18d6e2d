package chaos

// The check after each round: waiting for the processes to be quiet and the cluster to converge, and the fault windows.

import (
	"context"
	"fmt"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// dialNB is the checker's own client of one NB (comma-separated members: leader only), reconnecting.
func (h *harness) dialNB(address string) client.Client {
	dbm, err := model.NewClientDBModel("OVN_Northbound", map[string]model.Model{
		nbdb.LogicalRouterTable: &nbdb.LogicalRouter{}, nbdb.LogicalRouterPolicyTable: &nbdb.LogicalRouterPolicy{},
		nbdb.NATTable: &nbdb.NAT{}, nbdb.AddressSetTable: &nbdb.AddressSet{}})
	if err != nil {
		h.t.Fatal(err)
	}
	nb := nbserver.Connect(h.ctx, h.t, address, dbm, 30*time.Second, nbserver.Reconnect(10*time.Second, 50*time.Millisecond, time.Second))
	cctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	if _, err := nb.MonitorAll(cctx); err != nil {
		h.t.Fatal(err)
	}
	return nb
}

// converge polls the checker until the cluster is what it must be (true) or flagConverge passes (false, with the
// last verdict). On success, it classifies the probes made inside the window and closes the window; on failure the
// window stays open until a later check converges. statusOnly checks EgressIP status alone and leaves the window
// open (interconnect layout, while a node is cut off: its zone cannot follow until its links are back).
//
// A check counts only when a master leads and its sync queue was idle before the check and still is after it, with
// nothing added meanwhile (workqueue metrics, metricsutil): the state checked is then the master's answer to every
// fault and change so far, not a state it has yet to react to. (Without that, a check made while no master led, say
// a new master waiting out the Lease after an apiserver restart, saw the old rows still right; the master then
// found a node killed meanwhile unreachable and moved its IP, after the window had closed.) In the interconnect
// layout the same holds for the cluster manager and for every zone controller (the same queue, in each node's
// process), each with the same pid before and after.
func (h *harness) converge(statusOnly bool) (verdict, bool) {
	start := time.Now()
	deadline := start.Add(*flagConverge)
	var v verdict
	var err error
	told := false
	converged := false
	werr := waitfor.Until(context.Background(), 0, 250*time.Millisecond, func() (bool, error) { // returns when done
		pid0, q0 := h.masterQueue()
		z0 := h.zoneQueues(statusOnly)
		v, err = h.chk.check(h.ctx, statusOnly)
		if err == nil && !statusOnly {
			h.countHostPending(v)
		}
		if err == nil && v.ok() && !h.masterQuiet(q0) {
			err = fmt.Errorf("master not idle, or finds a node unreachable that is not cut (%s)", q0)
		}
		if err == nil && v.ok() {
			err = zonesQuiet(z0, nil)
		}
		if !told && time.Since(start) > *flagTell && (err != nil || !v.ok()) {
			told = true // what a long re-convergence is waiting for
			h.logf("not converged after %s (err %v): %v", *flagTell, err, v)
		}
		if err == nil && v.ok() {
			// Status and NB are right; OVN carries NB to the data path (northd to SB, ovn-controller to
			// OpenFlow): wait for it, as ovn-nbctl --wait=hv does, before the probes must see it.
			if !statusOnly {
				err = h.c.WaitDataPath(h.ctx, time.Until(deadline))
			}
			if err == nil {
				pid1, q1 := h.masterQueue()
				err = zonesQuiet(h.zoneQueues(statusOnly), z0)
				if err == nil && pid1 == pid0 && h.masterQuiet(q1) && q1.adds == q0.adds {
					if !statusOnly {
						h.closeWindow(v)
					}
					converged = true
					return true, nil
				}
				if err == nil {
					err = fmt.Errorf("master synced during the check (before %s, after %s)", q0, q1)
				}
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				v.statusErrs = append(v.statusErrs, "check: "+err.Error())
			}
			return true, nil // the window stays open: the failed check is reported, not the probes
		}
		return false, nil
	})
	if werr != nil { // no timeout and a condition with no error: not expected
		v.statusErrs = append(v.statusErrs, "wait: "+werr.Error())
	}
	return v, converged
}

// zoneQueue is a zone controller's sync queue as read once, with the pid of its process.
type zoneQueue struct {
	pid int
	q   queueState
}

// zoneQueues reads every zone controller's sync queue (interconnect layout; nil in the centralized one), skipping
// the zones of nodes whose links are cut when skipCut.
func (h *harness) zoneQueues(skipCut bool) map[string]zoneQueue {
	if !h.interconnect() {
		return nil
	}
	out := map[string]zoneQueue{}
	for _, n := range h.c.Nodes() {
		if skipCut && h.isCut(n.Name) {
			continue
		}
		name := "node-" + n.Name
		h.sup.mu.Lock()
		p := h.sup.procs[name]
		h.sup.mu.Unlock()
		zq := zoneQueue{pid: h.sup.pid(name)}
		if q, err := readQueue(h.ctx, p, "egressip-master"); err == nil {
			zq.q = q
		}
		out[name] = zq
	}
	return out
}

// zonesQuiet: every zone controller's queue is idle; with before, also the same process with nothing added since.
func zonesQuiet(now, before map[string]zoneQueue) error {
	for name, z := range now {
		if !z.q.idle() {
			return fmt.Errorf("zone controller %s not idle (%s)", name, z.q)
		}
		if b, ok := before[name]; before != nil && (!ok || b.pid != z.pid || b.q.adds != z.q.adds) {
			return fmt.Errorf("zone controller %s synced during the check (before %s pid %d, after %s pid %d)", name, b.q, b.pid, z.q, z.pid)
		}
	}
	return nil
}

// masterQuiet: the master leads, its sync queue is idle, and its health check finds every node reachable but
// those whose links are cut (a node it has yet to find reachable again would make it sync: an EgressIP short of
// nodes gets its other IPs).
func (h *harness) masterQuiet(q queueState) bool {
	if !q.idle() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range q.unreachable {
		if !h.cut[n] {
			return false
		}
	}
	return true
}

// masterQueue reads the master's (cluster manager's) pid and its sync queue's metrics (absent while it stands by).
func (h *harness) masterQueue() (int, queueState) {
	h.sup.mu.Lock()
	p := h.sup.procs[h.leader]
	h.sup.mu.Unlock()
	pid := h.sup.pid(h.leader)
	if p == nil {
		return pid, queueState{}
	}
	q, err := readQueue(h.ctx, p, "egressip-master")
	if err != nil {
		return pid, queueState{}
	}
	return pid, q
}

// countHostPending counts a poll whose verdict has host items (local gateway mode).
func (h *harness) countHostPending(v verdict) {
	for _, l := range append(slices.Clone(v.missing), v.stale...) {
		if strings.HasPrefix(l, "host ") {
			h.hostPending++
			if h.hostExample == "" {
				h.hostExample = l
			}
			return
		}
	}
}

// openWindow opens a window (a change or fault to come): explain's answers after the last check are compared
// with what the probes saw since, and the window's own sources start from the state before it (the last converged
// one, or, while a window stays open after a check that failed, everything the open window allowed).
func (h *harness) openWindow() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.compareExplain()
	seed := h.ownNow.clone()
	if h.window {
		seed = h.own[h.windows].clone()
	}
	h.window = true
	h.windows++
	h.own[h.windows] = seed
}

// zoneDown (interconnect layout, local gateway mode) allows, inside the open window, the pods of node's zone (its
// zone controller killed or cut off from the apiserver, or its NB and SB down) to leave with any node's gateway
// router address: whyZoneDown.
func (h *harness) zoneDown(node string) error {
	if !h.interconnect() || h.c.GatewayMode() != gwmode.Local {
		return nil
	}
	return h.addToWindow("read the pods of zone "+node, func(ctx context.Context) (ownSources, error) {
		return h.chk.zoneDownSources(ctx, node)
	})
}

// noteState adds every pod's own sources in the API as it is now (after a change of the harness) to the open
// window's.
func (h *harness) noteState() error {
	return h.addToWindow("read the state after a change", h.chk.readOwn)
}

// addToWindow reads own sources with read (retried) and adds them to the open window's.
func (h *harness) addToWindow(what string, read func(context.Context) (ownSources, error)) error {
	var o ownSources
	err := retry(h.ctx, func() error {
		var err error
		o, err = read(h.ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.own[h.windows] == nil {
		h.own[h.windows] = ownSources{}
	}
	h.own[h.windows].add(o)
	return nil
}

// closeWindow counts the probes of the window against the converged state's sources, and against their own
// sources in every state of the windows they overlapped: a probe that started in window g is held to the own
// sources of windows g and later; one that started after the check that closed window g (in the quiet time, and
// ended in a later window) to the converged state of that check and the later windows'. Then it asks explain about
// every probing pod (compared when the next window opens).
func (h *harness) closeWindow(v verdict) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.own[h.windows] == nil {
		h.own[h.windows] = ownSources{}
	}
	h.own[h.windows].add(v.own)
	for _, r := range h.pending {
		if r.err == nil {
			allowed := ownSources{}
			if !r.inWindow {
				allowed.add(h.ownNow)
			}
			for g := r.gen; g <= h.windows; g++ {
				if g > r.gen || r.inWindow {
					allowed.add(h.own[g])
				}
			}
			switch f := allowed.judge(r.pod, r.src); f {
			case "":
			case whyHolderGR, whyZoneDown:
				h.probes.holderGRInside++
				h.probes.foreign = append(h.probes.foreign, fmt.Sprintf("%s %s inside the window: source %s is %s (counted apart)",
					r.start.Format("15:04:05.000"), r.pod, r.src, f))
			default:
				h.probes.foreignInside++
				h.probes.foreign = append(h.probes.foreign, fmt.Sprintf("%s %s inside the window: %s",
					r.start.Format("15:04:05.000"), r.pod, f))
			}
		}
		switch {
		case r.err != nil:
			h.probes.failedInside++
		case slices.Contains(v.sources[r.pod], r.src):
			h.probes.ok++
		default:
			h.probes.insideWindow++
		}
	}
	h.pending = nil
	h.expected = v.sources
	h.ownNow = v.own
	for g := range h.own {
		if g < h.windows-1 { // a probe lasts at most 2.5 s: none in flight started before the previous window
			delete(h.own, g)
		}
	}
	h.window = false
	h.explainAll(v.explain)
}

// podExplained is explain's answer about one pod after a check.
type podExplained struct {
	r   *master.PodReport
	err error
}

// explainAll asks explain (master.ExplainPod, from the same read as the check) about every probing pod, and starts
// collecting the sources their probes see until the next window opens. h.mu held.
func (h *harness) explainAll(in master.ExplainInput) {
	h.explained = map[string]podExplained{}
	h.explainedAt = time.Now()
	h.quietSeen = map[string]map[netip.Addr]int{}
	for key := range h.pods {
		ns, name, _ := strings.Cut(key, "/")
		r, err := master.ExplainPod(in, ns, name)
		h.explained[key] = podExplained{r: r, err: err}
	}
}

// compareExplain compares explain's answer about each pod after the last check with the sources of the probes
// that started and ended after it, before the next window: a disagreement is a source explain does not list, or
// explain saying the traffic is dropped (strict, nothing carried) while probes arrived. A pod none of whose probes
// arrived in that time is not compared (a failed probe there fails the test by itself). h.mu held.
func (h *harness) compareExplain() {
	for key, e := range h.explained {
		seen := h.quietSeen[key]
		if len(seen) == 0 {
			h.explain.none++
			continue
		}
		var srcs []string
		for _, a := range slices.SortedFunc(maps.Keys(seen), func(a, b netip.Addr) int { return a.Compare(b) }) {
			srcs = append(srcs, fmt.Sprintf("%s x%d", a, seen[a]))
		}
		var bad string
		switch {
		case e.err != nil:
			bad = fmt.Sprintf("explain failed: %v", e.err)
		case len(e.r.Sources) == 0:
			bad = "explain says its traffic is dropped"
		default:
			for a := range seen {
				if !slices.Contains(e.r.Sources, a.String()) {
					bad = fmt.Sprintf("explain lists sources %v", e.r.Sources)
				}
			}
		}
		if bad == "" {
			h.explain.agree++
			continue
		}
		h.explain.disagree++
		why := ""
		if e.r != nil {
			why = e.r.Why
		}
		h.explain.details = append(h.explain.details, fmt.Sprintf("after the check of %s, pod %s: %s; its probes saw %v (explain: %s)",
			h.explainedAt.Format("15:04:05.000"), key, bad, srcs, why))
	}
	h.explained = nil
	h.quietSeen = nil
}

// explainStat counts explain's answers compared with the probes after each check.
type explainStat struct {
	agree, disagree, none int
	details               []string
}
