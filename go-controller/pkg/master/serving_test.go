package master

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
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

// TestWinner: of the served pods sharing an IP, the rows go to the pod object
// owning it (selection.OwnsBefore: created later, then namespace, then name, not
// the "namespace/name" string: "a-b/x" sorts before "a/x" as a string), whatever
// EgressIP serves the others; nobody has them when the owner's EgressIP has no
// route.
func TestWinner(t *testing.T) {
	ip := netip.MustParseAddr("10.244.1.5")
	route := map[string]nbstate.Route{nbstate.FamilyIPv4: {Nexthops: []string{"100.64.0.2"}}}
	pod := func(ns, name string, created int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(time.Unix(int64(created), 0))},
			Status: corev1.PodStatus{PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}}}}
	}
	type claim struct {
		eip     string
		created int
	}
	tests := []struct {
		name   string
		pods   map[string]claim // pod key -> its EgressIP and creation time
		routed []string         // EgressIPs with a route
		want   string
	}{
		{"one pod", map[string]claim{"a/x": {"old", 1}}, []string{"old"}, "a/x"},
		{"same time: by namespace, then name", map[string]claim{"a/x": {"old", 1}, "a-b/x": {"old", 1}, "a/w": {"old", 1}}, []string{"old"}, "a/w"},
		{"the newer pod object owns it", map[string]claim{"a/w": {"old", 1}, "z/z": {"new", 2}}, []string{"old", "new"}, "z/z"},
		{"the owner's EgressIP has no route: nobody, not the other", map[string]claim{"a/w": {"old", 1}, "z/z": {"new", 2}}, []string{"old"}, ""},
		{"nobody routed: nobody", map[string]claim{"a/w": {"new", 1}}, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newServing()
			for _, name := range tc.routed {
				s.routes[name] = route
			}
			for key, c := range tc.pods {
				ns, name, _ := strings.Cut(key, "/")
				s.choose(key, pod(ns, name, c.created), c.eip)
			}
			got := ""
			for key := range tc.pods {
				if s.winner(ip, key) {
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
