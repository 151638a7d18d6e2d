package master

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// TestFallback: while no holder of a family is ready, the last ready next hops are
// the fallback for the linger after the last ready holder went, then none.
func TestFallback(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	linger := 5 * time.Second
	readyA := map[string]nbstate.Route{nbstate.FamilyIPv4: {Nexthops: []string{"10.244.1.2"}}}
	readyB := map[string]nbstate.Route{nbstate.FamilyIPv4: {Nexthops: []string{"10.244.2.2"}}}
	none := map[string]nbstate.Route{}
	steps := []struct {
		name        string
		at          time.Duration
		ready       map[string]nbstate.Route
		want        []string // fallback next hops; nil = none
		wantExpires time.Duration
	}{
		{"never ready: no fallback", 0, none, nil, 0},
		{"node A ready", 1 * time.Second, readyA, nil, 0},
		{"moved, B not ready: A for the linger", 2 * time.Second, none, []string{"10.244.1.2"}, 7 * time.Second},
		{"still within the linger (counted from when A went)", 6 * time.Second, none, []string{"10.244.1.2"}, 7 * time.Second},
		{"linger over: none", 7 * time.Second, none, nil, 0},
		{"B ready", 8 * time.Second, readyB, nil, 0},
		{"B gone too: B for the linger", 9 * time.Second, none, []string{"10.244.2.2"}, 14 * time.Second},
	}
	s := newServing()
	for _, st := range steps {
		fb, expires := s.fallback("eip", st.ready, []string{nbstate.FamilyIPv4}, t0.Add(st.at), linger)
		var got []string
		for _, a := range fb[nbstate.FamilyIPv4] {
			got = append(got, a.String())
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: fallback %v, want %v", st.name, got, st.want)
		}
		var wantExpires time.Time
		if st.wantExpires != 0 {
			wantExpires = t0.Add(st.wantExpires)
		}
		if !expires.Equal(wantExpires) {
			t.Errorf("%s: expires %v, want %v", st.name, expires, wantExpires)
		}
	}
}

// TestWinner: of the served pods sharing an IP, the rows go to the first in
// serving priority whose EgressIP routes that family, then by namespace and name
// (not by the "namespace/name" string: "a-b/x" sorts before "a/x" as a string).
func TestWinner(t *testing.T) {
	eip := func(name string, age int, assigned bool) *egressipv1.EgressIP {
		e := &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(age), 0))}}
		if assigned {
			e.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "n", EgressIP: "1.1.1.1"}}
		}
		return e
	}
	ip := netip.MustParseAddr("10.244.1.5")
	route := map[string]nbstate.Route{nbstate.FamilyIPv4: {Nexthops: []string{"100.64.0.2"}}}
	pod := func(ns, name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Status: corev1.PodStatus{PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}}
	}
	tests := []struct {
		name   string
		pods   map[string]string // pod key -> its EgressIP
		routed []string          // EgressIPs with a route
		want   string
	}{
		{"one pod", map[string]string{"a/x": "old"}, []string{"old"}, "a/x"},
		{"same EgressIP: by namespace, then name", map[string]string{"a/x": "old", "a-b/x": "old", "a/w": "old"}, []string{"old"}, "a/w"},
		{"the older EgressIP first", map[string]string{"a/w": "new", "z/z": "old"}, []string{"old", "new"}, "z/z"},
		{"an EgressIP without a route does not take it", map[string]string{"a/w": "new", "z/z": "old"}, []string{"new"}, "a/w"},
		{"nobody routed: nobody", map[string]string{"a/w": "new"}, nil, ""},
	}
	rank := selection.Rank([]*egressipv1.EgressIP{eip("old", 1, true), eip("new", 2, true)})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServing()
			for _, name := range tc.routed {
				s.routes[name] = route
			}
			for key, e := range tc.pods {
				ns, name, _ := strings.Cut(key, "/")
				s.choose(key, pod(ns, name), e)
			}
			got := ""
			for key := range tc.pods {
				if s.winner(ip, key, rank) {
					if got != "" {
						t.Fatalf("two winners: %s and %s", got, key)
					}
					got = key
				}
			}
			if got != tc.want {
				t.Errorf("winner %q, want %q", got, tc.want)
			}
		})
	}
}
