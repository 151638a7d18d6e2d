package nbstate

import (
	"maps"
	"slices"
	"sort"

	"github.com/ovn-org/libovsdb/model"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Ref points at an existing row we own.
type Ref struct {
	Table string
	UUID  string
	// RouterUUID is the router that references the row (policies and NAT rows).
	RouterUUID string
}

// Current is the part of NB that concerns us (see ReadCurrent).
type Current struct {
	// Rows are the rows we own, keyed by identity, UUID set. A policy or NAT row
	// referenced by several routers appears once per router.
	Rows State
	// Stale are rows we own that go whatever is desired: all but the lowest UUID of
	// rows sharing one Key, and rows whose external_ids do not parse.
	Stale []Ref
	// Routers maps every router name in NB to its UUID.
	Routers map[string]string
	// ForeignAddressSets are the names of address sets we do not own.
	ForeignAddressSets map[string]bool
}

// NewCurrent returns an empty Current.
func NewCurrent() Current {
	return Current{Rows: NewState(), Routers: map[string]string{}, ForeignAddressSets: map[string]bool{}}
}

// ChangeOp is the kind of a Change.
type ChangeOp int

const (
	Insert ChangeOp = iota
	Update
	Delete
)

func (o ChangeOp) String() string { return [...]string{"insert", "update", "delete"}[o] }

// Change is one row to insert, update or delete.
type Change struct {
	Op    ChangeOp
	Table string
	// Key is the row's identity (zero for stale rows whose IDs did not parse).
	Key Key
	// RouterUUID is the parent router of a policy or NAT row (for an Update of a NAT
	// row that moves to another gateway router: the new one).
	RouterUUID string
	// OldRouterUUID is set on an Update of a NAT row that moves from this router to
	// RouterUUID (its egress IP moved to another node): the row is updated in place
	// and changes router, instead of being deleted and created again. OldKey is
	// then the row's Key before the move (a pointer: a plan has tens of thousands
	// of Changes, few of them moves).
	OldRouterUUID string
	OldKey        *Key
	// AddAddresses and DelAddresses, on an Update of an address set without Row,
	// are the addresses to add and remove (the incremental path knows the delta
	// without comparing whole sets).
	AddAddresses, DelAddresses []string
	// UUID is the existing row (Update, Delete).
	UUID string
	// Row is the desired row (Insert, Update); Old the current one (Update).
	Row, Old model.Model
}

// Plan is the outcome of Diff.
type Plan struct {
	// Changes are ordered make-before-break: inserts, then updates, then deletes;
	// within each group by table (address sets, policies, NAT) and Key.
	Changes []Change
	// Skipped are desired rows that cannot be written: their parent router is not in
	// NB, or an address set of that name exists and is not ours.
	Skipped []Key
}

// Counts returns the number of inserts, updates and deletes.
func (p Plan) Counts() (inserts, updates, deletes int) {
	for _, c := range p.Changes {
		switch c.Op {
		case Insert:
			inserts++
		case Update:
			updates++
		case Delete:
			deletes++
		}
	}
	return
}

// Diff compares desired with current and returns the changes that make NB equal
// to desired for the rows we own. Rows we do not own are never in the plan. Only
// the changes are sorted, so a sync with little to change costs little; they are
// collected in one slice and copied once, in order, into the plan (a node-loss
// sync at 20,000 pods has 11,000 of them before moves are paired).
func Diff(desired State, cur Current) Plan {
	var p Plan
	// Every desired row not yet in NB is an insert: at least this many (a bulk
	// plan's 60,000 at 20,000 pods); the slice then holds the whole plan.
	newRows := max(0, len(desired.Policies)-len(cur.Rows.Policies)) + max(0, len(desired.NATs)-len(cur.Rows.NATs)) +
		max(0, len(desired.AddressSets)-len(cur.Rows.AddressSets))
	// Otherwise at most one change per desired row and one per current row: when
	// that bound is small (an incremental sync compares only the rows of what
	// changed) it is the capacity, so the slice of 300-byte Changes never grows.
	size := newRows + min(newRows, 64)
	if bound := desired.Len() + cur.Rows.Len(); bound <= maxPresized {
		size = max(size, bound)
	}
	all := make([]Change, 0, size)

	for k, want := range desired.AddressSets {
		have, ok := cur.Rows.AddressSets[k]
		switch {
		case !ok && cur.ForeignAddressSets[want.Name]:
			p.Skipped = append(p.Skipped, k)
		case !ok:
			all = append(all, Change{Op: Insert, Table: nbdb.AddressSetTable, Key: k, Row: want})
		case !addressSetEqual(want, have):
			all = append(all, Change{Op: Update, Table: nbdb.AddressSetTable, Key: k, UUID: have.UUID, Row: want, Old: have})
		}
	}
	for k, want := range desired.Policies {
		have, ok := cur.Rows.Policies[k]
		router, hasRouter := cur.Routers[k.Router]
		switch {
		case !ok && !hasRouter:
			p.Skipped = append(p.Skipped, k)
		case !ok:
			all = append(all, Change{Op: Insert, Table: nbdb.LogicalRouterPolicyTable, Key: k, RouterUUID: router, Row: want})
		case !PolicyEqual(want, have):
			all = append(all, Change{Op: Update, Table: nbdb.LogicalRouterPolicyTable, Key: k, UUID: have.UUID, Row: want, Old: have})
		}
	}
	natInserts := 0
	for k, want := range desired.NATs {
		have, ok := cur.Rows.NATs[k]
		router, hasRouter := cur.Routers[k.Router]
		switch {
		case !ok && !hasRouter:
			p.Skipped = append(p.Skipped, k)
		case !ok:
			all = append(all, Change{Op: Insert, Table: nbdb.NATTable, Key: k, RouterUUID: router, Row: want})
			natInserts++
		case !NATEqual(want, have):
			all = append(all, Change{Op: Update, Table: nbdb.NATTable, Key: k, UUID: have.UUID, Row: want, Old: have})
		}
	}

	for k, have := range cur.Rows.AddressSets {
		if _, ok := desired.AddressSets[k]; !ok {
			all = append(all, Change{Op: Delete, Table: nbdb.AddressSetTable, Key: k, UUID: have.UUID})
		}
	}
	for k, have := range cur.Rows.Policies {
		if _, ok := desired.Policies[k]; !ok {
			all = append(all, Change{Op: Delete, Table: nbdb.LogicalRouterPolicyTable, Key: k, UUID: have.UUID, RouterUUID: cur.Routers[k.Router]})
		}
	}
	natDeletes := len(all)
	for k, have := range cur.Rows.NATs {
		if _, ok := desired.NATs[k]; !ok {
			all = append(all, Change{Op: Delete, Table: nbdb.NATTable, Key: k, UUID: have.UUID, RouterUUID: cur.Routers[k.Router], Old: have})
		}
	}
	var dropped []bool
	if natInserts > 0 && len(all) > natDeletes {
		dropped = moveNATs(all, natDeletes)
	}
	p.Changes = sortedChanges(all, dropped, cur.Stale)
	sort.Slice(p.Skipped, func(i, j int) bool { return p.Skipped[i].String() < p.Skipped[j].String() })
	return p
}

// moveNATs turns a NAT delete and a NAT insert that differ only in their gateway
// router (the egress IP of one pod's SNAT moved to another node) into one Update
// that moves the row, and so rewrites in place a row of an earlier version that
// differs from the desired one only in its k8s.ovn.org/node external_id. The NAT
// deletes are all[from:]; the insert becomes the Update and the delete is marked
// in the returned slice (nil when nothing moved).
func moveNATs(all []Change, from int) []bool {
	type natID struct {
		ids IDs
		ip  string
	}
	gone := make(map[natID]int, len(all)-from)
	for i := from; i < len(all); i++ {
		c := all[i]
		if c.Table != nbdb.NATTable || c.Key.IDs.Rule != RuleSNAT || c.Old == nil {
			continue
		}
		ids := c.Key.IDs
		ids.Node = ""
		gone[natID{ids, c.Old.(*nbdb.NAT).LogicalIP}] = i
	}
	if len(gone) == 0 {
		return nil
	}
	var dropped []bool
	for i := range all[:from] {
		c := &all[i]
		if c.Op != Insert || c.Table != nbdb.NATTable || c.Key.IDs.Rule != RuleSNAT {
			continue
		}
		ids := c.Key.IDs
		ids.Node = ""
		id := natID{ids, c.Row.(*nbdb.NAT).LogicalIP}
		j, ok := gone[id]
		if !ok {
			continue
		}
		delete(gone, id)
		if dropped == nil {
			dropped = make([]bool, len(all))
		}
		dropped[j] = true
		d := &all[j]
		oldKey := d.Key
		*c = Change{Op: Update, Table: nbdb.NATTable, Key: c.Key, UUID: d.UUID, Row: c.Row, Old: d.Old,
			RouterUUID: c.RouterUUID, OldRouterUUID: d.RouterUUID, OldKey: &oldKey}
	}
	return dropped
}

// maxPresized bounds the Changes Diff allocates before it knows how many it has
// (about 15 MB).
const maxPresized = 50000

// tableOrder is the order of tables within each group of changes.
var tableOrder = map[string]int{nbdb.AddressSetTable: 0, nbdb.LogicalRouterPolicyTable: 1, nbdb.NATTable: 2}

// sortedChanges returns the changes of all not dropped, make-before-break
// (inserts, updates, deletes), each group by table, then Key, UUID and router;
// then the stale rows' deletes in the same order. One allocation of the result.
func sortedChanges(all []Change, dropped []bool, stale []Ref) []Change {
	idx := make([]int, 0, len(all))
	for i := range all {
		if dropped == nil || !dropped[i] {
			idx = append(idx, i)
		}
	}
	keys := make([]string, len(all))
	for _, i := range idx {
		c := &all[i]
		keys[i] = c.Key.String() + "\x00" + c.UUID + "\x00" + c.RouterUUID
	}
	sort.Slice(idx, func(a, b int) bool {
		ca, cb := &all[idx[a]], &all[idx[b]]
		if ca.Op != cb.Op {
			return ca.Op < cb.Op
		}
		if ta, tb := tableOrder[ca.Table], tableOrder[cb.Table]; ta != tb {
			return ta < tb
		}
		return keys[idx[a]] < keys[idx[b]]
	})
	out := make([]Change, 0, len(idx)+len(stale))
	for _, i := range idx {
		out = append(out, all[i])
	}
	gone := make([]Change, 0, len(stale))
	for _, r := range stale {
		gone = append(gone, Change{Op: Delete, Table: r.Table, UUID: r.UUID, RouterUUID: r.RouterUUID})
	}
	if len(gone) > 1 {
		gone = sortedChanges(gone, nil, nil)
	}
	return append(out, gone...)
}

// PolicyEqual reports whether two policy rows are equal in every column we write
// (what Diff compares: a row that is not equal to its desired one is updated).
func PolicyEqual(a, b *nbdb.LogicalRouterPolicy) bool {
	return a.Priority == b.Priority && a.Match == b.Match && a.Action == b.Action &&
		sameSet(a.Nexthops, b.Nexthops) && maps.Equal(a.ExternalIDs, b.ExternalIDs)
}

// NATEqual reports whether two NAT rows are equal in every column we write
// (their gateway router, which references them, is not a column).
func NATEqual(a, b *nbdb.NAT) bool {
	return a.Type == b.Type && a.ExternalIP == b.ExternalIP && a.LogicalIP == b.LogicalIP &&
		maps.Equal(a.ExternalIDs, b.ExternalIDs)
}

func addressSetEqual(a, b *nbdb.AddressSet) bool {
	return a.Name == b.Name && sameSet(a.Addresses, b.Addresses) && maps.Equal(a.ExternalIDs, b.ExternalIDs)
}

// sameSet compares two string lists as sets (OVSDB sets have no order).
func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	if slices.Equal(a, b) {
		return true
	}
	as, bs := slices.Clone(a), slices.Clone(b)
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}
