package nbstate

import (
	"context"
	"fmt"

	"github.com/ovn-org/libovsdb/cache"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// CacheReader is a libovsdb client's cache (client.Client has it).
type CacheReader interface {
	Cache() *cache.TableCache
}

// ReadCurrent reads, from the libovsdb client's cache, the rows we own and the
// routers (name -> UUID; on duplicate names the lowest UUID). The cache must
// monitor Logical_Router (name, policies, nat), Logical_Router_Policy, NAT and
// Address_Set. Rows are read without copying (cache objects are replaced, never
// changed, on update): the rows in Current are READ ONLY.
func ReadCurrent(ctx context.Context, c CacheReader) (Current, error) {
	tc := c.Cache()
	if tc == nil {
		return Current{}, fmt.Errorf("no NB cache (not connected)")
	}
	var routers []*nbdb.LogicalRouter
	var sets []*nbdb.AddressSet
	if err := EachRow(tc, nbdb.LogicalRouterTable, func(r *nbdb.LogicalRouter) { routers = append(routers, r) }); err != nil {
		return Current{}, err
	}
	if err := EachRow(tc, nbdb.AddressSetTable, func(s *nbdb.AddressSet) { sets = append(sets, s) }); err != nil {
		return Current{}, err
	}
	var policies []*nbdb.LogicalRouterPolicy
	var nats []*nbdb.NAT
	if err := EachRow(tc, nbdb.LogicalRouterPolicyTable, func(p *nbdb.LogicalRouterPolicy) {
		if Owned(p.ExternalIDs) {
			policies = append(policies, p)
		}
	}); err != nil {
		return Current{}, err
	}
	if err := EachRow(tc, nbdb.NATTable, func(n *nbdb.NAT) {
		if Owned(n.ExternalIDs) {
			nats = append(nats, n)
		}
	}); err != nil {
		return Current{}, err
	}
	if ctx.Err() != nil {
		return Current{}, ctx.Err()
	}
	return assemble(routers, policies, nats, sets)
}

// Querier runs read-only operations (select) on NB.
type Querier interface {
	Query(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error)
}

// ReadCurrentLive is ReadCurrent for a client whose cache holds, of NB, only
// address sets' names and external_ids (and what else it likes): the rows we own
// and the routers' references are read with one transaction of selects instead.
// This lets the master keep no cache of its own rows (the Mirror indexes them)
// nor of the large set columns (a router's policies and nat, a served-pods set's
// addresses), whose every change would cost a cache a pass over the whole set.
func ReadCurrentLive(ctx context.Context, c CacheReader, q Querier) (Current, error) {
	tc := c.Cache()
	if tc == nil {
		return Current{}, fmt.Errorf("no NB cache (not connected)")
	}
	owner := []ovsdb.Condition{ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes,
		ovsdb.OvsMap{GoMap: map[any]any{OwnerControllerKey: OwnerController}})}
	sel := func(table string, where []ovsdb.Condition, columns ...string) ovsdb.Operation {
		if where == nil {
			where = []ovsdb.Condition{}
		}
		return ovsdb.Operation{Op: ovsdb.OperationSelect, Table: table, Where: where, Columns: columns}
	}
	ops := []ovsdb.Operation{
		sel(nbdb.LogicalRouterTable, nil, "_uuid", "name", "policies", "nat"),
		sel(nbdb.LogicalRouterPolicyTable, owner, "_uuid", "priority", "match", "action", "nexthops", "external_ids"),
		sel(nbdb.NATTable, owner, "_uuid", "type", "external_ip", "logical_ip", "external_ids"),
		sel(nbdb.AddressSetTable, owner, "_uuid", "name", "addresses", "external_ids"),
	}
	res, err := q.Query(ctx, ops...)
	if err == nil && len(res) < len(ops) {
		err = fmt.Errorf("%d results for %d selects", len(res), len(ops))
	}
	if err == nil {
		for _, r := range res[:len(ops)] {
			if r.Error != "" {
				err = fmt.Errorf("%s: %s", r.Error, r.Details)
			}
		}
	}
	if err != nil {
		return Current{}, fmt.Errorf("select the rows we own: %w", err)
	}
	var routers []*nbdb.LogicalRouter
	for _, row := range res[0].Rows {
		routers = append(routers, &nbdb.LogicalRouter{UUID: uuidOfCell(row["_uuid"]), Name: stringOf(row["name"]),
			Policies: uuidSet(row["policies"]), Nat: uuidSet(row["nat"])})
	}
	var policies []*nbdb.LogicalRouterPolicy
	for _, row := range res[1].Rows {
		policies = append(policies, &nbdb.LogicalRouterPolicy{UUID: uuidOfCell(row["_uuid"]), Priority: intOf(row["priority"]),
			Match: stringOf(row["match"]), Action: stringOf(row["action"]), Nexthops: stringSetOf(row["nexthops"]),
			ExternalIDs: stringMapOf(row["external_ids"])})
	}
	var nats []*nbdb.NAT
	for _, row := range res[2].Rows {
		nats = append(nats, &nbdb.NAT{UUID: uuidOfCell(row["_uuid"]), Type: stringOf(row["type"]),
			ExternalIP: stringOf(row["external_ip"]), LogicalIP: stringOf(row["logical_ip"]),
			ExternalIDs: stringMapOf(row["external_ids"])})
	}
	var sets []*nbdb.AddressSet
	for _, row := range res[3].Rows {
		sets = append(sets, &nbdb.AddressSet{UUID: uuidOfCell(row["_uuid"]), Name: stringOf(row["name"]),
			Addresses: stringSetOf(row["addresses"]), ExternalIDs: stringMapOf(row["external_ids"])})
	}
	if err := EachRow(tc, nbdb.AddressSetTable, func(s *nbdb.AddressSet) {
		if !Owned(s.ExternalIDs) {
			sets = append(sets, s) // a foreign set: only its name is read
		}
	}); err != nil {
		return Current{}, err
	}
	if ctx.Err() != nil {
		return Current{}, ctx.Err()
	}
	return assemble(routers, policies, nats, sets)
}

// assemble files the policies and NAT rows we own under the routers that
// reference them, and the address sets (see ReadCurrent).
func assemble(routers []*nbdb.LogicalRouter, policies []*nbdb.LogicalRouterPolicy, nats []*nbdb.NAT, sets []*nbdb.AddressSet) (Current, error) {
	cur := NewCurrent()
	policyByUUID := make(map[string]*nbdb.LogicalRouterPolicy, len(policies))
	for _, p := range policies {
		policyByUUID[p.UUID] = p
	}
	natByUUID := make(map[string]*nbdb.NAT, len(nats))
	for _, n := range nats {
		natByUUID[n.UUID] = n
	}
	for _, r := range routers {
		if old, ok := cur.Routers[r.Name]; !ok || r.UUID < old {
			cur.Routers[r.Name] = r.UUID
		}
	}
	for _, r := range routers {
		if cur.Routers[r.Name] != r.UUID {
			// A second router with the same name: we never use it, and rows of ours
			// hanging on it are stale.
			for _, u := range r.Policies {
				if _, ok := policyByUUID[u]; ok {
					cur.Stale = append(cur.Stale, Ref{Table: nbdb.LogicalRouterPolicyTable, UUID: u, RouterUUID: r.UUID})
				}
			}
			for _, u := range r.Nat {
				if _, ok := natByUUID[u]; ok {
					cur.Stale = append(cur.Stale, Ref{Table: nbdb.NATTable, UUID: u, RouterUUID: r.UUID})
				}
			}
			continue
		}
		for _, u := range r.Policies {
			if p, ok := policyByUUID[u]; ok {
				addRouted(&cur, cur.Rows.Policies, nbdb.LogicalRouterPolicyTable, r, p, p.UUID, p.ExternalIDs)
			}
		}
		for _, u := range r.Nat {
			if n, ok := natByUUID[u]; ok {
				addRouted(&cur, cur.Rows.NATs, nbdb.NATTable, r, n, n.UUID, n.ExternalIDs)
			}
		}
	}
	for _, s := range sets {
		if !Owned(s.ExternalIDs) {
			cur.ForeignAddressSets[s.Name] = true
			continue
		}
		ids, ok := ParseIDs(s.ExternalIDs)
		k := Key{IDs: ids}
		old, dup := cur.Rows.AddressSets[k]
		switch {
		case !ok:
			cur.Stale = append(cur.Stale, Ref{Table: nbdb.AddressSetTable, UUID: s.UUID})
		case dup && old.UUID < s.UUID:
			cur.Stale = append(cur.Stale, Ref{Table: nbdb.AddressSetTable, UUID: s.UUID})
		case dup:
			cur.Stale = append(cur.Stale, Ref{Table: nbdb.AddressSetTable, UUID: old.UUID})
			cur.Rows.AddressSets[k] = s
		default:
			cur.Rows.AddressSets[k] = s
		}
	}
	return cur, nil
}

// ReadRouters returns every logical router's name and UUID from the libovsdb
// client's cache (on duplicate names the lowest UUID, as ReadCurrent).
func ReadRouters(c CacheReader) (map[string]string, error) {
	tc := c.Cache()
	if tc == nil {
		return nil, fmt.Errorf("no NB cache (not connected)")
	}
	out := map[string]string{}
	err := EachRow(tc, nbdb.LogicalRouterTable, func(r *nbdb.LogicalRouter) {
		if old, ok := out[r.Name]; !ok || r.UUID < old {
			out[r.Name] = r.UUID
		}
	})
	return out, err
}

// addRouted files a policy or NAT row referenced by router r under its Key, or as
// stale when its IDs do not parse or another row already has the Key (the lowest
// UUID wins).
func addRouted[T any](cur *Current, rows map[Key]*T, table string, r *nbdb.LogicalRouter, row *T, uuid string, ext map[string]string) {
	ids, ok := ParseIDs(ext)
	if !ok {
		cur.Stale = append(cur.Stale, Ref{Table: table, UUID: uuid, RouterUUID: r.UUID})
		return
	}
	k := Key{Router: r.Name, IDs: ids}
	old, dup := rows[k]
	if !dup {
		rows[k] = row
		return
	}
	oldUUID := uuidOf(old)
	if oldUUID < uuid {
		cur.Stale = append(cur.Stale, Ref{Table: table, UUID: uuid, RouterUUID: r.UUID})
		return
	}
	cur.Stale = append(cur.Stale, Ref{Table: table, UUID: oldUUID, RouterUUID: r.UUID})
	rows[k] = row
}

func uuidOf(row any) string {
	switch r := row.(type) {
	case *nbdb.LogicalRouterPolicy:
		return r.UUID
	case *nbdb.NAT:
		return r.UUID
	case *nbdb.AddressSet:
		return r.UUID
	}
	return ""
}

// Cells of select results (ovsdb.Row values): a set of one element is the bare
// element, a UUID is ovsdb.UUID, a map is ovsdb.OvsMap.
func uuidOfCell(v any) string {
	if u, ok := v.(ovsdb.UUID); ok {
		return u.GoUUID
	}
	return ""
}

func intOf(v any) int {
	switch n := v.(type) {
	case float64:
		return int(n)
	case int:
		return n
	}
	return 0
}

func stringOf(v any) string {
	s, _ := v.(string)
	return s
}

func elements(v any) []any {
	if s, ok := v.(ovsdb.OvsSet); ok {
		return s.GoSet
	}
	if v == nil {
		return nil
	}
	return []any{v}
}

func uuidSet(v any) []string {
	var out []string
	for _, e := range elements(v) {
		if u := uuidOfCell(e); u != "" {
			out = append(out, u)
		}
	}
	return out
}

func stringSetOf(v any) []string {
	out := []string{}
	for _, e := range elements(v) {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func stringMapOf(v any) map[string]string {
	out := map[string]string{}
	if m, ok := v.(ovsdb.OvsMap); ok {
		for k, val := range m.GoMap {
			ks, ok1 := k.(string)
			vs, ok2 := val.(string)
			if ok1 && ok2 {
				out[ks] = vs
			}
		}
	}
	return out
}

// EachRow calls f with every row of table in tc, uncopied (read only); an error when the table is not monitored
// or holds another model.
func EachRow[T any](tc *cache.TableCache, table string, f func(*T)) error {
	rc := tc.Table(table)
	if rc == nil {
		return fmt.Errorf("table %s is not monitored", table)
	}
	for _, m := range rc.RowsShallow() {
		row, ok := m.(*T)
		if !ok {
			return fmt.Errorf("table %s: unexpected model %T", table, m)
		}
		f(row)
	}
	return nil
}
