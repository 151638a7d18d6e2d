package annotations

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(ann map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: ann}}
}

func TestParseEgressConfig(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		wantV4  string
		wantV6  string
		cap     [3]int
		wantErr string
	}{
		{name: "primary ifaddr dual stack", ann: map[string]string{PrimaryIfAddr: `{"ipv4":"172.18.0.2/16","ipv6":"fc00::2/64"}`},
			wantV4: "172.18.0.2/16", wantV6: "fc00::2/64", cap: [3]int{-1, -1, -1}},
		{name: "cloud config wins and carries capacity", ann: map[string]string{
			PrimaryIfAddr:  `{"ipv4":"172.18.0.2/16"}`,
			EgressIPConfig: `[{"interface":"eth1","ifaddr":{"ipv4":"10.0.128.0/17"},"capacity":{"ipv4":14,"ip":20}}]`},
			wantV4: "10.0.128.0/17", cap: [3]int{14, -1, 20}},
		{name: "missing", ann: nil, wantErr: PrimaryIfAddr + " is missing"},
		{name: "not json", ann: map[string]string{PrimaryIfAddr: `172.18.0.2/16`}, wantErr: "not JSON"},
		{name: "bad cidr", ann: map[string]string{PrimaryIfAddr: `{"ipv4":"172.18.0.2"}`}, wantErr: "ipv4"},
		{name: "wrong family", ann: map[string]string{PrimaryIfAddr: `{"ipv4":"fc00::2/64"}`}, wantErr: "wrong address family"},
		{name: "empty", ann: map[string]string{PrimaryIfAddr: `{}`}, wantErr: "neither"},
		{name: "empty cloud list", ann: map[string]string{EgressIPConfig: `[]`}, wantErr: "empty list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseEgressConfig(node(tc.ann))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := prefixString(cfg.Network.V4); got != tc.wantV4 {
				t.Errorf("v4 = %q, want %q", got, tc.wantV4)
			}
			if got := prefixString(cfg.Network.V6); got != tc.wantV6 {
				t.Errorf("v6 = %q, want %q", got, tc.wantV6)
			}
			if got := [3]int{cfg.CapacityV4, cfg.CapacityV6, cfg.CapacityTotal}; got != tc.cap {
				t.Errorf("capacity = %v, want %v", got, tc.cap)
			}
		})
	}
}

func prefixString(p netip.Prefix) string {
	if !p.IsValid() {
		return ""
	}
	return p.String()
}

func TestNodeSubnetsAndManagementIP(t *testing.T) {
	for _, v := range []string{`{"default":["10.244.1.0/24","fd00:10:244:1::/64"]}`, `{"default":"10.244.1.0/24"}`} {
		subnets, err := ParseNodeSubnets(node(map[string]string{NodeSubnets: v}))
		if err != nil {
			t.Fatal(err)
		}
		if got := ManagementIP(subnets[0]).String(); got != "10.244.1.2" {
			t.Errorf("%s: management IP %s", v, got)
		}
	}
	subnets, err := ParseNodeSubnets(node(map[string]string{NodeSubnets: `{"default":["fd00:10:244:1::/64"]}`}))
	if err != nil {
		t.Fatal(err)
	}
	if got := ManagementIP(subnets[0]).String(); got != "fd00:10:244:1::2" {
		t.Errorf("v6 management IP %s", got)
	}
	if _, err := ParseNodeSubnets(node(map[string]string{NodeSubnets: `{"other":[]}`})); err == nil {
		t.Error("want an error without a default network")
	}
}

func TestNodeAddressesAndMarshalRoundTrip(t *testing.T) {
	n := node(map[string]string{
		PrimaryIfAddr: DualPrefix{V4: netip.MustParsePrefix("172.18.0.12/16")}.Marshal(),
		HostCIDRs:     `["172.18.0.12/16","192.168.5.4/24"]`,
	})
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "172.18.0.12"}, {Type: corev1.NodeHostName, Address: "n"}}
	got := map[string]bool{}
	for _, a := range NodeAddresses(n) {
		got[a.String()] = true
	}
	if !got["172.18.0.12"] || !got["192.168.5.4"] || len(got) != 2 {
		t.Fatalf("NodeAddresses = %v", got)
	}
	d, err := ParseIfAddr(n.Annotations[PrimaryIfAddr])
	if err != nil || d.V4.String() != "172.18.0.12/16" || d.V6.IsValid() {
		t.Fatalf("round trip: %v %v", d, err)
	}
}

func TestGatewayRouterMAC(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		absent      bool
		want        string // "" = error (unless absent)
	}{
		{name: "absent", absent: true},
		{name: "ovn-kubernetes shape", value: `{"default":{"mode":"shared","interface-id":"breth0_node1","mac-address":"0a:58:ac:12:00:15","ip-addresses":["172.18.0.21/16"],"next-hops":["172.18.0.100"]}}`, want: "0a:58:ac:12:00:15"},
		{name: "not JSON", value: `0a:58:ac:12:00:15`},
		{name: "no default network", value: `{"other":{"mac-address":"0a:58:ac:12:00:15"}}`},
		{name: "no MAC", value: `{"default":{"mode":"local"}}`},
		{name: "bad MAC", value: `{"default":{"mac-address":"0a:58:ac"}}`},
		{name: "not Ethernet (EUI-64)", value: `{"default":{"mac-address":"0a:58:ac:12:00:15:00:01"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			anns := map[string]string{}
			if !tc.absent {
				anns[L3GatewayConfig] = tc.value
			}
			mac, ok, err := GatewayRouterMAC(node(anns))
			switch {
			case tc.absent:
				if ok || err != nil || mac != nil {
					t.Fatalf("absent: got %v %v %v", mac, ok, err)
				}
			case tc.want == "":
				if err == nil || ok {
					t.Fatalf("want an error, got %v %v", mac, ok)
				}
			default:
				if err != nil || !ok || mac.String() != tc.want {
					t.Fatalf("got %v %v %v, want %s", mac, ok, err, tc.want)
				}
			}
		})
	}
}
