package annotations

import (
	"maps"
	"net/netip"
	"strings"
	"testing"
)

func addrSet(ips ...string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, s := range ips {
		out[netip.MustParseAddr(s)] = true
	}
	return out
}

func TestParseEgressIPsReady(t *testing.T) {
	tests := []struct {
		name    string
		ann     map[string]string
		want    map[netip.Addr]bool
		wantErr string
	}{
		{name: "absent", ann: nil, want: addrSet()},
		{name: "empty list", ann: map[string]string{EgressIPsReady: `[]`}, want: addrSet()},
		{name: "dual stack", ann: map[string]string{EgressIPsReady: `["172.18.0.33","fc00::33"]`},
			want: addrSet("172.18.0.33", "fc00::33")},
		{name: "non-canonical IPv6 and IPv4-mapped are compared parsed",
			ann:  map[string]string{EgressIPsReady: `["fc00:0::33","::ffff:172.18.0.33"]`},
			want: addrSet("172.18.0.33", "fc00::33")},
		{name: "not a list", ann: map[string]string{EgressIPsReady: `"172.18.0.33"`}, wantErr: "not a JSON list"},
		{name: "not JSON", ann: map[string]string{EgressIPsReady: `172.18.0.33`}, wantErr: "not a JSON list"},
		{name: "CIDR instead of IP", ann: map[string]string{EgressIPsReady: `["172.18.0.33/32"]`}, wantErr: EgressIPsReady},
		{name: "garbage entry", ann: map[string]string{EgressIPsReady: `["172.18.0.33","nope"]`}, wantErr: `"nope"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEgressIPsReady(node(tc.ann))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
				}
				if len(got) != 0 {
					t.Fatalf("on error nothing is ready, got %v", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFormatEgressIPsReady(t *testing.T) {
	tests := []struct {
		name string
		in   map[netip.Addr]bool
		want string
	}{
		{name: "nil", in: nil, want: `[]`},
		{name: "sorted, IPv4 first, canonical", in: addrSet("fc00:0:0::33", "172.18.0.44", "172.18.0.33"),
			want: `["172.18.0.33","172.18.0.44","fc00::33"]`},
		{name: "false entries are not listed", in: map[netip.Addr]bool{netip.MustParseAddr("172.18.0.33"): false}, want: `[]`},
		{name: "IPv4-mapped is written as IPv4 once",
			in:   map[netip.Addr]bool{netip.MustParseAddr("::ffff:172.18.0.33"): true, netip.MustParseAddr("172.18.0.33"): true},
			want: `["172.18.0.33"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := FormatEgressIPsReady(tc.in)
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
			back, err := ParseEgressIPsReady(node(map[string]string{EgressIPsReady: got}))
			if err != nil {
				t.Fatalf("round trip: %v", err)
			}
			if FormatEgressIPsReady(back) != got {
				t.Fatalf("round trip changed the value: %v", back)
			}
		})
	}
}
