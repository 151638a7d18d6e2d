package nbserver

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

func addRouter(t *testing.T, c client.Client, name string) {
	t.Helper()
	Seed(t, c, &nbdb.LogicalRouter{Name: name})
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
	waitfor.True(t, 5*time.Second, 20*time.Millisecond, "routers [r1] after restart", func() (bool, string) {
		got := routers(t, c2)
		return len(got) == 1 && got[0] == "r1", fmt.Sprintf("routers = %v", got)
	})
	s.Stop()
	s.Stop() // idempotent
}

// TestCluster: a 3-member RAFT cluster elects a leader; a leader-only client
// writes, follows a new leader when the old one is killed, and a killed member
// restarted rejoins and holds every row written while it was down.
func TestCluster(t *testing.T) {
	c := StartCluster(t)
	s := c.Server()
	cl := s.Client(t)
	addRouter(t, cl, "r1")

	old := c.Leader()
	old.Kill()
	if old.Running() {
		t.Fatal("killed member still running")
	}
	next := c.Leader()
	if next == old {
		t.Fatalf("member %d still leader after being killed", old.Index)
	}
	deadline := time.Now().Add(15 * time.Second)
	if err := waitfor.Retry(context.Background(), time.Until(deadline), 50*time.Millisecond, func() error {
		ops, err := cl.Create(&nbdb.LogicalRouter{Name: "r2"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := cl.Transact(context.Background(), ops...)
		if err == nil {
			_, err = ovsdb.CheckOperationResults(res, ops)
		}
		return err
	}); err != nil {
		t.Fatalf("no write through the new leader (member %d) after 15 s: %v", next.Index, err)
	}

	old.Start(t)
	c.WaitFormed()
	mc := old.MemberConn(t)
	waitfor.True(t, 15*time.Second, 50*time.Millisecond, fmt.Sprintf("restarted member %d has routers r1 and r2", old.Index), func() (bool, string) {
		got := routers(t, mc)
		// r2 may be there twice: a write retried after the leader died may have committed already.
		return slices.Contains(got, "r1") && slices.Contains(got, "r2"), fmt.Sprintf("routers %v", got)
	})
}
