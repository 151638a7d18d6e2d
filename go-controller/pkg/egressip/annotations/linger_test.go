package annotations

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseLingering(t *testing.T) {
	end := time.Date(2026, 12, 3, 8, 0, 5, 250000000, time.UTC)
	ip := netip.MustParseAddr("172.18.0.50")
	list, ends := FormatLingering(map[netip.Addr]time.Time{ip: end})
	for _, tc := range []struct {
		name    string
		ann     map[string]string
		want    map[netip.Addr]time.Time
		wantErr string // substring; "" = no error
	}{
		{name: "absent", ann: nil, want: map[netip.Addr]time.Time{}},
		{name: "round trip", ann: map[string]string{EgressIPsLingering: list, EgressIPsLingeringUntil: ends}, want: map[netip.Addr]time.Time{ip: end}},
		{name: "listed without end", ann: map[string]string{EgressIPsLingering: list}, want: map[netip.Addr]time.Time{}, wantErr: EgressIPsLingeringUntil},
		{name: "end without listing", ann: map[string]string{EgressIPsLingeringUntil: ends}, want: map[netip.Addr]time.Time{}},
		{name: "end unparsable", ann: map[string]string{EgressIPsLingering: list, EgressIPsLingeringUntil: `{"172.18.0.50":"soon"}`},
			want: map[netip.Addr]time.Time{}, wantErr: EgressIPsLingeringUntil},
		{name: "ends not an object", ann: map[string]string{EgressIPsLingering: list, EgressIPsLingeringUntil: `[1]`},
			want: map[netip.Addr]time.Time{}, wantErr: EgressIPsLingeringUntil},
		{name: "list unparsable", ann: map[string]string{EgressIPsLingering: `x`, EgressIPsLingeringUntil: ends},
			want: map[netip.Addr]time.Time{}, wantErr: EgressIPsLingering},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLingering(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}})
			if (err != nil) != (tc.wantErr != "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want one naming %q", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if !got[k].Equal(v) {
					t.Errorf("%s: got %v, want %v", k, got[k], v)
				}
			}
		})
	}
}
