package nbstate

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// BenchmarkDiffMove is the node-loss sync of the 20,000-pod scale run: 3,600 pods
// whose reroute next hops change and 4,000 SNAT rows that move to another gateway
// router.
func BenchmarkDiffMove(b *testing.B) {
	desired, cur := moveFixture()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := Diff(desired, cur)
		if len(p.Changes) < 3600 {
			b.Fatalf("%d changes", len(p.Changes))
		}
	}
}

// BenchmarkOpsMove turns BenchmarkDiffMove's plan into the operations of its
// transaction and encodes them as libovsdb sends them (JSON).
func BenchmarkOpsMove(b *testing.B) {
	desired, cur := moveFixture()
	p := Diff(desired, cur)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ops, err := Ops(p)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(ops); err != nil {
			b.Fatal(err)
		}
	}
}

// moveFixture is the node loss of BenchmarkDiffMove: what is desired, and what is
// (rows with UUIDs as the server gives them).
func moveFixture() (State, Current) {
	desired, cur := NewState(), NewCurrent()
	cur.Routers[ClusterRouter] = benchUUID(0, 0, 0)
	for n := 0; n < 100; n++ {
		cur.Routers[GatewayRouter(fmt.Sprintf("node%d", n))] = benchUUID(1, n, 0)
	}
	for i := 0; i < 3600; i++ {
		eip, pod := fmt.Sprintf("scale-%03d", i/100), fmt.Sprintf("ns/pod-%d", i)
		ip := fmt.Sprintf("10.128.%d.%d", i/250, i%250+2)
		ids := IDs{OwnerType: OwnerEgressIP, Name: eip, Rule: RuleReroute, Family: FamilyIPv4, Pod: pod}
		k := Key{Router: ClusterRouter, IDs: ids}
		match := "ip4.src == " + ip
		desired.Policies[k] = &nbdb.LogicalRouterPolicy{Priority: ReroutePriority, Match: match, Action: "reroute",
			Nexthops: []string{"100.64.0.2", "100.64.0.9"}, ExternalIDs: ids.ExternalIDs()}
		cur.Rows.Policies[k] = &nbdb.LogicalRouterPolicy{UUID: benchUUID(2, i, 0), Priority: ReroutePriority, Match: match,
			Action: "reroute", Nexthops: []string{"100.64.0.2", "100.64.0.3"}, ExternalIDs: ids.ExternalIDs()}
		if i >= 4000/2 && i < 3600 && i%9 == 0 {
			continue
		}
		for j, eipAddr := range []string{"172.18.64.1", "172.18.64.2"} {
			if j == 1 && i%2 == 0 {
				continue
			}
			ids := IDs{OwnerType: OwnerEgressIP, Name: eip, Rule: RuleSNAT, Family: FamilyIPv4, Pod: pod, EgressIP: eipAddr}
			row := func(uuid string) *nbdb.NAT {
				return &nbdb.NAT{UUID: uuid, Type: "snat", ExternalIP: eipAddr, LogicalIP: ip, ExternalIDs: ids.ExternalIDs()}
			}
			desired.NATs[Key{Router: GatewayRouter(fmt.Sprintf("node%d", (i+j)%100)), IDs: ids}] = row("")
			cur.Rows.NATs[Key{Router: GatewayRouter(fmt.Sprintf("node%d", (i+j+1)%100)), IDs: ids}] = row(benchUUID(3, i, j))
		}
	}
	return desired, cur
}

// BenchmarkMirrorCurrent reads the rows of 3,600 pods out of a 20,000-pod Mirror
// (what a node-loss sync compares with).
func BenchmarkMirrorCurrent(b *testing.B) {
	cur := NewCurrent()
	pods := map[string]bool{}
	for i := 0; i < 20000; i++ {
		eip, pod := fmt.Sprintf("scale-%03d", i/100), fmt.Sprintf("ns/pod-%d", i)
		ids := IDs{OwnerType: OwnerEgressIP, Name: eip, Rule: RuleReroute, Family: FamilyIPv4, Pod: pod}
		cur.Rows.Policies[Key{Router: ClusterRouter, IDs: ids}] = &nbdb.LogicalRouterPolicy{UUID: benchUUID(2, i, 0),
			Priority: ReroutePriority, Match: "ip4.src == 10.0.0.1", Action: "reroute", Nexthops: []string{"100.64.0.2"}, ExternalIDs: ids.ExternalIDs()}
		for j := 0; j < 2; j++ {
			ids := IDs{OwnerType: OwnerEgressIP, Name: eip, Rule: RuleSNAT, Family: FamilyIPv4, Pod: pod, EgressIP: fmt.Sprintf("172.18.0.%d", j)}
			cur.Rows.NATs[Key{Router: GatewayRouter(fmt.Sprintf("node%d", (i+j)%100)), IDs: ids}] = &nbdb.NAT{UUID: fmt.Sprintf("n-%d-%d", i, j),
				Type: "snat", ExternalIP: ids.EgressIP, LogicalIP: "10.0.0.1", ExternalIDs: ids.ExternalIDs()}
		}
		if i < 3600 {
			pods[pod] = true
		}
	}
	m := NewMirror(cur)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if c := m.Current(pods, cur.Routers); len(c.Rows.NATs) != 7200 {
			b.Fatalf("%d NAT rows", len(c.Rows.NATs))
		}
	}
}

// benchUUID is a UUID as ovsdb-server gives them, distinct per (kind, i, j).
func benchUUID(kind, i, j int) string { return fmt.Sprintf("%08x-%04x-4000-8000-%012x", i, j, kind) }
