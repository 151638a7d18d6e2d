package master

import (
	"net/netip"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// The status decisions of a sync, as functions of what the sync read: sync()
// gathers their input from the informer caches and its memory, and executes what
// they return (API writes, NB, Events).

// believed is the status the master takes as current for one EgressIP (its own
// last write while the informer cache lags behind it) and the resourceVersion a
// write of it goes over.
type believed struct {
	status egressipv1.EgressIPStatus
	rv     string
}

// statusInput is what the status decisions read; they change none of it.
type statusInput struct {
	eips     []*egressipv1.EgressIP // sorted by name
	believed map[string]believed    // by EgressIP name; absent: the cached status
	nodes    []assign.Node          // as assignment sees them
	nbNodes  map[string]nbstate.Node
	// committed is, per EgressIP, the items the last committed NB transaction
	// programmed.
	committed map[string][]egressipv1.EgressIPStatusItem
	// routers are the names of the logical routers NB has: an item is programmed
	// only when the routers its rows hang on exist (rows for a missing router are
	// skipped, and written once it appears).
	// nil: no NB (the cluster manager), no router is checked.
	routers map[string]bool
	// interconnect: every item waits for its holder's ready list (both modes).
	interconnect bool
	mode         gwmode.Mode
	now          metav1.Time
	// assign is assign.Assign, or a memo of it (nil: assign.Assign).
	assign func([]assign.EgressIP, []assign.Node) assign.Result
}

func (in statusInput) current(e *egressipv1.EgressIP) believed {
	if b, ok := in.believed[e.Name]; ok {
		return b
	}
	return believed{status: e.Status, rv: e.ResourceVersion}
}

// statusDecision is what the status of each EgressIP must become before NB is
// written.
type statusDecision struct {
	// writes are the EgressIPs whose items change, with their new status (whose
	// conditions say the new items are not programmed yet).
	writes []statusWrite
	// kept are the items of the EgressIPs whose items stay.
	kept map[string][]egressipv1.EgressIPStatusItem
	// problems are what assignment could not meet, per EgressIP (Events, conditions).
	problems map[string][]assign.Problem
}

// decideStatus assigns every EgressIP's egress IPs over the nodes, starting from
// the status believed current, and returns the status writes that makes.
func decideStatus(in statusInput) statusDecision {
	toAssignIn := make([]assign.EgressIP, 0, len(in.eips))
	for _, e := range in.eips {
		toAssignIn = append(toAssignIn, toAssign(e, in.current(e).status.Items))
	}
	assignFn := in.assign
	if assignFn == nil {
		assignFn = assign.Assign
	}
	res := assignFn(toAssignIn, in.nodes)
	d := statusDecision{kept: map[string][]egressipv1.EgressIPStatusItem{}, problems: map[string][]assign.Problem{}}
	for _, p := range res.Problems {
		d.problems[p.EgressIP] = append(d.problems[p.EgressIP], p)
	}
	for _, e := range in.eips {
		cur := in.current(e)
		want := toStatusItems(res.Status[e.Name])
		if sameItems(want, cur.status.Items) {
			d.kept[e.Name] = cur.status.Items
			continue
		}
		st, _ := statusFor(in, e, cur.status, want, d.problems[e.Name])
		d.writes = append(d.writes, statusWrite{eip: e, rv: cur.rv, status: st})
	}
	return d
}

// decideConditions returns, once NB was committed with programmed (items per
// EgressIP; in.committed is the same), the status writes of every EgressIP whose
// conditions or summary changed. An EgressIP whose believed items are not the
// programmed ones (its status write failed or raced) is left to the next sync.
func decideConditions(in statusInput, programmed map[string][]egressipv1.EgressIPStatusItem, problems map[string][]assign.Problem) []statusWrite {
	var writes []statusWrite
	for _, e := range in.eips {
		items, ok := programmed[e.Name]
		if !ok {
			continue
		}
		cur := in.current(e)
		if !sameItems(items, cur.status.Items) {
			continue
		}
		if st, changed := statusFor(in, e, cur.status, items, problems[e.Name]); changed {
			writes = append(writes, statusWrite{eip: e, rv: cur.rv, status: st})
		}
	}
	return writes
}

// statusFor returns the status eip should have with items assigned (cur is the
// status believed current) and whether it differs from cur. An item is
// programmed once a committed NB transaction wrote it (in.committed), the routers
// its rows hang on exist (ovn_cluster_router for the reroute; in shared gateway
// mode the holder's gateway router for the SNAT) and, in local gateway mode, its
// holder lists it in its egress-ips-ready annotation.
func statusFor(in statusInput, eip *egressipv1.EgressIP, cur egressipv1.EgressIPStatus, items []egressipv1.EgressIPStatusItem,
	problems []assign.Problem) (egressipv1.EgressIPStatus, bool) {
	notProg := map[string]string{}
	committed := map[egressipv1.EgressIPStatusItem]bool{}
	for _, it := range in.committed[eip.Name] {
		committed[it] = true
	}
	for _, it := range items {
		// A missing router first: rows that hang on it cannot be written, whatever the last commit held.
		if in.routers != nil && !in.routers[nbstate.ClusterRouter] {
			notProg[it.EgressIP] = "logical router " + nbstate.ClusterRouter + " not in OVN Northbound"
			continue
		}
		if gr := nbstate.GatewayRouter(it.Node); in.routers != nil && in.mode == gwmode.Shared && !in.routers[gr] {
			notProg[it.EgressIP] = "gateway router " + gr + " of node " + it.Node + " not in OVN Northbound"
			continue
		}
		if !committed[it] {
			notProg[it.EgressIP] = "OVN Northbound rows not written yet"
			continue
		}
		if in.mode == gwmode.Local || in.interconnect {
			list := annotations.EgressIPsReady
			switch {
			case in.mode == gwmode.Shared:
				list = annotations.EgressIPsSNATReady // written by the holder's zone controller
			case in.interconnect:
				list = annotations.EgressIPsReady + " and " + annotations.EgressIPsSNATReady // node daemon and zone controller
			}
			ip, err := netip.ParseAddr(it.EgressIP)
			if err != nil || !in.nbNodes[it.Node].ReadyEgressIPs[ip] {
				notProg[it.EgressIP] = "node " + it.Node + " does not list it in " + list
			}
		}
	}
	summary, want := conditions.Compute(conditions.Input{Generation: eip.Generation, Spec: eip.Spec.EgressIPs, Items: items,
		Problems: problems, NotProgrammed: notProg, Strict: eip.Spec.Strict})
	merged, changed := conditions.Merge(cur.Conditions, want, in.now)
	st := egressipv1.EgressIPStatus{Items: items, Assigned: summary, Conditions: merged}
	return st, changed || summary != cur.Assigned || !sameItems(items, cur.Items)
}

// assignMemo remembers assign.Assign's last input and result: most syncs (a pod
// added, removed or relabelled) change neither the EgressIPs nor the nodes, and
// assignment then needs no computing again. Inputs are compared deeply; two that
// differ only in ways reflect.DeepEqual cannot see through (a func inside an
// error) just compute again.
type assignMemo struct {
	eips  []assign.EgressIP
	nodes []assign.Node
	res   assign.Result
	valid bool
}

func (m *assignMemo) assign(eips []assign.EgressIP, nodes []assign.Node) assign.Result {
	if m.valid && reflect.DeepEqual(m.eips, eips) && reflect.DeepEqual(m.nodes, nodes) {
		return m.res
	}
	m.eips, m.nodes, m.res, m.valid = eips, nodes, assign.Assign(eips, nodes), true
	return m.res
}
