package nbserver

import (
	"context"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

func addRouter(t *testing.T, c client.Client, name string) {
	t.Helper()
	ops, err := c.Create(&nbdb.LogicalRouter{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Transact(context.Background(), ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		t.Fatalf("insert router %s: %v", name, err)
	}
}

func routers(t *testing.T, c client.Client) []string {
	t.Helper()
	var lrs []nbdb.LogicalRouter
	if err := c.List(context.Background(), &lrs); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range lrs {
		names = append(names, r.Name)
	}
	return names
}

func TestInMemory(t *testing.T) {
	s := StartInMemory(t)
	c := s.Client(t)
	addRouter(t, c, "r1")
	if got := routers(t, c); len(got) != 1 || got[0] != "r1" {
		t.Fatalf("routers = %v, want [r1]", got)
	}
}

func TestRealServerKeepsDataAcrossRestart(t *testing.T) {
	s := Start(t)
	c := s.Client(t)
	addRouter(t, c, "r1")
	s.Restart()
	c2 := s.Client(t)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := routers(t, c2)
		if len(got) == 1 && got[0] == "r1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after restart routers = %v, want [r1]", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	s.Stop() // idempotent
}
