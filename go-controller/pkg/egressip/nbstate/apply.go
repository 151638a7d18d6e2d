package nbstate

import (
	"context"
	"fmt"

	"github.com/ovn-org/libovsdb/ovsdb"
)

// Client is the part of a libovsdb client Apply uses: its cache (ReadCurrent) and
// Transact. Operations are built from our own columns (Ops), not by the client.
type Client interface {
	CacheReader
	Transact(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error)
}

// Apply makes the rows we own in NB equal to desired: it reads the client's cache
// (ReadCurrent), computes the Plan (Diff), and commits all of it in ONE transaction
// (none when the plan is empty). It returns the plan, also on error. An error
// means nothing was committed (OVSDB transactions are atomic) or that the outcome
// is unknown (connection lost): either way, calling Apply again converges.
func Apply(ctx context.Context, c Client, desired State) (Plan, error) {
	cur, err := ReadCurrent(ctx, c)
	if err != nil {
		return Plan{}, err
	}
	plan := Diff(desired, cur)
	_, err = CommitPlan(ctx, c, plan)
	return plan, err
}

// CommitPlan commits plan in ONE transaction (none when it is empty) and returns
// the UUIDs NB gave its Inserts, in plan order (for Mirror.Commit). An error means
// nothing was committed (OVSDB transactions are atomic) or that the outcome is
// unknown (connection lost).
func CommitPlan(ctx context.Context, c Client, plan Plan) ([]string, error) {
	if len(plan.Changes) == 0 {
		return nil, nil
	}
	ops, err := Ops(plan)
	if err != nil {
		return nil, err
	}
	res, err := commitOps(ctx, c, ops)
	if err != nil {
		return nil, err
	}
	return insertUUIDs(plan, ops, res)
}

// commitOps commits ops in one transaction and checks every result.
func commitOps(ctx context.Context, c Client, ops []ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	res, err := c.Transact(ctx, ops...)
	if err != nil {
		return nil, fmt.Errorf("NB transaction of %d operations: %w", len(ops), err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return nil, fmt.Errorf("NB transaction of %d operations failed: %w", len(ops), err)
	}
	return res, nil
}

// insertUUIDs are the UUIDs NB gave plan's Inserts, in plan order, from the
// results of Ops(plan) (which puts the inserts first, one operation per Insert).
func insertUUIDs(plan Plan, ops []ovsdb.Operation, res []ovsdb.OperationResult) ([]string, error) {
	var uuids []string
	for i, ch := range plan.Changes {
		if ch.Op != Insert {
			continue
		}
		n := len(uuids)
		if n >= len(res) || ops[n].Op != ovsdb.OperationInsert {
			return nil, fmt.Errorf("NB transaction: no result for insert %d (change %d)", n, i)
		}
		uuids = append(uuids, res[n].UUID.GoUUID)
	}
	return uuids, nil
}
