package nbstate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// servers runs a test body against libovsdb's in-memory server and a real
// ovsdb-server (skipped when not installed).
var servers = []struct {
	name  string
	start func(testing.TB) *nbserver.Server
}{
	{"inmemory", nbserver.StartInMemory},
	{"ovsdb-server", nbserver.Start},
}

// countingClient counts transactions.
type countingClient struct {
	client.Client
	txns int
}

func (c *countingClient) Transact(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	c.txns++
	return c.Client.Transact(ctx, ops...)
}

func transact(t *testing.T, c client.Client, ops []ovsdb.Operation) {
	t.Helper()
	res, err := c.Transact(context.Background(), ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		t.Fatalf("transact: %v", err)
	}
}

func readCurrent(t *testing.T, c CacheReader) Current {
	t.Helper()
	cur, err := ReadCurrent(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return cur
}

// insertRef is the operation that inserts uuid into the column field of router r.
func insertRef(t *testing.T, c client.Client, r *nbdb.LogicalRouter, field any, uuid string) []ovsdb.Operation {
	t.Helper()
	ops, err := c.Where(r).Mutate(r, model.Mutation{Field: field, Mutator: ovsdb.MutateOperationInsert, Value: []string{uuid}})
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func create(t *testing.T, c client.Client, m ...model.Model) []ovsdb.Operation {
	t.Helper()
	ops, err := c.Create(m...)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

// foreignRows is what the harness and other projects own; Apply must never touch it.
const harnessKey = "ovn-egressip-harness"

// setupTopology creates the routers and some foreign rows: a harness no-reroute
// policy, a node SNAT on GR_node-a and an address set.
func setupTopology(t *testing.T, c client.Client) {
	t.Helper()
	harness := map[string]string{harnessKey: "true"}
	pol := &nbdb.LogicalRouterPolicy{UUID: "pol", Priority: 102, Action: "allow", Match: "ip4.src == 10.244.0.0/16 && ip4.dst == 10.244.0.0/16", ExternalIDs: harness}
	nat := &nbdb.NAT{UUID: "nat", Type: "snat", ExternalIP: "172.18.0.21", LogicalIP: "10.244.0.0/16", ExternalIDs: harness}
	ops := create(t, c,
		pol, nat,
		&nbdb.LogicalRouter{UUID: "cr", Name: ClusterRouter, Policies: []string{"pol"}},
		&nbdb.LogicalRouter{UUID: "gra", Name: GatewayRouter("node-a"), Nat: []string{"nat"}},
		&nbdb.LogicalRouter{UUID: "grb", Name: GatewayRouter("node-b")},
		&nbdb.AddressSet{Name: "someone_elses", Addresses: []string{"1.2.3.4"}},
	)
	transact(t, c, ops)
}

// foreign dumps every row not owned by us, with its parent router.
func foreign(t *testing.T, c client.Client) []string {
	t.Helper()
	ctx := context.Background()
	var routers []nbdb.LogicalRouter
	var pols []nbdb.LogicalRouterPolicy
	var nats []nbdb.NAT
	var sets []nbdb.AddressSet
	for _, l := range []any{&routers, &pols, &nats, &sets} {
		if err := c.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	parent := map[string]string{}
	for _, r := range routers {
		for _, u := range append(slices.Clone(r.Policies), r.Nat...) {
			parent[u] = r.Name
		}
	}
	var out []string
	for _, p := range pols {
		if !Owned(p.ExternalIDs) {
			out = append(out, parent[p.UUID]+" policy "+p.Match)
		}
	}
	for _, n := range nats {
		if !Owned(n.ExternalIDs) {
			out = append(out, parent[n.UUID]+" nat "+n.ExternalIP+" "+n.LogicalIP)
		}
	}
	for _, s := range sets {
		if !Owned(s.ExternalIDs) {
			out = append(out, "set "+s.Name)
		}
	}
	slices.Sort(out)
	return out
}

// ours reads back what NB holds of ours, as Dump lines.
func ours(t *testing.T, c client.Client) []string {
	t.Helper()
	cur, err := ReadCurrent(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(cur.Stale) > 0 {
		t.Errorf("stale rows in NB: %v", cur.Stale)
	}
	return Dump(cur.Rows)
}

func TestApply(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			s := srv.start(t)
			raw := s.Client(t)
			c := &countingClient{Client: raw}
			setupTopology(t, raw)
			before := foreign(t, raw)
			ctx := context.Background()

			apply := func(desired State, wantTxns int) Plan {
				t.Helper()
				c.txns = 0
				plan, err := Apply(ctx, c, desired)
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if c.txns != wantTxns {
					t.Errorf("Apply made %d transactions, want %d", c.txns, wantTxns)
				}
				if got, want := ours(t, raw), Dump(desired); !slices.Equal(got, want) {
					t.Errorf("NB rows:\n got:\n  %s\n want:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
				}
				if got := foreign(t, raw); !slices.Equal(got, before) {
					t.Errorf("foreign rows changed:\n got  %v\n want %v", got, before)
				}
				return plan
			}

			onA := sampleDesired("node-a")
			apply(onA, 1)
			apply(onA, 0) // nothing changed: no transaction at all
			reroute := func() string {
				cur := readCurrent(t, raw)
				for k, p := range cur.Rows.Policies {
					if k.IDs.Rule == RuleReroute {
						return p.UUID
					}
				}
				return ""
			}
			snat := func() (router, uuid string) {
				cur := readCurrent(t, raw)
				for k, n := range cur.Rows.NATs {
					return k.Router, n.UUID
				}
				return "", ""
			}
			uuidBefore := reroute()
			_, natBefore := snat()
			plan := apply(sampleDesired("node-b"), 1)
			if i, u, d := plan.Counts(); i != 0 || u != 2 || d != 0 {
				t.Errorf("move: %d inserts, %d updates, %d deletes; want 0, 2 (next hops, SNAT moved), 0", i, u, d)
			}
			if after := reroute(); after != uuidBefore {
				t.Errorf("reroute policy was replaced (%s -> %s), want an in-place next hop switch", uuidBefore, after)
			}
			if router, after := snat(); router != GatewayRouter("node-b") || after != natBefore {
				t.Errorf("SNAT after the move: %s on %s; want the same row %s, on GR_node-b only", after, router, natBefore)
			}
			if cur := readCurrent(t, raw); len(cur.Rows.NATs) != 1 {
				t.Errorf("SNAT rows after the move: %d, want 1 (referenced by GR_node-b only)", len(cur.Rows.NATs))
			}
			apply(NewState(), 1)
		})
	}
}

// TestApplyRemovesStale checks that duplicates of our rows and rows with our owner
// key but unreadable ids are removed, while an identical row of someone else stays.
func TestApplyRemovesStale(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			s := srv.start(t)
			c := s.Client(t)
			setupTopology(t, c)
			ctx := context.Background()
			desired := sampleDesired("node-a")
			if _, err := Apply(ctx, c, desired); err != nil {
				t.Fatal(err)
			}
			// Add a duplicate of our reroute policy and a NAT with a broken identity.
			dup := duplicateReroute(desired)
			broken := &nbdb.NAT{UUID: "broken", Type: "snat", ExternalIP: "172.18.0.99", LogicalIP: "10.244.1.9",
				ExternalIDs: map[string]string{OwnerControllerKey: OwnerController}}
			ops := create(t, c, dup, broken)
			cr := &nbdb.LogicalRouter{UUID: lookupRouter(t, c, ClusterRouter)}
			m := insertRef(t, c, cr, &cr.Policies, "dup")
			gra := &nbdb.LogicalRouter{UUID: lookupRouter(t, c, GatewayRouter("node-a"))}
			m2 := insertRef(t, c, gra, &gra.Nat, "broken")
			transact(t, c, append(append(ops, m...), m2...))

			cur := readCurrent(t, c)
			if len(cur.Stale) != 2 {
				t.Fatalf("stale = %v, want the duplicate and the broken NAT", cur.Stale)
			}
			before := foreign(t, c)
			plan, err := Apply(ctx, c, desired)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, d := plan.Counts(); d != 2 {
				t.Errorf("deleted %d rows, want 2", d)
			}
			if got, want := ours(t, c), Dump(desired); !slices.Equal(got, want) {
				t.Errorf("NB rows:\n got:\n  %s\n want:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			if got := foreign(t, c); !slices.Equal(got, before) {
				t.Errorf("foreign rows changed:\n got  %v\n want %v", got, before)
			}
		})
	}
}

// duplicateReroute is a copy of a reroute policy of desired with UUID "dup": a stale duplicate of our row.
func duplicateReroute(desired State) *nbdb.LogicalRouterPolicy {
	var dup *nbdb.LogicalRouterPolicy
	for k, p := range desired.Policies {
		if k.IDs.Rule == RuleReroute {
			cp := *p
			cp.UUID = "dup"
			dup = &cp
		}
	}
	return dup
}

func lookupRouter(t *testing.T, c client.Client, name string) string {
	t.Helper()
	var lrs []nbdb.LogicalRouter
	if err := c.WhereCache(func(r *nbdb.LogicalRouter) bool { return r.Name == name }).List(context.Background(), &lrs); err != nil || len(lrs) != 1 {
		t.Fatalf("router %s: %v (%d found)", name, err, len(lrs))
	}
	return lrs[0].UUID
}

// TestApplyMoveUpdatesOnlyWhatChanges: moving an EgressIP that serves several
// pods updates each reroute by UUID with its next hops only, moves each SNAT row by
// the two routers' references alone (no column of the row changes), leaves a foreign
// policy carrying look-alike external_ids (but no owner key) alone, and ends with
// exactly the desired rows.
func TestApplyMoveUpdatesOnlyWhatChanges(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			s := srv.start(t)
			c := s.Client(t)
			setupTopology(t, c)
			ctx := context.Background()
			three := func(node string) State {
				return Desired(Input{
					Mode: gwmode.Shared, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"), Nodes: testNodes(),
					EgressIPs: []EgressIP{{Name: "eip1", Assigned: []Assignment{assigned(node, "172.18.0.33")},
						Pods: []Pod{pod("ns1", "p1", "10.244.1.5"), pod("ns1", "p2", "10.244.1.6"), pod("ns1", "p3", "10.244.1.7")}}},
				})
			}
			lookalike := &nbdb.LogicalRouterPolicy{UUID: "look", Priority: 100, Action: "reroute", Match: "ip4.src == 10.244.9.9",
				Nexthops: []string{"100.64.0.9"}, ExternalIDs: map[string]string{NameKey: "eip1", RuleKey: RuleReroute, FamilyKey: FamilyIPv4, OwnerTypeKey: OwnerEgressIP}}
			ops := create(t, c, lookalike)
			cr := &nbdb.LogicalRouter{UUID: lookupRouter(t, c, ClusterRouter)}
			m := insertRef(t, c, cr, &cr.Policies, "look")
			transact(t, c, append(ops, m...))

			if _, err := Apply(ctx, c, three("node-a")); err != nil {
				t.Fatal(err)
			}
			before := foreign(t, c)
			cur, err := ReadCurrent(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			plan := Diff(three("node-b"), cur)
			ops, err = Ops(plan)
			if err != nil {
				t.Fatal(err)
			}
			var updates, mutates []string
			for _, op := range ops {
				if op.Op == ovsdb.OperationMutate {
					for _, mu := range op.Mutations {
						mutates = append(mutates, fmt.Sprintf("%s %s %s %d", op.Table, mu.Column, mu.Mutator, len(mu.Value.(ovsdb.OvsSet).GoSet)))
					}
				}
				if op.Op != ovsdb.OperationUpdate {
					continue
				}
				if len(op.Where) != 1 || op.Where[0].Column != "_uuid" {
					t.Errorf("update of %s selects by %v, want by _uuid", op.Table, op.Where)
				}
				updates = append(updates, op.Table+" "+strings.Join(slices.Sorted(maps.Keys(op.Row)), ","))
			}
			slices.Sort(updates)
			want := []string{"Logical_Router_Policy nexthops", "Logical_Router_Policy nexthops", "Logical_Router_Policy nexthops"}
			if !slices.Equal(updates, want) {
				t.Errorf("updates (table columns):\n got  %v\n want %v", updates, want)
			}
			// The three SNAT rows: referenced by GR_node-b, then dropped by GR_node-a.
			if want := []string{"Logical_Router nat insert 3", "Logical_Router nat delete 3"}; !slices.Equal(mutates, want) {
				t.Errorf("mutations (table column mutator count):\n got  %v\n want %v", mutates, want)
			}
			transact(t, c, ops)
			if got, want := ours(t, c), Dump(three("node-b")); !slices.Equal(got, want) {
				t.Errorf("NB rows:\n got:\n  %s\n want:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
			}
			if got := foreign(t, c); !slices.Equal(got, before) {
				t.Errorf("foreign rows changed:\n got  %v\n want %v", got, before)
			}
			var look []nbdb.LogicalRouterPolicy
			if err := c.WhereCache(func(p *nbdb.LogicalRouterPolicy) bool { return p.UUID != "" && p.Match == "ip4.src == 10.244.9.9" }).List(ctx, &look); err != nil {
				t.Fatal(err)
			}
			if len(look) != 1 || !slices.Equal(look[0].Nexthops, []string{"100.64.0.9"}) {
				t.Errorf("look-alike foreign policy changed: %+v", look)
			}
		})
	}
}

// querier runs selects through a client's Transact.
type querier struct{ c client.Client }

func (q querier) Query(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	return q.c.Transact(ctx, ops...)
}

// TestReadCurrentLive: reading router references and address set addresses with
// a select gives the same Current as reading them from a cache that holds them,
// including a stale duplicate, a set of one address (a bare value on the wire) and
// an empty one.
func TestReadCurrentLive(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			s := srv.start(t)
			c := s.Client(t)
			setupTopology(t, c)
			ctx := context.Background()
			desired := sampleDesired("node-a")
			for k, set := range desired.AddressSets {
				cp := *set
				if k.IDs.Rule == RuleServedPods {
					cp.Addresses = cp.Addresses[:1]
				} else {
					cp.Addresses = nil
				}
				desired.AddressSets[k] = &cp
			}
			if _, err := Apply(ctx, c, desired); err != nil {
				t.Fatal(err)
			}
			dup := duplicateReroute(desired)
			routers, err := ReadRouters(c)
			if err != nil {
				t.Fatal(err)
			}
			cr := &nbdb.LogicalRouter{UUID: routers[ClusterRouter]}
			ops := create(t, c, dup)
			mut, err := c.Where(cr).Mutate(cr, model.Mutation{Field: &cr.Policies, Mutator: ovsdb.MutateOperationInsert, Value: []string{"dup"}})
			if err != nil {
				t.Fatal(err)
			}
			transact(t, c, append(ops, mut...))

			want, err := ReadCurrent(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			got, err := ReadCurrentLive(ctx, c, querier{c})
			if err != nil {
				t.Fatal(err)
			}
			if len(want.Stale) != 1 || len(got.Stale) != 1 || got.Stale[0] != want.Stale[0] {
				t.Errorf("stale: live %v, cached %v; want the same one duplicate", got.Stale, want.Stale)
			}
			if g, w := Dump(got.Rows), Dump(want.Rows); !slices.Equal(g, w) {
				t.Errorf("rows:\n live   %v\n cached %v", g, w)
			}
			if !maps.Equal(got.Routers, want.Routers) || !maps.Equal(got.ForeignAddressSets, want.ForeignAddressSets) {
				t.Errorf("routers %v / %v, foreign sets %v / %v", got.Routers, want.Routers, got.ForeignAddressSets, want.ForeignAddressSets)
			}
		})
	}
}

// TestApplyRewritesLegacySNATInPlace: SNAT rows written by an earlier version carry
// k8s.ovn.org/node; the desired rows no longer do. The rows are rewritten in place
// (same UUID, same router, one update of external_ids each), not deleted and
// created again, so an upgrade does not flap the SNATs.
func TestApplyRewritesLegacySNATInPlace(t *testing.T) {
	s := nbserver.Start(t)
	c := s.Client(t)
	setupTopology(t, c)
	ctx := context.Background()
	want := Desired(Input{
		Mode: gwmode.Shared, ClusterSubnets: prefixes("10.244.0.0/16"), JoinSubnets: prefixes("100.64.0.0/16"), Nodes: testNodes(),
		EgressIPs: []EgressIP{{Name: "eip1", Assigned: []Assignment{assigned("node-a", "172.18.0.33")},
			Pods: []Pod{pod("ns1", "p1", "10.244.1.5"), pod("ns1", "p2", "10.244.1.6")}}},
	})
	if _, err := Apply(ctx, c, want); err != nil {
		t.Fatal(err)
	}
	// What the earlier version wrote: the same rows with the node key.
	cur, err := ReadCurrent(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var legacy []ovsdb.Operation
	uuids := map[string]bool{}
	for _, n := range cur.Rows.NATs {
		ids := maps.Clone(n.ExternalIDs)
		ids[NodeKey] = "node-a"
		legacy = append(legacy, updateOp(nbdb.NATTable, whereUUID(n.UUID), ovsdb.Row{"external_ids": stringMap(ids)}))
		uuids[n.UUID] = true
	}
	if len(legacy) != 2 {
		t.Fatalf("%d SNAT rows, want 2", len(legacy))
	}
	transact(t, c, legacy)

	cur, err = ReadCurrent(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	plan := Diff(want, cur)
	var got []string
	for _, ch := range plan.Changes {
		got = append(got, ch.Op.String()+" "+ch.Table)
	}
	if want := []string{"update NAT", "update NAT"}; !slices.Equal(got, want) {
		t.Fatalf("plan: got %v, want %v", got, want)
	}
	ops, err := Ops(plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Op != ovsdb.OperationUpdate || !slices.Equal(slices.Sorted(maps.Keys(op.Row)), []string{"external_ids"}) {
			t.Errorf("op %s %s %v: want only updates of external_ids", op.Op, op.Table, slices.Sorted(maps.Keys(op.Row)))
		}
	}
	transact(t, c, ops)
	if got, want := ours(t, c), Dump(want); !slices.Equal(got, want) {
		t.Errorf("NB rows:\n got:\n  %s\n want:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	cur, err = ReadCurrent(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cur.Rows.NATs {
		if !uuids[n.UUID] {
			t.Errorf("SNAT row %s is new; want the legacy rows kept", n.UUID)
		}
	}
}
