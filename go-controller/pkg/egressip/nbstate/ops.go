package nbstate

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Ops turns plan into the operations of ONE transaction, in make-before-break
// order: new rows and their router references first, then in-place updates (this
// is where a reroute switches its next hops), then the removals. Policy and NAT
// rows are removed by dropping them from their router (OVSDB garbage-collects
// unreferenced non-root rows), so a row shared with a router we do not know of is
// never deleted under it. api must be bound to the cache that Current was read from.
func Ops(api client.API, plan Plan) ([]ovsdb.Operation, error) {
	b := opsBuilder{api: api, added: map[refKey][]string{}, removed: map[refKey][]string{}, removing: map[string]bool{}}
	for i, c := range plan.Changes {
		var err error
		switch c.Op {
		case Insert:
			err = b.insert(i, c)
		case Update:
			err = b.update(c)
		case Delete:
			err = b.remove(c)
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s %s: %w", c.Op, c.Table, c.Key, err)
		}
	}
	return b.finish()
}

type opsBuilder struct {
	api      client.API
	inserts  []ovsdb.Operation
	updates  []ovsdb.Operation
	deletes  []ovsdb.Operation
	added    map[refKey][]string // new policy/NAT rows (named UUIDs) per router column
	removed  map[refKey][]string // rows to drop per router column
	removing map[string]bool     // "<router column> <row uuid>" already in removed
	order    []refKey            // router columns in first-seen order (deterministic output)
}

// refKey is one reference column of one router: its policies or its nat.
type refKey struct {
	router string // UUID
	nat    bool   // the nat column (else policies)
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
	var row model.Model
	switch r := c.Row.(type) {
	case *nbdb.LogicalRouterPolicy:
		cp := *r
		cp.UUID = named
		row = &cp
	case *nbdb.NAT:
		cp := *r
		cp.UUID = named
		row = &cp
	case *nbdb.AddressSet:
		cp := *r
		cp.UUID = named
		row = &cp
	default:
		return fmt.Errorf("unexpected row type %T", c.Row)
	}
	ops, err := b.api.Create(row)
	if err != nil {
		return err
	}
	b.inserts = append(b.inserts, ops...)
	if c.Table != nbdb.AddressSetTable {
		key := refKey{router: c.RouterUUID, nat: c.Table == nbdb.NATTable}
		b.note(key)
		b.added[key] = append(b.added[key], named)
	}
	return nil
}

func (b *opsBuilder) update(c Change) error {
	var ops []ovsdb.Operation
	var err error
	switch want := c.Row.(type) {
	case *nbdb.LogicalRouterPolicy:
		cp := *want
		cp.UUID = c.UUID
		ops, err = b.api.Where(&cp).Update(&cp, &cp.Priority, &cp.Match, &cp.Action, &cp.Nexthops, &cp.ExternalIDs)
	case *nbdb.NAT:
		cp := *want
		cp.UUID = c.UUID
		ops, err = b.api.Where(&cp).Update(&cp, &cp.Type, &cp.ExternalIP, &cp.LogicalIP, &cp.ExternalIDs)
	case *nbdb.AddressSet:
		ops, err = b.updateAddressSet(c.UUID, want, c.Old.(*nbdb.AddressSet))
	default:
		err = fmt.Errorf("unexpected row type %T", c.Row)
	}
	b.updates = append(b.updates, ops...)
	return err
}

// updateAddressSet mutates the addresses (only the difference travels, which keeps
// a one-pod change small in a large set) and updates the name and external_ids
// when they differ.
func (b *opsBuilder) updateAddressSet(uuid string, want, have *nbdb.AddressSet) ([]ovsdb.Operation, error) {
	target := &nbdb.AddressSet{UUID: uuid}
	var ops []ovsdb.Operation
	add, del := setDiff(want.Addresses, have.Addresses)
	var muts []model.Mutation
	if len(del) > 0 {
		muts = append(muts, model.Mutation{Field: &target.Addresses, Mutator: ovsdb.MutateOperationDelete, Value: del})
	}
	if len(add) > 0 {
		muts = append(muts, model.Mutation{Field: &target.Addresses, Mutator: ovsdb.MutateOperationInsert, Value: add})
	}
	if len(muts) > 0 {
		m, err := b.api.Where(target).Mutate(target, muts...)
		if err != nil {
			return nil, err
		}
		ops = append(ops, m...)
	}
	if want.Name != have.Name || !maps.Equal(want.ExternalIDs, have.ExternalIDs) {
		cp := &nbdb.AddressSet{UUID: uuid, Name: want.Name, ExternalIDs: want.ExternalIDs}
		u, err := b.api.Where(cp).Update(cp, &cp.Name, &cp.ExternalIDs)
		if err != nil {
			return nil, err
		}
		ops = append(ops, u...)
	}
	return ops, nil
}

func (b *opsBuilder) remove(c Change) error {
	if c.Table == nbdb.AddressSetTable {
		ops, err := b.api.Where(&nbdb.AddressSet{UUID: c.UUID}).Delete()
		b.deletes = append(b.deletes, ops...)
		return err
	}
	if c.RouterUUID == "" {
		return fmt.Errorf("row %s has no router", c.UUID)
	}
	key := refKey{router: c.RouterUUID, nat: c.Table == nbdb.NATTable}
	seen := fmt.Sprint(key, c.UUID)
	if b.removing[seen] {
		return nil
	}
	b.removing[seen] = true
	b.note(key)
	b.removed[key] = append(b.removed[key], c.UUID)
	return nil
}

// finish assembles: inserts, router reference inserts, updates, router reference
// removals, address set deletes.
func (b *opsBuilder) finish() ([]ovsdb.Operation, error) {
	var refAdd, refDel []ovsdb.Operation
	for _, key := range b.order {
		routerUUID := key.router
		r := &nbdb.LogicalRouter{UUID: routerUUID}
		field := any(&r.Policies)
		if key.nat {
			field = &r.Nat
		}
		if uuids := b.added[key]; len(uuids) > 0 {
			ops, err := b.api.Where(r).Mutate(r, model.Mutation{Field: field, Mutator: ovsdb.MutateOperationInsert, Value: uuids})
			if err != nil {
				return nil, fmt.Errorf("reference new rows from router %s: %w", routerUUID, err)
			}
			refAdd = append(refAdd, ops...)
		}
		if uuids := b.removed[key]; len(uuids) > 0 {
			ops, err := b.api.Where(r).Mutate(r, model.Mutation{Field: field, Mutator: ovsdb.MutateOperationDelete, Value: uuids})
			if err != nil {
				return nil, fmt.Errorf("drop rows from router %s: %w", routerUUID, err)
			}
			refDel = append(refDel, ops...)
		}
	}
	ops := make([]ovsdb.Operation, 0, len(b.inserts)+len(refAdd)+len(b.updates)+len(refDel)+len(b.deletes))
	ops = append(ops, b.inserts...)
	ops = append(ops, refAdd...)
	ops = append(ops, b.updates...)
	ops = append(ops, refDel...)
	ops = append(ops, b.deletes...)
	return ops, nil
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
