package nbserver

import (
	"context"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// TestTransactions counts write transactions, per table, on both kinds of server: a read-only transaction and a
// failed one count for nothing, one transaction touching two tables counts once.
func TestTransactions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(testing.TB) *Server
	}{{"inmemory", StartInMemory}, {"ovsdb-server", Start}} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.start(t)
			c := s.Client(t)
			ctx := context.Background()
			base, baseSwitch := s.Transactions(), s.Transactions("Logical_Switch")
			addRouter(t, c, "r1") // Logical_Router
			ops, err := c.Create(&nbdb.LogicalSwitch{Name: "sw1"}, &nbdb.AddressSet{Name: "as1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Transact(ctx, ops...); err != nil { // Logical_Switch and Address_Set, one transaction
				t.Fatal(err)
			}
			var sets []nbdb.AddressSet
			if err := c.List(ctx, &sets); err != nil { // the cache: no transaction at all
				t.Fatal(err)
			}
			dup, err := c.Create(&nbdb.AddressSet{Name: "as1"}) // violates the name index: fails, nothing committed
			if err != nil {
				t.Fatal(err)
			}
			if res, err := c.Transact(ctx, dup...); err == nil && res[len(res)-1].Error == "" && res[0].Error == "" {
				t.Fatalf("duplicate address set name accepted: %+v", res)
			}
			if n := s.Transactions() - base; n != 2 {
				t.Errorf("%d write transactions, want 2", n)
			}
			if n := s.Transactions("Logical_Switch") - baseSwitch; n != 1 {
				t.Errorf("%d transactions touching Logical_Switch, want 1", n)
			}
			if n := s.Transactions("ACL", "NAT"); n != 0 {
				t.Errorf("%d transactions touching ACL or NAT, want 0", n)
			}
		})
	}
}
