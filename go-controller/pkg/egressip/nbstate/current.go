package nbstate

import (
	"context"
	"fmt"

	"github.com/ovn-org/libovsdb/cache"

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
	cur := NewCurrent()
	tc := c.Cache()
	if tc == nil {
		return Current{}, fmt.Errorf("no NB cache (not connected)")
	}
	var routers []*nbdb.LogicalRouter
	var policies []*nbdb.LogicalRouterPolicy
	var nats []*nbdb.NAT
	var sets []*nbdb.AddressSet
	if err := rows(tc, nbdb.LogicalRouterTable, func(r *nbdb.LogicalRouter) { routers = append(routers, r) }); err != nil {
		return Current{}, err
	}
	if err := rows(tc, nbdb.LogicalRouterPolicyTable, func(p *nbdb.LogicalRouterPolicy) {
		if Owned(p.ExternalIDs) {
			policies = append(policies, p)
		}
	}); err != nil {
		return Current{}, err
	}
	if err := rows(tc, nbdb.NATTable, func(n *nbdb.NAT) {
		if Owned(n.ExternalIDs) {
			nats = append(nats, n)
		}
	}); err != nil {
		return Current{}, err
	}
	if err := rows(tc, nbdb.AddressSetTable, func(s *nbdb.AddressSet) { sets = append(sets, s) }); err != nil {
		return Current{}, err
	}
	if ctx.Err() != nil {
		return Current{}, ctx.Err()
	}

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
	err := rows(tc, nbdb.LogicalRouterTable, func(r *nbdb.LogicalRouter) {
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

// rows calls f with every row of table, uncopied (read only).
func rows[T any](tc *cache.TableCache, table string, f func(*T)) error {
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
