package master

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

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
