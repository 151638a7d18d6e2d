package scale

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ovn-org/libovsdb/model"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// tracker detects convergence cheaply and says when it happened. It is fed, one
// change at a time, with what the harness expects (served pods, lost nodes), the
// EgressIPs as the harness' informer sees them, and the master's NB rows as the
// harness' NB monitor sees them (cache events, each stamped when it arrived), and
// keeps the set of pod IPs whose rows differ from what EgressIP status asks for.
// Each change costs work proportional to the rows and pods it touches, never a
// pass over the whole cluster. Converged means: every EgressIP's status complete
// and valid, no pod IP mismatched, no owned row it cannot classify; the time it
// gives is the arrival of the event that completed it. It is a detector, not the
// truth: a phase ends only once the full check (converged) agrees.
type tracker struct {
	mu sync.Mutex

	joinIPs  map[string]string // node -> join IP (the reroute next hop): read only
	wantEIPs int               // EgressIPs the harness created or will create

	// Expectations, set by the harness.
	pods map[string]netip.Addr              // "namespace/name" -> pod IP
	byIP map[netip.Addr]string              // pod IP -> "namespace/name"
	byNS map[string]map[netip.Addr]struct{} // namespace -> pod IPs
	lost map[string]bool

	// EgressIPs from the informer; the layout's EgressIP serving namespace N is named N.
	eips map[string]*egressipv1.EgressIP
	bad  map[string]string // EgressIP -> why its status is not complete

	// NB rows we classify: uuid -> row; per pod IP the reroute and SNAT contents.
	rows  map[string]rowInfo
	ipNB  map[netip.Addr]*ipRows
	stale int // owned rows whose ids or match we cannot read

	mismatch map[netip.Addr]struct{}

	converged   bool
	convergedAt time.Time
	lastChange  time.Time
	changed     chan struct{} // closed (and replaced) on every change of tracked state
}

type rowKind uint8

const (
	rowOther   rowKind = iota // owned, not per pod (no-reroute policies, address sets)
	rowReroute                // reroute policy of one pod IP
	rowSNAT                   // SNAT of one pod IP on one gateway router
	rowStale                  // owned, unreadable
)

// rowInfo is what a row contributes: for a reroute its sorted next hops, for a
// SNAT its external IP. Which gateway router holds a SNAT row is said by the
// router's nat column, not by the row: the tracker does not follow it (monitoring
// the routers' NAT sets nearly doubled the harness' CPU per added pod and raised
// the measured pod-add p99). A SNAT row and the router reference to it are
// written in the same transaction as the reroute policy of its pod (a move: as
// the new next hops), so they arrive in the same update; the full check
// (converged) verifies the routers.
type rowInfo struct {
	kind rowKind
	ip   netip.Addr
	val  string
}

type ipRows struct {
	reroute map[string]int
	snat    map[string]int
}

// rowEvent is one NB cache event: the row after the event (nil when deleted).
type rowEvent struct {
	uuid string
	row  model.Model
	at   time.Time
}

func newTracker(joinIPs map[string]string, wantEIPs int) *tracker {
	return &tracker{
		joinIPs: joinIPs, wantEIPs: wantEIPs,
		pods: map[string]netip.Addr{}, byIP: map[netip.Addr]string{}, byNS: map[string]map[netip.Addr]struct{}{},
		lost: map[string]bool{}, eips: map[string]*egressipv1.EgressIP{}, bad: map[string]string{},
		rows: map[string]rowInfo{}, ipNB: map[netip.Addr]*ipRows{}, mismatch: map[netip.Addr]struct{}{},
		changed: make(chan struct{}),
	}
}

// expectPod records that pod key (namespace/name) has ip and is served by the
// EgressIP of its namespace.
func (t *tracker) expectPod(key string, ip netip.Addr, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ns, _, _ := strings.Cut(key, "/")
	t.pods[key] = ip
	t.byIP[ip] = key
	if t.byNS[ns] == nil {
		t.byNS[ns] = map[netip.Addr]struct{}{}
	}
	t.byNS[ns][ip] = struct{}{}
	t.recheck(at, ip)
}

// forgetPod records that pod key is gone.
func (t *tracker) forgetPod(key string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ip, ok := t.pods[key]
	if !ok {
		return
	}
	ns, _, _ := strings.Cut(key, "/")
	delete(t.pods, key)
	if t.byIP[ip] == key {
		delete(t.byIP, ip)
	}
	delete(t.byNS[ns], ip)
	t.recheck(at, ip)
}

// loseNode records that node may hold no egress IP any more.
func (t *tracker) loseNode(node string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lost[node] = true
	for name := range t.eips {
		t.validate(name)
	}
	t.recheck(at)
}

// setEgressIP records an EgressIP as the informer sees it (nil: deleted).
// assignments is egress IP -> node from EgressIP status as the harness' informer
// last saw it: what the harness reads just before a phase's change, without a
// LIST that would keep the apiserver busy while the master handles the change.
func (t *tracker) assignments() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]string{}
	for _, e := range t.eips {
		for _, it := range e.Status.Items {
			out[it.EgressIP] = it.Node
		}
	}
	return out
}

// statusComplete reports whether every EgressIP the harness created is seen and
// its status holds each spec egress IP exactly once on a known node that is not lost.
func (t *tracker) statusComplete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.eips) == t.wantEIPs && len(t.bad) == 0
}

// egressIPs returns the EgressIPs as the informer last saw them (read only).
func (t *tracker) egressIPs() []*egressipv1.EgressIP {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]*egressipv1.EgressIP, 0, len(t.eips))
	for _, e := range t.eips {
		out = append(out, e)
	}
	return out
}

func (t *tracker) setEgressIP(name string, e *egressipv1.EgressIP, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.eips[name]
	if e == nil {
		delete(t.eips, name)
	} else {
		t.eips[name] = e
	}
	t.validate(name)
	if old != nil && e != nil && slices.Equal(old.Spec.EgressIPs, e.Spec.EgressIPs) && slices.Equal(old.Status.Items, e.Status.Items) {
		return
	}
	ips := make([]netip.Addr, 0, len(t.byNS[name]))
	for ip := range t.byNS[name] {
		ips = append(ips, ip)
	}
	t.recheck(at, ips...)
}

// validate files EgressIP name under bad unless its status holds each spec egress
// IP exactly once on a known node that is not lost.
func (t *tracker) validate(name string) {
	delete(t.bad, name)
	e, ok := t.eips[name]
	if !ok {
		return
	}
	seen := map[string]bool{}
	for _, it := range e.Status.Items {
		_, known := t.joinIPs[it.Node]
		if !known || t.lost[it.Node] || seen[it.EgressIP] || !slices.Contains(e.Spec.EgressIPs, it.EgressIP) {
			t.bad[name] = fmt.Sprintf("bad status item %s@%s", it.EgressIP, it.Node)
			return
		}
		seen[it.EgressIP] = true
	}
	if len(seen) != len(e.Spec.EgressIPs) {
		t.bad[name] = fmt.Sprintf("%d of %d egress IPs assigned", len(seen), len(e.Spec.EgressIPs))
	}
}

// applyRows applies NB cache events in arrival order.
func (t *tracker) applyRows(evs []rowEvent) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var dirty []netip.Addr
	var last time.Time
	for _, ev := range evs {
		old, had := t.rows[ev.uuid]
		info, keep := classify(ev.row)
		if !had && !keep {
			continue
		}
		if had {
			t.unfile(ev.uuid, old)
			dirty = append(dirty, old.ip)
		}
		if keep {
			t.file(ev.uuid, info)
			dirty = append(dirty, info.ip)
		}
		if old.kind != rowOther || info.kind != rowOther {
			last = ev.at
		}
	}
	if !last.IsZero() {
		t.recheck(last, dirty...)
	}
}

// resetRows replaces the NB view with rows (uuid -> row), read from the monitor's
// cache after events were dropped.
func (t *tracker) resetRows(rows map[string]model.Model, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var dirty []netip.Addr
	for ip := range t.ipNB {
		dirty = append(dirty, ip)
	}
	t.rows, t.ipNB, t.stale = map[string]rowInfo{}, map[netip.Addr]*ipRows{}, 0
	for uuid, row := range rows {
		if info, ok := classify(row); ok {
			t.file(uuid, info)
			dirty = append(dirty, info.ip)
		}
	}
	t.recheck(at, dirty...)
}

func (t *tracker) file(uuid string, info rowInfo) {
	t.rows[uuid] = info
	switch info.kind {
	case rowStale:
		t.stale++
	case rowReroute, rowSNAT:
		r := t.ipNB[info.ip]
		if r == nil {
			r = &ipRows{reroute: map[string]int{}, snat: map[string]int{}}
			t.ipNB[info.ip] = r
		}
		if info.kind == rowReroute {
			r.reroute[info.val]++
		} else {
			r.snat[info.val]++
		}
	}
}

func (t *tracker) unfile(uuid string, info rowInfo) {
	delete(t.rows, uuid)
	switch info.kind {
	case rowStale:
		t.stale--
	case rowReroute, rowSNAT:
		r := t.ipNB[info.ip]
		m := r.snat
		if info.kind == rowReroute {
			m = r.reroute
		}
		if m[info.val]--; m[info.val] == 0 {
			delete(m, info.val)
		}
		if len(r.reroute) == 0 && len(r.snat) == 0 {
			delete(t.ipNB, info.ip)
		}
	}
}

// classify reads an NB row: false when it is not one we own (or not a row of
// Logical_Router_Policy, NAT or Address_Set).
func classify(row model.Model) (rowInfo, bool) {
	switch r := row.(type) {
	case *nbdb.LogicalRouterPolicy:
		ids, ok := nbstate.ParseIDs(r.ExternalIDs)
		if !nbstate.Owned(r.ExternalIDs) {
			return rowInfo{}, false
		}
		if !ok {
			return rowInfo{kind: rowStale}, true
		}
		if ids.Rule != nbstate.RuleReroute {
			return rowInfo{kind: rowOther}, true
		}
		src, ok := strings.CutPrefix(r.Match, "ip4.src == ")
		ip, err := netip.ParseAddr(src)
		if !ok || err != nil {
			return rowInfo{kind: rowStale}, true
		}
		hops := slices.Clone(r.Nexthops)
		sort.Strings(hops)
		return rowInfo{kind: rowReroute, ip: ip, val: strings.Join(hops, " ")}, true
	case *nbdb.NAT:
		ids, ok := nbstate.ParseIDs(r.ExternalIDs)
		if !nbstate.Owned(r.ExternalIDs) {
			return rowInfo{}, false
		}
		if !ok {
			return rowInfo{kind: rowStale}, true
		}
		if ids.Rule != nbstate.RuleSNAT {
			return rowInfo{kind: rowOther}, true
		}
		ip, err := netip.ParseAddr(r.LogicalIP)
		if err != nil || r.Type != nbdb.NATTypeSNAT {
			return rowInfo{kind: rowStale}, true
		}
		return rowInfo{kind: rowSNAT, ip: ip, val: r.ExternalIP}, true
	case *nbdb.AddressSet:
		if !nbstate.Owned(r.ExternalIDs) {
			return rowInfo{}, false
		}
		if _, ok := nbstate.ParseIDs(r.ExternalIDs); !ok {
			return rowInfo{kind: rowStale}, true
		}
		return rowInfo{kind: rowOther}, true
	}
	return rowInfo{}, false
}

// recheck re-evaluates the pod IPs given, then the converged verdict; at is when
// the change that led here happened.
func (t *tracker) recheck(at time.Time, ips ...netip.Addr) {
	for _, ip := range ips {
		if !ip.IsValid() {
			continue
		}
		if t.matches(ip) {
			delete(t.mismatch, ip)
		} else {
			t.mismatch[ip] = struct{}{}
		}
	}
	if at.After(t.lastChange) {
		t.lastChange = at
	}
	conv := len(t.mismatch) == 0 && len(t.bad) == 0 && len(t.eips) == t.wantEIPs && t.stale == 0
	if conv && !t.converged {
		t.convergedAt = t.lastChange
	}
	t.converged = conv
	t.broadcast()
}

func (t *tracker) broadcast() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// matches reports whether NB holds exactly the rows EgressIP status asks for ip:
// none when no EgressIP serves it, else one reroute policy with the join IPs of the
// status' nodes and one SNAT per status item (its router: see rowInfo).
func (t *tracker) matches(ip netip.Addr) bool {
	got := t.ipNB[ip]
	var e *egressipv1.EgressIP
	if key, ok := t.byIP[ip]; ok {
		ns, _, _ := strings.Cut(key, "/")
		e = t.eips[ns]
	}
	if e == nil || len(e.Status.Items) == 0 {
		return got == nil
	}
	if got == nil || len(got.reroute) != 1 || len(got.snat) != len(e.Status.Items) {
		return false
	}
	hops := make([]string, 0, len(e.Status.Items))
	for _, it := range e.Status.Items {
		hops = append(hops, t.joinIPs[it.Node])
		if got.snat[it.EgressIP] != 1 {
			return false
		}
	}
	sort.Strings(hops)
	return got.reroute[strings.Join(hops, " ")] == 1
}

// state returns the verdict, when it became true, a summary of what is missing,
// and a channel closed at the next change.
func (t *tracker) state() (converged bool, at time.Time, problem string, changed <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.converged {
		problem = fmt.Sprintf("%d pod IPs mismatched, %d EgressIPs of %d seen, %d with incomplete status, %d unreadable rows",
			len(t.mismatch), len(t.eips), t.wantEIPs, len(t.bad), t.stale)
	}
	return t.converged, t.convergedAt, problem, t.changed
}

// waitConverged blocks until the tracker says converged and returns when it
// became so.
func (t *tracker) waitConverged(ctx context.Context) (time.Time, error) {
	for {
		conv, at, problem, changed := t.state()
		if conv {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("not converged (%s): %w", problem, context.Cause(ctx))
		case <-changed:
		}
	}
}

// expected returns a copy of the expected pods and lost nodes.
func (t *tracker) expected() (pods map[string]netip.Addr, lost map[string]bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pods = make(map[string]netip.Addr, len(t.pods))
	for k, v := range t.pods {
		pods[k] = v
	}
	lost = make(map[string]bool, len(t.lost))
	for k := range t.lost {
		lost[k] = true
	}
	return pods, lost
}

// podIP returns the IP of expected pod key.
func (t *tracker) podIP(key string) (netip.Addr, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ip, ok := t.pods[key]
	return ip, ok
}
