package hostegress

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

var (
	mp = netip.MustParsePrefix
	ma = netip.MustParseAddr
)

// host: eth0 (index 2, default route) 172.18.0.10/16 + fd00:18::10/64,
// eth1 (index 3) 192.168.50.10/24, lo (index 1).
func testHost() hostinfo.Snapshot {
	return hostinfo.Snapshot{
		Links: []hostinfo.Link{
			{Index: 1, Name: "lo", Loopback: true, Up: true, Addrs: []hostinfo.Addr{{Prefix: mp("127.0.0.1/8")}}},
			{Index: 2, Name: "eth0", Up: true, Addrs: []hostinfo.Addr{
				{Prefix: mp("172.18.0.10/16")}, {Prefix: mp("fd00:18::10/64")}, {Prefix: mp("fe80::1/64")}}},
			{Index: 3, Name: "eth1", Up: true, Addrs: []hostinfo.Addr{{Prefix: mp("192.168.50.10/24")}}},
		},
		Routes: []hostinfo.Route{
			{Dst: mp("0.0.0.0/0"), Gw: ma("172.18.0.100"), LinkIndex: 2, Metric: 100},
			{Dst: mp("0.0.0.0/0"), Gw: ma("192.168.50.100"), LinkIndex: 3, Metric: 200},
			{Dst: mp("172.18.0.0/16"), LinkIndex: 2, Scope: 253, Src: ma("172.18.0.10")},
			{Dst: mp("192.168.50.0/24"), LinkIndex: 3, Scope: 253, Src: ma("192.168.50.10")},
			{Dst: mp("::/0"), Gw: ma("fd00:18::100"), LinkIndex: 2, Metric: 1024},
		},
	}
}

func eip(name string, created int, sel map[string]string, status ...string) *egressipv1.EgressIP {
	e := &egressipv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(created), 0))},
		Spec: egressipv1.EgressIPSpec{
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			PodSelector:       metav1.LabelSelector{MatchLabels: sel},
		},
	}
	for i := 0; i+1 < len(status); i += 2 {
		e.Status.Items = append(e.Status.Items, egressipv1.EgressIPStatusItem{Node: status[i], EgressIP: status[i+1]})
		e.Spec.EgressIPs = append(e.Spec.EgressIPs, status[i+1])
	}
	return e
}

func pod(ns, name string, labels map[string]string, ips ...string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	for _, ip := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
	}
	return p
}

func namespaces() map[string]*corev1.Namespace {
	return map[string]*corev1.Namespace{
		"prod": {ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}},
		"dev":  {ObjectMeta: metav1.ObjectMeta{Name: "dev", Labels: map[string]string{"env": "dev"}}},
	}
}

var (
	web   = map[string]string{"app": "web"}
	db    = map[string]string{"app": "db"}
	pods3 = []*corev1.Pod{
		pod("prod", "web", web, "10.244.1.3", "fd00:10:244:1::3"),
		pod("prod", "db", db, "10.244.2.4"),
		pod("dev", "web", web, "10.244.1.9"),
	}
)

func TestCompute(t *testing.T) {
	eth1Routes := []Route{
		{Table: TableBase + 3, Route: hostinfo.Route{Dst: mp("192.168.50.0/24"), LinkIndex: 3, Scope: 253, Src: ma("192.168.50.10")}},
		{Table: TableBase + 3, Route: hostinfo.Route{Dst: mp("0.0.0.0/0"), Gw: ma("192.168.50.100"), LinkIndex: 3, Metric: 200}},
	}
	// prod/web's IPv4 served by EgressIP a's 172.18.0.50 on eth0 (the default route's interface).
	webOnA := servedOn("eth0", served{"10.244.1.3", "172.18.0.50", "a"})
	tests := []struct {
		name     string
		eips     []*egressipv1.EgressIP
		pods     []*corev1.Pod
		host     func(*hostinfo.Snapshot)
		want     State
		problems []string // reasons
	}{
		{
			name: "nothing assigned here",
			eips: []*egressipv1.EgressIP{eip("a", 1, web, "node2", "172.18.0.50")},
			pods: pods3,
		},
		{
			name: "egress IP on the default route's interface: address and SNAT per served pod IP of its family",
			eips: []*egressipv1.EgressIP{eip("a", 1, web, "node1", "172.18.0.50")},
			pods: pods3,
			want: webOnA,
		},
		{
			name: "dual stack egress IPs",
			eips: []*egressipv1.EgressIP{eip("a", 1, web, "node1", "172.18.0.50", "node1", "fd00:18::50")},
			pods: pods3,
			want: servedOn("eth0", served{"10.244.1.3", "172.18.0.50", "a"}, served{"fd00:10:244:1::3", "fd00:18::50", "a"}),
		},
		{
			name: "egress IP on a secondary interface: ip rule per pod IP and a copy of its routes",
			eips: []*egressipv1.EgressIP{eip("b", 1, db, "node1", "192.168.50.50")},
			pods: pods3,
			want: State{
				Addresses: []Address{addrOn("eth1", "192.168.50.50", "b")},
				SNAT:      []SNAT{snatOn("eth1", "10.244.2.4", "192.168.50.50", "b")},
				Rules:     []Rule{{PodIP: ma("10.244.2.4"), Table: TableBase + 3}},
				Routes:    eth1Routes,
			},
		},
		{
			name: "secondary interface but no served pod: address only, no table",
			eips: []*egressipv1.EgressIP{eip("b", 1, map[string]string{"app": "none"}, "node1", "192.168.50.50")},
			pods: pods3,
			want: State{Addresses: []Address{addrOn("eth1", "192.168.50.50", "b")}},
		},
		{
			name:     "IP in no subnet of the node",
			eips:     []*egressipv1.EgressIP{eip("a", 1, web, "node1", "10.99.0.1")},
			pods:     pods3,
			problems: []string{"EgressIPNotHostable"},
		},
		{
			name:     "unparsable status IP",
			eips:     []*egressipv1.EgressIP{eip("a", 1, web, "node1", "not-an-ip")},
			pods:     pods3,
			problems: []string{"InvalidEgressIP"},
		},
		{
			name:     "same IP in two EgressIPs: the first by name wins",
			eips:     []*egressipv1.EgressIP{eip("b", 1, db, "node1", "172.18.0.50"), eip("a", 2, web, "node1", "172.18.0.50")},
			pods:     pods3,
			want:     webOnA,
			problems: []string{"EgressIPConflict"},
		},
		{
			name: "IP already on the host, not ours: no address, SNAT kept, problem",
			eips: []*egressipv1.EgressIP{eip("a", 1, web, "node1", "172.18.0.77")},
			pods: pods3,
			host: func(s *hostinfo.Snapshot) {
				s.Links[1].Addrs = append(s.Links[1].Addrs, hostinfo.Addr{Prefix: mp("172.18.0.77/32")})
			},
			want: State{
				SNAT: []SNAT{snatOn("eth0", "10.244.1.3", "172.18.0.77", "a")},
			},
			problems: []string{"EgressIPConflict"},
		},
		{
			name: "our own address already there does not count as a subnet or a conflict",
			eips: []*egressipv1.EgressIP{eip("a", 1, web, "node1", "172.18.0.50")},
			pods: pods3,
			host: func(s *hostinfo.Snapshot) {
				s.Links[2].Addrs = append(s.Links[2].Addrs, hostinfo.Addr{Prefix: mp("172.18.0.50/32"), Ours: true})
			},
			want: webOnA,
		},
		{
			name: "a pod matched by two EgressIPs is served by one only (selection order)",
			eips: []*egressipv1.EgressIP{
				eip("late", 5, nil, "node1", "172.18.0.60"),
				eip("early", 1, web, "node1", "172.18.0.50"),
			},
			pods: pods3,
			want: servedOn("eth0", served{"10.244.1.3", "172.18.0.50", "early"}, served{"10.244.2.4", "172.18.0.60", "late"}),
		},
		{
			name: "hostNetwork, completed and IP-less pods are not served",
			eips: []*egressipv1.EgressIP{eip("a", 1, nil, "node1", "172.18.0.50")},
			pods: func() []*corev1.Pod {
				h := pod("prod", "host", nil, "172.18.0.10")
				h.Spec.HostNetwork = true
				d := pod("prod", "done", nil, "10.244.1.7")
				d.Status.Phase = corev1.PodSucceeded
				return []*corev1.Pod{h, d, pod("prod", "noip", nil)}
			}(),
			want: State{Addresses: []Address{addrOn("eth0", "172.18.0.50", "a")}},
		},
		{
			name: "IPv6 egress IP on an interface without IPv6 default route gets policy routing",
			eips: []*egressipv1.EgressIP{eip("a", 1, web, "node1", "fd00:18::50")},
			pods: pods3,
			host: func(s *hostinfo.Snapshot) { s.Routes = s.Routes[:4] },
			want: State{
				Addresses: []Address{addrOn("eth0", "fd00:18::50", "a")},
				SNAT:      []SNAT{snatOn("eth0", "fd00:10:244:1::3", "fd00:18::50", "a")},
				Rules:     []Rule{{PodIP: ma("fd00:10:244:1::3"), Table: TableBase + 2}},
				Routes: []Route{
					{Table: TableBase + 2, Route: hostinfo.Route{Dst: mp("172.18.0.0/16"), LinkIndex: 2, Scope: 253, Src: ma("172.18.0.10")}},
					{Table: TableBase + 2, Route: hostinfo.Route{Dst: mp("0.0.0.0/0"), Gw: ma("172.18.0.100"), LinkIndex: 2, Metric: 100}},
				},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host := testHost()
			if tc.host != nil {
				tc.host(&host)
			}
			got, probs := Compute(Input{NodeName: "node1", EgressIPs: tc.eips, Namespaces: namespaces(), Pods: tc.pods, Host: host})
			// Owners names, for every SNAT rule's pod IP, the served pod object it is for (TestOwners checks which).
			for _, s := range got.SNAT {
				if c, ok := got.Owners[s.PodIP]; !ok || c.Name == "" || c.IPs != nil {
					t.Errorf("Owners[%s] = %+v (%v), want the claim of the pod served, without IPs", s.PodIP, c, ok)
				}
			}
			if len(got.Owners) != len(got.SNAT) {
				t.Errorf("Owners %v: want one per SNAT rule's pod IP", got.Owners)
			}
			got.Owners = nil
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("state:\n got  %+v\n want %+v", got, tc.want)
			}
			var reasons []string
			for _, p := range probs {
				reasons = append(reasons, p.Reason)
				if !strings.Contains(p.Message, p.EgressIP) || !strings.Contains(p.Message, "status.items") {
					t.Errorf("problem message %q does not name the object and field", p.Message)
				}
			}
			if !reflect.DeepEqual(reasons, tc.problems) {
				t.Errorf("problems: got %v, want %v (%+v)", reasons, tc.problems, probs)
			}
		})
	}
}

func TestComputeIsDeterministic(t *testing.T) {
	eips := []*egressipv1.EgressIP{eip("b", 1, db, "node1", "192.168.50.50"), eip("a", 1, web, "node1", "172.18.0.50", "node1", "fd00:18::50")}
	first, _ := Compute(Input{NodeName: "node1", EgressIPs: eips, Namespaces: namespaces(), Pods: pods3, Host: testHost()})
	rev := []*egressipv1.EgressIP{eips[1], eips[0]}
	revPods := []*corev1.Pod{pods3[2], pods3[1], pods3[0]}
	second, _ := Compute(Input{NodeName: "node1", EgressIPs: rev, Namespaces: namespaces(), Pods: revPods, Host: testHost()})
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("input order changed the result:\n%+v\n%+v", first, second)
	}
	if first.Empty() {
		t.Fatal("expected a non-empty state")
	}

}

// BenchmarkCompute: one sync's pure work for 5000 pods served by 10 EgressIPs held here.
func BenchmarkCompute(b *testing.B) {
	var eips []*egressipv1.EgressIP
	for i := 0; i < 10; i++ {
		eips = append(eips, eip(fmt.Sprintf("e%d", i), i, map[string]string{"app": fmt.Sprintf("a%d", i)}, "node1", fmt.Sprintf("172.18.1.%d", i+1)))
	}
	var pods []*corev1.Pod
	for i := 0; i < 5000; i++ {
		pods = append(pods, pod("prod", fmt.Sprintf("p%d", i), map[string]string{"app": fmt.Sprintf("a%d", i%10)},
			fmt.Sprintf("10.244.%d.%d", i/250, i%250+2)))
	}
	in := Input{NodeName: "node1", EgressIPs: eips, Namespaces: namespaces(), Pods: pods, Host: testHost()}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, _ := Compute(in)
		if len(st.SNAT) != 5000 {
			b.Fatalf("%d rules", len(st.SNAT))
		}
	}
}
