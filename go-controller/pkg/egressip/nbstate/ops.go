package nbstate

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Ops turns plan into the operations of ONE transaction, in make-before-break
// order: new rows and their router references first, then in-place updates (this
// is where a reroute switches its next hops), then the removals. Policy and NAT
// rows are removed by dropping them from their router (OVSDB garbage-collects
// unreferenced non-root rows), so a row shared with a router we do not know of is
// never deleted under it.
//
// Every operation is built directly from the columns we write (no mapper
// reflection per row, which dominated large plans); updates, mutations and
// deletes name their rows by UUID, so the server finds each by its index (an
// update selecting rows by external_ids scans the whole table: at 20,000 pods,
// one such update per moved EgressIP made a node loss twice as slow), and an
// update carries only the columns that change (a move: the next hops; a NAT row
// moved to another gateway router: its external_ids).
func Ops(plan Plan) ([]ovsdb.Operation, error) {
	b := opsBuilder{added: map[refKey][]any{}, removed: map[refKey][]any{}, removing: map[refKey]map[string]bool{}}
	// The inserts come first in the transaction: their slice, sized for every
	// operation, becomes the transaction's (a bulk plan has 60,000 inserts at
	// 20,000 pods; growing the slice by appending copied it a dozen times).
	ins, _, _ := plan.Counts()
	b.inserts = make([]ovsdb.Operation, 0, len(plan.Changes)+spareOps(ins))
	for i, c := range plan.Changes {
		var err error
		switch {
		case c.Op == Insert:
			err = b.insert(i, c)
		case c.Op == Update:
			err = b.update(c)
		case c.Op == Delete:
			err = b.remove(c)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s %s: %w", c.Op, c.Table, c.Key, err)
		}
	}
	return b.finish(), nil
}

type opsBuilder struct {
	inserts  []ovsdb.Operation
	updates  []ovsdb.Operation
	deletes  []ovsdb.Operation
	added    map[refKey][]any // rows (wireUUID) to reference per router column: new (named) or moved
	removed  map[refKey][]any // rows (wireUUID) to drop per router column
	removing map[refKey]map[string]bool
	order    []refKey // router columns in first-seen order (deterministic output)
}

// refKey is one reference column of one router: its policies or its nat.
type refKey struct {
	router string // UUID
	nat    bool   // the nat column (else policies)
}

func (k refKey) column() string {
	if k.nat {
		return "nat"
	}
	return "policies"
}

func (b *opsBuilder) note(key refKey) {
	_, a := b.added[key]
	_, r := b.removed[key]
	if !a && !r {
		b.order = append(b.order, key)
	}
}

func (b *opsBuilder) insert(i int, c Change) error {
	named := fmt.Sprintf("egressip_row_%d", i)
	var row ovsdb.Row
	switch r := c.Row.(type) {
	case *nbdb.LogicalRouterPolicy:
		row = ovsdb.Row{"priority": r.Priority, "match": r.Match, "action": r.Action,
			"nexthops": stringSet(r.Nexthops), "external_ids": stringMap(r.ExternalIDs)}
	case *nbdb.NAT:
		row = ovsdb.Row{"type": r.Type, "external_ip": r.ExternalIP, "logical_ip": r.LogicalIP,
			"external_ids": stringMap(r.ExternalIDs)}
	case *nbdb.AddressSet:
		row = ovsdb.Row{"name": r.Name, "addresses": stringSet(r.Addresses), "external_ids": stringMap(r.ExternalIDs)}
	default:
		return fmt.Errorf("unexpected row type %T", c.Row)
	}
	b.inserts = append(b.inserts, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: c.Table, Row: row, UUIDName: named})
	if c.Table != nbdb.AddressSetTable {
		key := refKey{router: c.RouterUUID, nat: c.Table == nbdb.NATTable}
		b.note(key)
		b.added[key] = append(b.added[key], wireUUID{id: named, named: true})
	}
	return nil
}

func (b *opsBuilder) update(c Change) error {
	switch want := c.Row.(type) {
	case *nbdb.LogicalRouterPolicy:
		// Only the columns that differ travel (a move switches next hops only).
		row := ovsdb.Row{"priority": want.Priority, "match": want.Match, "action": want.Action,
			"nexthops": stringSet(want.Nexthops), "external_ids": stringMap(want.ExternalIDs)}
		if have, ok := c.Old.(*nbdb.LogicalRouterPolicy); ok && have != nil {
			if have.Priority == want.Priority {
				delete(row, "priority")
			}
			if have.Match == want.Match {
				delete(row, "match")
			}
			if have.Action == want.Action {
				delete(row, "action")
			}
			if sameSet(have.Nexthops, want.Nexthops) {
				delete(row, "nexthops")
			}
			if maps.Equal(have.ExternalIDs, want.ExternalIDs) {
				delete(row, "external_ids")
			}
		}
		if len(row) > 0 {
			b.updates = append(b.updates, updateOp(nbdb.LogicalRouterPolicyTable, whereUUID(c.UUID), row))
		}
	case *nbdb.NAT:
		row := ovsdb.Row{"type": want.Type, "external_ip": want.ExternalIP, "logical_ip": want.LogicalIP,
			"external_ids": stringMap(want.ExternalIDs)}
		if have, ok := c.Old.(*nbdb.NAT); ok && have != nil {
			if have.Type == want.Type {
				delete(row, "type")
			}
			if have.ExternalIP == want.ExternalIP {
				delete(row, "external_ip")
			}
			if have.LogicalIP == want.LogicalIP {
				delete(row, "logical_ip")
			}
			if maps.Equal(have.ExternalIDs, want.ExternalIDs) {
				delete(row, "external_ids")
			}
		}
		if len(row) > 0 {
			b.updates = append(b.updates, updateOp(nbdb.NATTable, whereUUID(c.UUID), row))
		}
		if c.OldRouterUUID != "" && c.OldRouterUUID != c.RouterUUID {
			// A move: referenced by the new router first, then dropped by the old one.
			add := refKey{router: c.RouterUUID, nat: true}
			b.note(add)
			b.added[add] = append(b.added[add], wireUUID{id: c.UUID})
			if err := b.remove(Change{Op: Delete, Table: nbdb.NATTable, UUID: c.UUID, RouterUUID: c.OldRouterUUID}); err != nil {
				return err
			}
		}
	case *nbdb.AddressSet:
		b.updateAddressSet(c.UUID, want, c.Old.(*nbdb.AddressSet))
	case nil:
		if c.Table != nbdb.AddressSetTable {
			return fmt.Errorf("update without a row")
		}
		b.mutateAddresses(c.UUID, c.AddAddresses, c.DelAddresses)
	default:
		return fmt.Errorf("unexpected row type %T", c.Row)
	}
	return nil
}

// updateAddressSet mutates the addresses (only the difference travels, which keeps
// a one-pod change small in a large set) and updates the name and external_ids
// when they differ.
func (b *opsBuilder) updateAddressSet(uuid string, want, have *nbdb.AddressSet) {
	add, del := setDiff(want.Addresses, have.Addresses)
	b.mutateAddresses(uuid, add, del)
	if want.Name != have.Name || !maps.Equal(want.ExternalIDs, have.ExternalIDs) {
		b.updates = append(b.updates, updateOp(nbdb.AddressSetTable, whereUUID(uuid), ovsdb.Row{
			"name": want.Name, "external_ids": stringMap(want.ExternalIDs),
		}))
	}
}

// mutateAddresses removes del from an address set's addresses and adds add.
func (b *opsBuilder) mutateAddresses(uuid string, add, del []string) {
	var muts []ovsdb.Mutation
	if len(del) > 0 {
		muts = append(muts, *ovsdb.NewMutation("addresses", ovsdb.MutateOperationDelete, stringSet(del)))
	}
	if len(add) > 0 {
		muts = append(muts, *ovsdb.NewMutation("addresses", ovsdb.MutateOperationInsert, stringSet(add)))
	}
	if len(muts) > 0 {
		b.updates = append(b.updates, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: nbdb.AddressSetTable, Where: whereUUID(uuid), Mutations: muts})
	}
}

func (b *opsBuilder) remove(c Change) error {
	if c.Table == nbdb.AddressSetTable {
		b.deletes = append(b.deletes, ovsdb.Operation{Op: ovsdb.OperationDelete, Table: nbdb.AddressSetTable, Where: whereUUID(c.UUID)})
		return nil
	}
	if c.RouterUUID == "" {
		return fmt.Errorf("row %s has no router", c.UUID)
	}
	key := refKey{router: c.RouterUUID, nat: c.Table == nbdb.NATTable}
	if b.removing[key] == nil {
		b.removing[key] = map[string]bool{}
	}
	if b.removing[key][c.UUID] {
		return nil
	}
	b.removing[key][c.UUID] = true
	b.note(key)
	b.removed[key] = append(b.removed[key], wireUUID{id: c.UUID})
	return nil
}

// finish assembles: inserts, router reference inserts, updates, router reference
// removals, address set deletes.
func (b *opsBuilder) finish() []ovsdb.Operation {
	var refAdd, refDel []ovsdb.Operation
	for _, key := range b.order {
		if uuids := b.added[key]; len(uuids) > 0 {
			refAdd = append(refAdd, mutateOp(nbdb.LogicalRouterTable, whereUUID(key.router), key.column(), ovsdb.MutateOperationInsert, uuids))
		}
		if uuids := b.removed[key]; len(uuids) > 0 {
			refDel = append(refDel, mutateOp(nbdb.LogicalRouterTable, whereUUID(key.router), key.column(), ovsdb.MutateOperationDelete, uuids))
		}
	}
	n := len(b.inserts) + len(refAdd) + len(b.updates) + len(refDel) + len(b.deletes)
	ops := b.inserts
	if cap(ops) < n {
		ops = make([]ovsdb.Operation, 0, n)
		ops = append(ops, b.inserts...)
	}
	ops = append(ops, refAdd...)
	ops = append(ops, b.updates...)
	ops = append(ops, refDel...)
	ops = append(ops, b.deletes...)
	return ops
}

// spareOps is the room left for the router mutations (at most two per router
// column a plan touches) beside one operation per change.
func spareOps(inserts int) int {
	return min(inserts, 512)
}

func whereUUID(uuid string) []ovsdb.Condition {
	return []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, wireUUID{id: uuid})}
}

func updateOp(table string, where []ovsdb.Condition, row ovsdb.Row) ovsdb.Operation {
	return ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: table, Where: where, Row: row}
}

func mutateOp(table string, where []ovsdb.Condition, column string, mutator ovsdb.Mutator, uuids []any) ovsdb.Operation {
	set := ovsdb.OvsSet{GoSet: uuids}
	return ovsdb.Operation{Op: ovsdb.OperationMutate, Table: table, Where: where,
		Mutations: []ovsdb.Mutation{*ovsdb.NewMutation(column, mutator, set)}}
}

func stringSet(ss []string) ovsdb.OvsSet {
	set := ovsdb.OvsSet{GoSet: make([]any, len(ss))}
	for i, s := range ss {
		set.GoSet[i] = s
	}
	return set
}

// stringMap is an OVSDB map column's value for an operation. The row's own map
// is used as it is: ovsdb.OvsMap would copy it into a map of interfaces, about
// 650 bytes per row (37 MiB of a 57,600-row bulk sync's peak at 20,000 pods).
func stringMap(m map[string]string) wireMap { return wireMap(m) }

// wireMap is an OVSDB map of strings as the wire has it: ["map", [[key, value], ...]]
// (RFC 7047 section 5.1), keys in order.
type wireMap map[string]string

func (m wireMap) MarshalJSON() ([]byte, error) {
	pairs := make([][2]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, [2]string{k, m[k]})
	}
	return json.Marshal([]any{"map", pairs})
}

// wireUUID is a row's UUID in an operation: ["uuid", id] for a row in NB (the
// Mirror's and the cache's UUIDs are the server's), ["named-uuid", id] for a row
// inserted in the same transaction (RFC 7047 section 5.1). ovsdb.UUID tells the
// two apart by matching every UUID against a regular expression as it is encoded:
// 7,600 of them in a 20,000-pod node loss (BenchmarkOpsMove: 52-60 -> 43-47 ms to
// build and encode its operations, on the way from the status writes to NB).
type wireUUID struct {
	id    string
	named bool
}

func (u wireUUID) MarshalJSON() ([]byte, error) {
	kind := "uuid"
	if u.named {
		kind = "named-uuid"
	}
	b := make([]byte, 0, len(u.id)+len(kind)+7)
	b = append(b, `["`...)
	b = append(b, kind...)
	b = append(b, `","`...)
	b = append(b, u.id...) // a UUID or one of our names: no character to escape
	b = append(b, `"]`...)
	return b, nil
}

// setDiff returns what to add to have and what to remove from it to get want.
func setDiff(want, have []string) (add, del []string) {
	w := make(map[string]bool, len(want))
	for _, s := range want {
		w[s] = true
	}
	h := make(map[string]bool, len(have))
	for _, s := range have {
		h[s] = true
		if !w[s] {
			del = append(del, s)
		}
	}
	for _, s := range want {
		if !h[s] {
			add = append(add, s)
			h[s] = true
		}
	}
	slices.Sort(add)
	slices.Sort(del)
	return add, del
}
