package annotations

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func nodeWith(ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node2", Annotations: ann}}
}

func TestJoinIPForNodeID(t *testing.T) {
	for _, tc := range []struct {
		join string
		id   int
		want string
	}{
		{"100.64.0.0/16", 2, "100.64.0.2"},
		{"100.64.0.0/16", 300, "100.64.1.44"},
		{"100.64.0.0/16", 65535, "100.64.255.255"},
		{"100.64.0.0/16", 65536, ""},
		{"100.64.0.0/16", 0, ""},
		{"100.64.0.0/30", 4, ""},
		{"fd98::/64", 3, "fd98::3"},
		{"fd98::/64", 256, "fd98::100"},
	} {
		got, ok := JoinIPForNodeID(netip.MustParsePrefix(tc.join), tc.id)
		if tc.want == "" {
			if ok {
				t.Errorf("%s id %d: got %s, want none", tc.join, tc.id, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tc.want) {
			t.Errorf("%s id %d: got %s %v, want %s", tc.join, tc.id, got, ok, tc.want)
		}
	}
}

func TestGatewayRouterJoinIPs(t *testing.T) {
	joins := []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16"), netip.MustParsePrefix("fd98::/64")}
	legacy := `{"ipv4":"100.64.0.9/16"}`
	for _, tc := range []struct {
		name     string
		ann      map[string]string
		fallback bool
		want     []string
		err      string
	}{
		{"node-id wins over the old annotation", map[string]string{NodeID: "3", GatewayRouterLRPIfAddr: legacy}, true, []string{"100.64.0.3", "fd98::3"}, ""},
		{"centralized fallback", map[string]string{GatewayRouterLRPIfAddr: legacy}, true, []string{"100.64.0.9"}, ""},
		{"interconnect: no fallback", map[string]string{GatewayRouterLRPIfAddr: legacy}, false, nil, NodeID + " is missing"},
		{"unparsable node-id", map[string]string{NodeID: "two"}, true, nil, `"two" is not a positive integer`},
		{"negative node-id", map[string]string{NodeID: "-1"}, false, nil, "not a positive integer"},
		{"nothing", nil, true, nil, GatewayRouterLRPIfAddr + " is missing"},
	} {
		got, err := GatewayRouterJoinIPs(nodeWith(tc.ann), joins, tc.fallback)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		var s []string
		for _, a := range got {
			s = append(s, a.String())
		}
		if err != nil || !slices.Equal(s, tc.want) {
			t.Errorf("%s: got %v %v, want %v", tc.name, s, err, tc.want)
		}
	}
}

func TestParseTransitAndEncap(t *testing.T) {
	n := nodeWith(map[string]string{
		NodeTransitSwitchPortIfAddr: `{"ipv4":"100.88.0.3/16","ipv6":"fd97::3/64"}`,
		NodeEncapIPs:                `["172.18.0.13"]`,
	})
	ts, err := ParseTransitIPs(n)
	if err != nil || len(ts) != 2 || ts[0] != netip.MustParseAddr("100.88.0.3") || ts[1] != netip.MustParseAddr("fd97::3") {
		t.Fatalf("transit: %v %v", ts, err)
	}
	enc, err := ParseEncapIPs(n)
	if err != nil || len(enc) != 1 || enc[0] != netip.MustParseAddr("172.18.0.13") {
		t.Fatalf("encap: %v %v", enc, err)
	}
	for _, bad := range []map[string]string{
		nil,
		{NodeTransitSwitchPortIfAddr: `100.88.0.3/16`},
		{NodeTransitSwitchPortIfAddr: `{"ipv4":"fd97::3/64"}`},
		{NodeTransitSwitchPortIfAddr: `{}`},
	} {
		if _, err := ParseTransitIPs(nodeWith(bad)); err == nil || !strings.Contains(err.Error(), NodeTransitSwitchPortIfAddr) {
			t.Errorf("transit %v: err %v, want one naming the annotation", bad, err)
		}
	}
	for _, bad := range []map[string]string{nil, {NodeEncapIPs: `[]`}, {NodeEncapIPs: `["x"]`}, {NodeEncapIPs: `"1.2.3.4"`}} {
		if _, err := ParseEncapIPs(nodeWith(bad)); err == nil || !strings.Contains(err.Error(), NodeEncapIPs) {
			t.Errorf("encap %v: err %v, want one naming the annotation", bad, err)
		}
	}
}

func TestParseIPList(t *testing.T) {
	got, err := ParseIPList(nodeWith(map[string]string{EgressIPsSNATReady: `["172.18.0.33","fd00:0::1"]`}), EgressIPsSNATReady)
	if err != nil || !got[netip.MustParseAddr("172.18.0.33")] || !got[netip.MustParseAddr("fd00::1")] || len(got) != 2 {
		t.Fatalf("got %v %v", got, err)
	}
	if got, err := ParseIPList(nodeWith(nil), EgressIPsSNATReady); err != nil || len(got) != 0 {
		t.Fatalf("absent: %v %v", got, err)
	}
	if got, err := ParseIPList(nodeWith(map[string]string{EgressIPsLingering: `[1]`}), EgressIPsLingering); err == nil || len(got) != 0 ||
		!strings.Contains(err.Error(), EgressIPsLingering) {
		t.Fatalf("bad: %v %v", got, err)
	}
}
