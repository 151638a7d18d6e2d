package master

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// raftWant is what NB must hold, derived from the documented semantics and not
// from the master's code: every running pod of prod with app=web gets a reroute
// to the join IPs of the nodes in the EgressIP's status, and one SNAT per status
// item on that node's gateway router.
func raftWant(t *testing.T, e *env, pods map[string]string) (map[string]string, []string) {
	t.Helper()
	items, err := e.status("eip-prod")
	if err != nil {
		t.Fatal(err)
	}
	var nexthops []string
	var snats []string
	for _, it := range items {
		ip, node, _ := strings.Cut(it, "@")
		var i int
		if _, err := fmt.Sscanf(node, "node%d", &i); err != nil {
			t.Fatalf("status item %q: %v", it, err)
		}
		nexthops = append(nexthops, fmt.Sprintf("100.64.0.%d", i+1))
		for _, podIP := range pods {
			snats = append(snats, sn(node, ip, podIP, "eip-prod"))
		}
	}
	reroutes := map[string]string{}
	for name, podIP := range pods {
		reroutes["prod/"+name] = rr("eip-prod", podIP, nexthops...)
	}
	return reroutes, snats
}

// raftConverged waits until NB (read through the leader) holds exactly want, with
// no duplicate or unparsable row of ours, and every other row of ours (no-reroute
// policies, address sets) as in base.
func raftConverged(t *testing.T, e *env, what string, pods map[string]string, ips []string, others int) []string {
	t.Helper()
	e.eventually(what+": status", func() error {
		items, err := e.status("eip-prod")
		if err != nil {
			return err
		}
		nodes := map[string]bool{}
		var got []string
		for _, it := range items {
			ip, node, _ := strings.Cut(it, "@")
			if node != "node1" && node != "node2" || nodes[node] {
				return fmt.Errorf("status %v: want each IP on its own assignable node (node1, node2)", items)
			}
			nodes[node] = true
			got = append(got, ip)
		}
		slices.Sort(got)
		if !slices.Equal(got, ips) {
			return fmt.Errorf("status %v: want the IPs %v", items, ips)
		}
		return nil
	})
	reroutes, snats := raftWant(t, e, pods)
	e.expectRows(what, reroutes, snats)
	rows := e.ours()
	if want := len(reroutes) + len(snats) + others; others >= 0 && len(rows) != want {
		t.Errorf("%s: %d rows of ours in NB, want %d:\n%s", what, len(rows), want, strings.Join(rows, "\n"))
	}
	var podIPs []string
	for _, ip := range pods {
		podIPs = append(podIPs, ip)
	}
	slices.Sort(podIPs)
	served := fmt.Sprintf("address-set %s [%s]", nbstate.ServedPodsAddressSet(nbstate.Families([]netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")})[0]), strings.Join(podIPs, " "))
	if !slices.ContainsFunc(rows, func(r string) bool { return strings.HasPrefix(r, served+" ") }) {
		t.Errorf("%s: no %q among\n%s", what, served, strings.Join(rows, "\n"))
	}
	return rows
}

// memberRows is the rows of ours in one member's own copy of the database.
func memberRows(t *testing.T, m *nbserver.Member) []string {
	t.Helper()
	cur, err := nbstate.ReadCurrent(context.Background(), m.MemberConn(t))
	if err != nil {
		t.Fatal(err)
	}
	return nbstate.Dump(cur.Rows)
}

// TestRaftLeaderKilledDuringBurst: with NB as a 3-member RAFT cluster, the RAFT
// leader is killed (SIGKILL) in the middle of a burst of pod and EgressIP changes.
// The master follows the new leader and converges: status and NB rows are what
// the final objects call for, with no row missing, stale or duplicated; the
// killed member, restarted, rejoins and holds the same rows.
func TestRaftLeaderKilledDuringBurst(t *testing.T) {
	raftBurst(t, func(t *testing.T, old *nbserver.Member) { old.Kill() }, true)
}

// TestRaftLeadershipTransferDuringBurst: the leader hands leadership over (as
// ovsdb-server can do by itself, e.g. around log compaction) in the middle of a burst:
// the master moves to the new leader and converges with no row missing or stale.
func TestRaftLeadershipTransferDuringBurst(t *testing.T) {
	raftBurst(t, func(t *testing.T, old *nbserver.Member) {
		if err := old.TransferLeadership(); err != nil {
			t.Fatal(err)
		}
	}, false)
}

func raftBurst(t *testing.T, fault func(*testing.T, *nbserver.Member), restart bool) {
	t.Helper()
	e := newEnv(t, nbserver.StartClusterServer, gwmode.Shared)
	c := e.nb.Cluster()
	e.create(node(1, true))
	e.create(node(2, true))
	e.create(node(3, false))
	e.create(namespace("prod", prodNS))
	pods := map[string]string{"web0": "10.244.1.5"}
	e.create(pod("prod", "web0", pods["web0"], web))
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44"}, prodNS, web))
	e.start()
	base := raftConverged(t, e, "before the burst", pods, []string{"172.18.0.33", "172.18.0.44"}, -1)
	others := len(base) - 1 - 2 // one reroute and two SNATs for web0

	old := c.Leader()
	errsBefore := e.metric(metricSyncErrorsTotal)
	for i := 1; i <= 60; i++ {
		name := fmt.Sprintf("web%d", i)
		pods[name] = fmt.Sprintf("10.244.%d.%d", 1+i%3, 10+i)
		e.create(pod("prod", name, pods[name], web))
		if i%3 == 0 {
			gone := fmt.Sprintf("web%d", i-2)
			e.deletePod("prod", gone)
			delete(pods, gone)
		}
		switch i {
		case 20:
			fault(t, old) // mid-burst, while syncs are in flight
		case 40:
			e.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) { o.Spec.EgressIPs = []string{"172.18.0.33", "172.18.0.55"} })
		}
		//nolint:forbidigo // the pace of the burst (about 300 ms in all) is the load under test: syncs in flight when the leader fails
		time.Sleep(5 * time.Millisecond)
	}
	if l := c.Leader(); l == old {
		t.Fatalf("member %d is still leader", old.Index)
	}
	rows := raftConverged(t, e, "after the leader was killed", pods, []string{"172.18.0.33", "172.18.0.55"}, others)
	t.Logf("sync errors while the leader changed: %v", e.metric(metricSyncErrorsTotal)-errsBefore)

	if restart {
		old.Start(t)
	}
	c.WaitFormed()
	for _, m := range c.Members {
		e.eventually(fmt.Sprintf("member %d's copy", m.Index), func() error {
			if got := memberRows(t, m); !slices.Equal(got, rows) {
				return fmt.Errorf("member %d holds\n%s\nwant\n%s", m.Index, strings.Join(got, "\n"), strings.Join(rows, "\n"))
			}
			return nil
		})
	}
}
