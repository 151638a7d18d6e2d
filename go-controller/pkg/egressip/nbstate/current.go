package nbstate

import (
	"context"
	"fmt"

	"github.com/ovn-org/libovsdb/client"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// ReadCurrent reads, from the libovsdb client's cache, the rows we own and the
// routers (name -> UUID; on duplicate names the lowest UUID). The cache must
// monitor Logical_Router (name, policies, nat), Logical_Router_Policy, NAT and
// Address_Set.
func ReadCurrent(ctx context.Context, c client.API) (Current, error) {
	cur := NewCurrent()

	var routers []nbdb.LogicalRouter
	if err := c.List(ctx, &routers); err != nil {
		return Current{}, fmt.Errorf("list Logical_Router: %w", err)
	}
	var policies []nbdb.LogicalRouterPolicy
	if err := c.WhereCache(func(p *nbdb.LogicalRouterPolicy) bool { return Owned(p.ExternalIDs) }).List(ctx, &policies); err != nil {
		return Current{}, fmt.Errorf("list Logical_Router_Policy: %w", err)
	}
	var nats []nbdb.NAT
	if err := c.WhereCache(func(n *nbdb.NAT) bool { return Owned(n.ExternalIDs) }).List(ctx, &nats); err != nil {
		return Current{}, fmt.Errorf("list NAT: %w", err)
	}
	var sets []nbdb.AddressSet
	if err := c.List(ctx, &sets); err != nil {
		return Current{}, fmt.Errorf("list Address_Set: %w", err)
	}

	policyByUUID := map[string]*nbdb.LogicalRouterPolicy{}
	for i := range policies {
		policyByUUID[policies[i].UUID] = &policies[i]
	}
	natByUUID := map[string]*nbdb.NAT{}
	for i := range nats {
		natByUUID[nats[i].UUID] = &nats[i]
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
	for i := range sets {
		s := &sets[i]
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

// addRouted files a policy or NAT row referenced by router r under its Key, or as
// stale when its IDs do not parse or another row already has the Key (the lowest
// UUID wins).
func addRouted[T any](cur *Current, rows map[Key]*T, table string, r nbdb.LogicalRouter, row *T, uuid string, ext map[string]string) {
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
