package scale

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

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
func runFloor(ctx context.Context, t testing.TB, nodes []cluster.NodeAddrs, rows floorRows) (Floor, error) {
	nbs := nbserver.Start(t)
	defer nbs.Stop()
	if err := cluster.WriteNBTopology(ctx, nbs.Addr, nodes, cluster.GatewayShared); err != nil {
		return Floor{}, fmt.Errorf("floor: %w", err)
	}
	var f Floor
	f.Policies, f.NATs, f.AddressSets = rows.counts()
	want := f.Policies + f.NATs + f.AddressSets

	// The observer: counts owned rows present, notes when the last one arrived.
	var mu sync.Mutex
	present := map[string]bool{}
	var lastAt time.Time
	all := make(chan struct{})
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	startMonitor(mctx, t, nbs.Addr, func(evs []rowEvent) {
		mu.Lock()
		defer mu.Unlock()
		for _, ev := range evs {
			if _, owned := classify(ev.row); owned {
				present[ev.uuid] = true
			} else {
				delete(present, ev.uuid)
			}
			if len(present) == want && lastAt.IsZero() {
				lastAt = ev.at
				close(all)
			}
		}
	}, func(map[string]model.Model) {
		// The observer dropped events: the row count is unknown; Seen stays 0.
	})

	writer := nbs.Conn(t)
	lr := &nbdb.LogicalRouter{}
	if _, err := writer.Monitor(ctx, writer.NewMonitor(
		client.WithTable(lr, &lr.Name, &lr.Policies, &lr.Nat),
		client.WithTable(&nbdb.LogicalRouterPolicy{}),
		client.WithTable(&nbdb.NAT{}),
		client.WithTable(&nbdb.AddressSet{}),
	)); err != nil {
		return Floor{}, fmt.Errorf("floor: monitor: %w", err)
	}

	busy0, err := machineBusy()
	if err != nil {
		return Floor{}, err
	}
	start := time.Now()
	ops, err := floorOps(writer, rows)
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
	return f, nil
}

// floorOps builds the inserts of every row (named UUIDs) and one mutation per
// router adding its policies and NAT rows.
func floorOps(c client.Client, rows floorRows) ([]ovsdb.Operation, error) {
	var models []model.Model
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
			policies = append(policies, cp.UUID)
		}
		for _, nat := range rows.nats[router] {
			cp := *nat
			cp.UUID = name("nat")
			models = append(models, &cp)
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
			return nil, fmt.Errorf("floor: mutate %s: %w", router, err)
		}
		mutations = append(mutations, ops...)
	}
	for _, s := range rows.sets {
		cp := *s
		cp.UUID = name("set")
		models = append(models, &cp)
	}
	ops, err := c.Create(models...)
	if err != nil {
		return nil, fmt.Errorf("floor: inserts: %w", err)
	}
	return append(ops, mutations...), nil
}
