package directconn

import (
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
)

// configuration builds a Configuration for cluster id with spec (real) and status (view) pod CIDRs.
func configuration(id string, real, view []string) *netv1beta1.Configuration {
	c := &netv1beta1.Configuration{ObjectMeta: metav1.ObjectMeta{
		Namespace: "liqo-tenant-" + id, Name: id, Labels: map[string]string{RemoteClusterIDLabel: id},
	}}
	for _, r := range real {
		c.Spec.Remote.CIDR.Pod = append(c.Spec.Remote.CIDR.Pod, netv1beta1.CIDR(r))
	}
	if view != nil {
		c.Status.Remote = &netv1beta1.ClusterConfig{}
		for _, v := range view {
			c.Status.Remote.CIDR.Pod = append(c.Status.Remote.CIDR.Pod, netv1beta1.CIDR(v))
		}
	}
	return c
}

func TestRealToView(t *testing.T) {
	tests := []struct {
		name       string
		real, view []string
		ip         string
		want       string // "" when an error is expected
		wantErr    string
	}{
		{
			// A, B and C all use 10.244.0.0/16; B sees C as 10.72.0.0/16.
			name: "overlap: C's pod as B reaches it",
			real: []string{"10.244.0.0/16"}, view: []string{"10.72.0.0/16"},
			ip: "10.244.3.7", want: "10.72.3.7",
		},
		{
			name: "no remapping: spec equals status",
			real: []string{"10.245.0.0/16"}, view: []string{"10.245.0.0/16"},
			ip: "10.245.9.1", want: "10.245.9.1",
		},
		{
			name: "several CIDRs: second pair chosen by position",
			real: []string{"10.244.0.0/16", "10.250.0.0/24"}, view: []string{"10.72.0.0/16", "192.168.7.0/24"},
			ip: "10.250.0.77", want: "192.168.7.77",
		},
		{
			name: "several CIDRs: first pair",
			real: []string{"10.244.0.0/16", "10.250.0.0/24"}, view: []string{"10.72.0.0/16", "192.168.7.0/24"},
			ip: "10.244.200.1", want: "10.72.200.1",
		},
		{
			name: "prefix not on a byte boundary keeps all host bits",
			real: []string{"10.16.0.0/12"}, view: []string{"172.16.0.0/12"},
			ip: "10.31.255.254", want: "172.31.255.254",
		},
		{
			name: "host bits in the configured CIDR are ignored",
			real: []string{"10.244.9.9/16"}, view: []string{"10.72.1.1/16"},
			ip: "10.244.3.7", want: "10.72.3.7",
		},
		{
			name: "IPv6",
			real: []string{"fd00:10:244::/48"}, view: []string{"fd00:72:1::/48"},
			ip: "fd00:10:244:3::7", want: "fd00:72:1:3::7",
		},
		{
			name: "IPv6 /60 boundary inside a byte",
			real: []string{"fd00:0:0:10::/60"}, view: []string{"fd00:0:0:20::/60"},
			ip: "fd00:0:0:1f::1", want: "fd00:0:0:2f::1",
		},
		{
			name: "dual stack: IPv4 address picks the IPv4 pair",
			real: []string{"fd00:10:244::/48", "10.244.0.0/16"}, view: []string{"fd00:72:1::/48", "10.72.0.0/16"},
			ip: "10.244.3.7", want: "10.72.3.7",
		},
		{
			name: "IPv4-mapped IPv6 address is treated as IPv4",
			real: []string{"10.244.0.0/16"}, view: []string{"10.72.0.0/16"},
			ip: "::ffff:10.244.3.7", want: "10.72.3.7",
		},
		{
			name: "prefix-length mismatch is an error",
			real: []string{"10.244.0.0/16"}, view: []string{"10.72.0.0/24"},
			ip: "10.244.3.7", wantErr: "prefix lengths differ",
		},
		{
			name: "family mismatch is an error",
			real: []string{"10.244.0.0/16"}, view: []string{"fd00::/16"},
			ip: "10.244.3.7", wantErr: "another IP family",
		},
		{
			name: "address in no CIDR is an error",
			real: []string{"10.244.0.0/16", "10.250.0.0/24"}, view: []string{"10.72.0.0/16", "192.168.7.0/24"},
			ip: "10.99.0.1", wantErr: "in no known real CIDR",
		},
		{
			name: "IPv6 address in no CIDR is an error",
			real: []string{"fd00:10:244::/48"}, view: []string{"fd00:72:1::/48"},
			ip: "fd00:10:245::1", wantErr: "in no known real CIDR",
		},
		{
			name: "address in two CIDRs translating differently is an error",
			real: []string{"10.244.0.0/16", "10.244.3.0/24"}, view: []string{"10.72.0.0/16", "10.80.0.0/24"},
			ip: "10.244.3.7", wantErr: "several real CIDRs",
		},
		{
			name: "address in two CIDRs translating alike is fine",
			real: []string{"10.244.0.0/16", "10.244.3.0/24"}, view: []string{"10.72.0.0/16", "10.72.3.0/24"},
			ip: "10.244.3.7", want: "10.72.3.7",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, _, err := CIDRMapFromConfiguration(configuration("c", tc.real, tc.view))
			if err != nil {
				t.Fatalf("CIDRMapFromConfiguration: %v", err)
			}
			got, err := m.RealToView(netip.MustParseAddr(tc.ip))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("RealToView(%s) = %v, %v; want error containing %q", tc.ip, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != netip.MustParseAddr(tc.want) {
				t.Fatalf("RealToView(%s) = %v, %v; want %s", tc.ip, got, err, tc.want)
			}
			// The inverse brings the pod's own IP back.
			back, err := m.ViewToReal(got)
			if err != nil || back != netip.MustParseAddr(tc.ip).Unmap() {
				t.Fatalf("ViewToReal(%s) = %v, %v; want %s", got, back, err, tc.ip)
			}
		})
	}
}

func TestCIDRMapFromConfigurationErrors(t *testing.T) {
	tests := []struct {
		name       string
		real, view []string
		wantErr    string
	}{
		{"no status yet", []string{"10.244.0.0/16"}, nil, "no status.remote"},
		{"lengths differ", []string{"10.244.0.0/16", "10.1.0.0/16"}, []string{"10.72.0.0/16"}, "2 spec.remote.cidr.pod entries but 1 in status"},
		{"spec does not parse", []string{"10.244.0.0"}, []string{"10.72.0.0/16"}, "spec.remote.cidr.pod of Configuration liqo-tenant-c/c: entry 0"},
		{"status does not parse", []string{"10.244.0.0/16"}, []string{"nope"}, "status.remote.cidr.pod of Configuration liqo-tenant-c/c: entry 0"},
	}
	external := configuration("c", []string{"10.244.0.0/16"}, []string{"10.72.0.0/16"})
	external.Spec.Remote.CIDR.External = []netv1beta1.CIDR{"10.60.0.0/16"}
	if _, _, err := CIDRMapFromConfiguration(external); err == nil ||
		!strings.Contains(err.Error(), "1 spec.remote.cidr.external entries but 0 in status") {
		t.Errorf("external CIDRs without status: got %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := CIDRMapFromConfiguration(configuration("c", tc.real, tc.view))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("got %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCIDRMapFromConfigurationExternal(t *testing.T) {
	c := configuration("a", []string{"10.244.0.0/16"}, []string{"10.80.0.0/16"})
	c.Spec.Remote.CIDR.External = []netv1beta1.CIDR{"10.60.0.0/16"}
	c.Status.Remote.CIDR.External = []netv1beta1.CIDR{"10.61.0.0/16"}
	pod, ext, err := CIDRMapFromConfiguration(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := pod.RealToView(netip.MustParseAddr("10.244.1.5")); err != nil || got.String() != "10.80.1.5" {
		t.Errorf("pod: %v %v", got, err)
	}
	if got, err := ext.RealToView(netip.MustParseAddr("10.60.0.9")); err != nil || got.String() != "10.61.0.9" {
		t.Errorf("external: %v %v", got, err)
	}
}

func TestViewByHostBits(t *testing.T) {
	one := CIDRMap{Real: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, View: []netip.Prefix{netip.MustParsePrefix("10.72.0.0/16")}}
	tests := []struct {
		name    string
		m       CIDRMap
		ip      string
		want    string
		wantErr string
	}{
		{"single CIDR: the host bits under the view", one, "10.71.3.7", "10.72.3.7", ""},
		{"IPv4-mapped IPv6 counts as IPv4", one, "::ffff:10.71.3.7", "10.72.3.7", ""},
		{"other family", one, "fd00::1", "", "of another IP family"},
		{"several CIDRs: unknown", CIDRMap{
			Real: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.245.0.0/16")},
			View: []netip.Prefix{netip.MustParsePrefix("10.72.0.0/16"), netip.MustParsePrefix("10.73.0.0/16")}},
			"10.71.3.7", "", "with 2 CIDRs its own CIDR is unknown"},
		{"prefix lengths differ", CIDRMap{Real: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
			View: []netip.Prefix{netip.MustParsePrefix("10.72.0.0/24")}}, "10.71.3.7", "", "prefix lengths differ"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.m.ViewByHostBits(netip.MustParseAddr(tc.ip))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("got %v, %v; want %s", got, err, tc.want)
			}
		})
	}
}
