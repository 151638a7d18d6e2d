package nbstate

import (
	"context"
	"fmt"

	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// OVN's sequence numbers say when a Northbound change is in the data plane (what
// ovn-nbctl --wait=hv waits for). A writer increments NB_Global's nb_cfg in its
// transaction; ovn-northd copies nb_cfg into the southbound database once it has
// translated that transaction into logical flows; each chassis' ovn-controller
// reports the value whose flows it has installed; northd writes the lowest of them
// (its local chassis only: remote chassis of the interconnect layout report none)
// into NB_Global's hv_cfg. A transaction's rows are in every chassis' flows once
// hv_cfg has reached the nb_cfg that transaction set.

// anyRow matches every row (NB_Global has at most one).
var anyRow = []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionNotEqual,
	Value: ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"}}}

// seqOps increments NB_Global's nb_cfg and reads it back, as the last operations of
// a transaction.
func seqOps() []ovsdb.Operation {
	return []ovsdb.Operation{
		{Op: ovsdb.OperationMutate, Table: nbdb.NBGlobalTable, Where: anyRow,
			Mutations: []ovsdb.Mutation{{Column: "nb_cfg", Mutator: ovsdb.MutateOperationAdd, Value: 1}}},
		{Op: ovsdb.OperationSelect, Table: nbdb.NBGlobalTable, Where: anyRow, Columns: []string{"nb_cfg"}},
	}
}

// seqResult is the nb_cfg the select of seqOps read: 0 and false when NB has no
// NB_Global row (no ovn-northd has initialised it).
func seqResult(res ovsdb.OperationResult) (int, bool, error) {
	if len(res.Rows) == 0 {
		return 0, false, nil
	}
	switch v := res.Rows[0]["nb_cfg"].(type) {
	case float64:
		return int(v), true, nil
	case int:
		return v, true, nil
	default:
		return 0, false, fmt.Errorf("NB_Global nb_cfg read back as %T", v)
	}
}

// CommitPlanSeq is CommitPlan with OVN's sequence number: in the same transaction
// it increments NB_Global's nb_cfg and returns the value it set (seq; ok is false
// when NB has no NB_Global row). The plan's rows are in every chassis' flows once
// NB_Global's hv_cfg reaches seq (DataPlane). An empty plan commits nothing.
func CommitPlanSeq(ctx context.Context, c Client, plan Plan) (uuids []string, seq int, ok bool, err error) {
	if len(plan.Changes) == 0 {
		return nil, 0, false, nil
	}
	ops, err := Ops(plan)
	if err != nil {
		return nil, 0, false, err
	}
	res, err := commitOps(ctx, c, append(ops, seqOps()...))
	if err != nil {
		return nil, 0, false, err
	}
	if seq, ok, err = seqResult(res[len(ops)+1]); err != nil {
		return nil, 0, false, err
	}
	uuids, err = insertUUIDs(plan, ops, res)
	return uuids, seq, ok, err
}

// DataPlane is what NB_Global says of the data plane: Known is false when the
// cache holds no NB_Global row (not monitored, or no ovn-northd has initialised
// this NB).
type DataPlane struct {
	Known        bool
	NBCfg, HVCfg int
}

// ReadDataPlane reads NB_Global from the cache (which must monitor its nb_cfg and
// hv_cfg).
func ReadDataPlane(tc *cache.TableCache) (DataPlane, error) {
	var d DataPlane
	if tc == nil {
		return d, fmt.Errorf("no NB cache (not connected)")
	}
	err := EachRow(tc, nbdb.NBGlobalTable, func(g *nbdb.NBGlobal) {
		d = DataPlane{Known: true, NBCfg: g.NbCfg, HVCfg: g.HvCfg}
	})
	return d, err
}
