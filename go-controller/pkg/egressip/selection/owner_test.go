package selection

import (
	"net/netip"
	"testing"
	"time"
)

// TestOwner: of the pod objects sharing an IP, the one created later owns it, then
// by namespace, then by name, whatever their order.
func TestOwner(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		claims []IPClaim
		want   int
	}{
		{name: "none", claims: nil, want: -1},
		{name: "one", claims: []IPClaim{{Namespace: "a", Name: "p", Created: t0}}, want: 0},
		{name: "the newer pod owns the reused IP", claims: []IPClaim{{Namespace: "a", Name: "old", Created: t0}, {Namespace: "z", Name: "new", Created: t0.Add(time.Second)}}, want: 1},
		{name: "order does not matter", claims: []IPClaim{{Namespace: "z", Name: "new", Created: t0.Add(time.Second)}, {Namespace: "a", Name: "old", Created: t0}}, want: 0},
		{name: "same time: namespace", claims: []IPClaim{{Namespace: "b", Name: "p", Created: t0}, {Namespace: "a", Name: "q", Created: t0}}, want: 1},
		{name: "same time and namespace: name", claims: []IPClaim{{Namespace: "a", Name: "q", Created: t0}, {Namespace: "a", Name: "p", Created: t0}}, want: 1},
		{name: "namespace, not the namespace/name string", claims: []IPClaim{{Namespace: "a-b", Name: "x", Created: t0}, {Namespace: "a", Name: "x", Created: t0}}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Owner(tc.claims); got != tc.want {
				t.Errorf("Owner = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestOwners: per IP, the owner among the claims having it; a pod object can own
// one of its IPs and not another (dual stack, one family reused).
func TestOwners(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	v4, v6, other := netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:10:244:1::5"), netip.MustParseAddr("10.244.1.6")
	claims := []IPClaim{
		{Namespace: "a", Name: "old", Created: t0, IPs: []netip.Addr{v4, v6}},
		{Namespace: "b", Name: "new", Created: t0.Add(time.Second), IPs: []netip.Addr{v4}},
		{Namespace: "c", Name: "alone", Created: t0.Add(2 * time.Second), IPs: []netip.Addr{other}},
	}
	got := Owners(claims)
	want := map[netip.Addr]int{v4: 1, v6: 0, other: 2}
	if len(got) != len(want) {
		t.Fatalf("Owners = %v, want %v", got, want)
	}
	for ip, i := range want {
		if got[ip] != i {
			t.Errorf("owner of %s = %d, want %d", ip, got[ip], i)
		}
	}
	if Owners(nil) == nil || len(Owners(nil)) != 0 {
		t.Errorf("Owners(nil) = %v, want an empty map", Owners(nil))
	}
}
