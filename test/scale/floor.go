package scale

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// Floor is the raw libovsdb floor: the rows of the converged assign phase
// committed by a plain libovsdb client in ONE transaction into a fresh NB server
// holding the same topology.
type Floor struct {
	// Policies, NATs and AddressSets committed.
	Policies, NATs, AddressSets int
	// Ops is the transaction's length.
	Ops int
	// Build is how long building the operations took (libovsdb Create and Mutate).
	Build time.Duration
	// Commit is from the start of building the operations until Transact returned.
	Commit time.Duration
	// Seen is from the same start until an NB monitor (as the harness' for the
	// master) had received every row.
	Seen time.Duration
	// Machine is the CPU time every process of the machine used meanwhile (from
	// /proc/stat): how busy the shared machine was while the floor was measured.
	Machine cpuTime

	// Move is the node-loss phase's changes to those rows, committed the same way
	// once the rows are in (zero when there were none).
	Move MoveFloor
}

// MoveFloor is the raw libovsdb floor of a node loss: the reroute policies' new
// next hops (one update each) and the SNAT rows' moves between gateway routers
// (one mutation per router and direction), in ONE transaction.
type MoveFloor struct {
	Nexthops, NATs int
	Ops            int
	// Commit and Seen as in Floor: until Transact returned, and until the
	// observer had every policy with its new next hops.
	Commit, Seen time.Duration
}

// moves are what a phase changed in rows present before and after it, by row
// identity (external_ids, which do not name the router): a reroute policy's next
// hops, a SNAT row's gateway router.
type moves struct {
	nexthops map[string][]string // IDs -> next hops after
	routers  map[string]string   // IDs -> gateway router after
}

func movesBetween(before, after nbstate.Current) moves {
	m := moves{nexthops: map[string][]string{}, routers: map[string]string{}}
	for k, p := range after.Rows.Policies {
		if old, ok := before.Rows.Policies[k]; ok && hopsOf(old.Nexthops) != hopsOf(p.Nexthops) {
			m.nexthops[k.IDs.String()] = p.Nexthops
		}
	}
	was := make(map[string]string, len(before.Rows.NATs))
	for k := range before.Rows.NATs {
		was[k.IDs.String()] = k.Router
	}
	for k := range after.Rows.NATs {
		if r, ok := was[k.IDs.String()]; ok && r != k.Router {
			m.routers[k.IDs.String()] = k.Router
		}
	}
	return m
}

// hopsOf is a set of next hops as one comparable string.
func hopsOf(hops []string) string {
	s := slices.Clone(hops)
	sort.Strings(s)
	return strings.Join(s, " ")
}

// floorRows are the owned rows of a converged NB, by parent router.
type floorRows struct {
	policies map[string][]*nbdb.LogicalRouterPolicy
	nats     map[string][]*nbdb.NAT
	sets     []*nbdb.AddressSet
}

func snapshotRows(cur nbstate.Current) floorRows {
	r := floorRows{policies: map[string][]*nbdb.LogicalRouterPolicy{}, nats: map[string][]*nbdb.NAT{}}
	for k, p := range cur.Rows.Policies {
		r.policies[k.Router] = append(r.policies[k.Router], p)
	}
	for k, n := range cur.Rows.NATs {
		r.nats[k.Router] = append(r.nats[k.Router], n)
	}
	for _, s := range cur.Rows.AddressSets {
		r.sets = append(r.sets, s)
	}
	return r
}

func (r floorRows) counts() (policies, nats, sets int) {
	for _, ps := range r.policies {
		policies += len(ps)
	}
	for _, ns := range r.nats {
		nats += len(ns)
	}
	return policies, nats, len(r.sets)
}

// runFloor starts a fresh NB server with the topology of nodes, commits rows in one
// transaction from a client monitoring what the master monitors, and times it until
// a second client's monitor has every row. The server is stopped before it returns.
//
// With mv, the same client then commits mv's changes to those rows (rows the
// phase changed but the floor does not hold are left out) in one transaction and
// times it until the observer has every policy's new next hops.
func runFloor(ctx context.Context, t testing.TB, nodes []cluster.NodeAddrs, rows floorRows, mv moves) (Floor, error) {
	nbs := nbserver.Start(t)
	defer nbs.Stop()
	if err := cluster.WriteNBTopology(ctx, nbs.Addr, nodes, gwmode.Shared); err != nil {
		return Floor{}, fmt.Errorf("floor: %w", err)
	}
	var f Floor
	f.Policies, f.NATs, f.AddressSets = rows.counts()
	want := f.Policies + f.NATs + f.AddressSets

	// The observer: counts owned rows present, notes when the last one arrived.
	var mu sync.Mutex
	present := map[string]bool{}
	var lastAt, movedAt time.Time
	all := make(chan struct{})
	// The move: policy uuid -> its next hops wanted; closed once none is left.
	var pending map[string]string
	moved := make(chan struct{})
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	startMonitor(mctx, t, nbs.Addr, func(evs []rowEvent) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			info, owned := classify(ev.row)
			if owned {
				present[ev.uuid] = true
			} else {
				delete(present, ev.uuid)
			}
			if len(present) == want && lastAt.IsZero() {
				lastAt = ev.at
				close(all)
			}
			if hops, ok := pending[ev.uuid]; ok && info.kind == rowReroute && info.val == hops {
				delete(pending, ev.uuid)
				if len(pending) == 0 {
					movedAt = ev.at
					close(moved)
				}
			}
		}
	}, func(map[string]model.Model) {
		// The observer dropped events: the row count is unknown; Seen stays 0.
	})

	// The writer monitors what the master monitors (go-controller/pkg/master/nb.go:
	// router names, address sets' names and external_ids), so that it decodes
	// what the master would of its own transaction.
	writer := nbs.Conn(t)
	lr, as := &nbdb.LogicalRouter{}, &nbdb.AddressSet{}
	if _, err := writer.Monitor(ctx, writer.NewMonitor(
		client.WithTable(lr, &lr.Name),
		client.WithTable(as, &as.Name, &as.ExternalIDs),
	)); err != nil {
		return Floor{}, fmt.Errorf("floor: monitor: %w", err)
	}

	busy0, err := machineBusy()
	if err != nil {
		return Floor{}, err
	}
	start := time.Now()
	ops, made, err := floorOps(writer, rows)
	if err != nil {
		return Floor{}, err
	}
	f.Ops, f.Build = len(ops), time.Since(start)
	res, err := writer.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		return Floor{}, fmt.Errorf("floor: transaction of %d operations: %w", len(ops), err)
	}
	f.Commit = time.Since(start)
	select {
	case <-all:
		mu.Lock()
		f.Seen = lastAt.Sub(start)
		mu.Unlock()
		busy1, err := machineBusy()
		if err != nil {
			return Floor{}, err
		}
		f.Machine = busy1 - busy0
	case <-ctx.Done():
		return f, fmt.Errorf("floor: the observer did not see all %d rows: %w", want, context.Cause(ctx))
	}
	if len(mv.nexthops)+len(mv.routers) == 0 {
		return f, nil
	}

	// The move, on the rows as inserted (their UUIDs from the transaction's results).
	start = time.Now()
	ops, wantHops, nats, err := moveOps(writer, mv, made.inserted(res))
	if err != nil {
		return f, err
	}
	f.Move.Ops, f.Move.Nexthops, f.Move.NATs = len(ops), len(wantHops), nats
	if len(wantHops) == 0 {
		return f, fmt.Errorf("floor: none of the %d policies the node loss changed is in the floor's rows", len(mv.nexthops))
	}
	mu.Lock()
	pending = wantHops
	mu.Unlock()
	res, err = writer.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		return f, fmt.Errorf("floor: move transaction of %d operations: %w", len(ops), err)
	}
	f.Move.Commit = time.Since(start)
	select {
	case <-moved:
		mu.Lock()
		f.Move.Seen = movedAt.Sub(start)
		mu.Unlock()
	case <-ctx.Done():
		return f, fmt.Errorf("floor: the observer did not see the %d moved policies: %w", len(wantHops), context.Cause(ctx))
	}
	return f, nil
}

// madeRow is what one insert of floorOps made: its table, identity (IDs) and router.
type madeRow struct {
	table, ids, router string
}

// made are floorOps' inserts, in operation order (the first operations).
type made []madeRow

// insertedRow is a row of the floor's NB: its UUID and router.
type insertedRow struct{ uuid, router string }

// inserted maps, per table, each inserted row's identity to its UUID and router,
// from the bulk transaction's results.
func (m made) inserted(res []ovsdb.OperationResult) map[string]map[string]insertedRow {
	out := map[string]map[string]insertedRow{}
	for i, r := range m {
		if i >= len(res) || r.ids == "" {
			continue
		}
		if out[r.table] == nil {
			out[r.table] = map[string]insertedRow{}
		}
		out[r.table][r.ids] = insertedRow{uuid: res[i].UUID.GoUUID, router: r.router}
	}
	return out
}

// moveOps builds mv as plain libovsdb operations on the inserted rows: an update
// of each changed policy's next hops, and per gateway router one mutation
// deleting the SNAT rows that leave it and one inserting those that arrive. It
// returns them with the next hops each updated policy must show (uuid -> hops) and
// the number of SNAT rows moved.
func moveOps(c client.Client, mv moves, rows map[string]map[string]insertedRow) ([]ovsdb.Operation, map[string]string, int, error) {
	var ops []ovsdb.Operation
	want := map[string]string{}
	ids := slices.Sorted(maps.Keys(mv.nexthops))
	for _, id := range ids {
		row, ok := rows[nbdb.LogicalRouterPolicyTable][id]
		if !ok {
			continue // a pod added after assign: not in the floor
		}
		upd := &nbdb.LogicalRouterPolicy{UUID: row.uuid, Nexthops: mv.nexthops[id]}
		op, err := c.Where(upd).Update(upd, &upd.Nexthops)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("floor: update policy %s: %w", row.uuid, err)
		}
		ops = append(ops, op...)
		want[row.uuid] = hopsOf(upd.Nexthops)
	}
	leave, arrive := map[string][]string{}, map[string][]string{}
	nats := 0
	for id, to := range mv.routers {
		row, ok := rows[nbdb.NATTable][id]
		if !ok || row.router == to {
			continue
		}
		leave[row.router] = append(leave[row.router], row.uuid)
		arrive[to] = append(arrive[to], row.uuid)
		nats++
	}
	for _, side := range []struct {
		rows    map[string][]string
		mutator ovsdb.Mutator
	}{{arrive, ovsdb.MutateOperationInsert}, {leave, ovsdb.MutateOperationDelete}} {
		for _, router := range slices.Sorted(maps.Keys(side.rows)) {
			lr := &nbdb.LogicalRouter{}
			op, err := c.WhereAny(lr, model.Condition{Field: &lr.Name, Function: ovsdb.ConditionEqual, Value: router}).
				Mutate(lr, model.Mutation{Field: &lr.Nat, Mutator: side.mutator, Value: side.rows[router]})
			if err != nil {
				return nil, nil, 0, fmt.Errorf("floor: mutate %s: %w", router, err)
			}
			ops = append(ops, op...)
		}
	}
	return ops, want, nats, nil
}

// floorOps builds the inserts of every row (named UUIDs) and one mutation per
// router adding its policies and NAT rows.
func floorOps(c client.Client, rows floorRows) ([]ovsdb.Operation, made, error) {
	var models []model.Model
	var mm made
	idsOf := func(ext map[string]string) string {
		if ids, ok := nbstate.ParseIDs(ext); ok {
			return ids.String()
		}
		return ""
	}
	n := 0
	name := func(kind string) string { n++; return fmt.Sprintf("%s%d", kind, n) }
	var mutations []ovsdb.Operation
	routers := map[string]bool{}
	for r := range rows.policies {
		routers[r] = true
	}
	for r := range rows.nats {
		routers[r] = true
	}
	names := make([]string, 0, len(routers))
	for r := range routers {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, router := range names {
		var policies, nats []string
		for _, p := range rows.policies[router] {
			cp := *p
			cp.UUID = name("policy")
			models = append(models, &cp)
			mm = append(mm, madeRow{table: nbdb.LogicalRouterPolicyTable, ids: idsOf(p.ExternalIDs), router: router})
			policies = append(policies, cp.UUID)
		}
		for _, nat := range rows.nats[router] {
			cp := *nat
			cp.UUID = name("nat")
			models = append(models, &cp)
			mm = append(mm, madeRow{table: nbdb.NATTable, ids: idsOf(nat.ExternalIDs), router: router})
			nats = append(nats, cp.UUID)
		}
		lr := &nbdb.LogicalRouter{Name: router}
		var muts []model.Mutation
		if len(policies) > 0 {
			muts = append(muts, model.Mutation{Field: &lr.Policies, Mutator: ovsdb.MutateOperationInsert, Value: policies})
		}
		if len(nats) > 0 {
			muts = append(muts, model.Mutation{Field: &lr.Nat, Mutator: ovsdb.MutateOperationInsert, Value: nats})
		}
		ops, err := c.WhereAny(lr, model.Condition{Field: &lr.Name, Function: ovsdb.ConditionEqual, Value: router}).Mutate(lr, muts...)
		if err != nil {
			return nil, nil, fmt.Errorf("floor: mutate %s: %w", router, err)
		}
		mutations = append(mutations, ops...)
	}
	for _, s := range rows.sets {
		cp := *s
		cp.UUID = name("set")
		models = append(models, &cp)
		mm = append(mm, madeRow{table: nbdb.AddressSetTable})
	}
	ops, err := c.Create(models...)
	if err != nil {
		return nil, nil, fmt.Errorf("floor: inserts: %w", err)
	}
	return append(ops, mutations...), mm, nil
}
