package egressfacts

import (
	"net/netip"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
)

func TestReadyChange(t *testing.T) {
	ips := func(s ...string) map[netip.Addr]bool {
		out := map[netip.Addr]bool{}
		for _, x := range s {
			out[netip.MustParseAddr(x)] = true
		}
		return out
	}
	key := annotations.EgressIPsReady
	tests := []struct {
		name        string
		current     map[string]string
		ready       map[netip.Addr]bool
		publish     bool
		wantChanged bool
		want        string // "" with wantChanged: removal
	}{
		{name: "local, absent, nothing ready: an empty list is written", publish: true,
			wantChanged: true, want: `[]`},
		{name: "local, absent, one ready", ready: ips("172.18.0.50"), publish: true,
			wantChanged: true, want: `["172.18.0.50"]`},
		{name: "local, same set: no change", current: map[string]string{key: `["172.18.0.50","fd00::50"]`},
			ready: ips("fd00::50", "172.18.0.50"), publish: true},
		{name: "local, equivalent spelling: no change", current: map[string]string{key: `["fd00:0::50"]`},
			ready: ips("fd00::50"), publish: true},
		{name: "local, an IP no longer held is removed", current: map[string]string{key: `["172.18.0.50","172.18.0.60"]`},
			ready: ips("172.18.0.60"), publish: true, wantChanged: true, want: `["172.18.0.60"]`},
		{name: "local, new IP added sorted", current: map[string]string{key: `["172.18.0.60"]`},
			ready: ips("fd00::50", "172.18.0.60", "172.18.0.50"), publish: true, wantChanged: true,
			want: `["172.18.0.50","172.18.0.60","fd00::50"]`},
		{name: "local, unparsable value is replaced", current: map[string]string{key: `nope`},
			ready: ips("172.18.0.50"), publish: true, wantChanged: true, want: `["172.18.0.50"]`},
		{name: "local, unparsable value replaced even when nothing is ready", current: map[string]string{key: `nope`},
			publish: true, wantChanged: true, want: `[]`},
		{name: "shared, present: removed", current: map[string]string{key: `["172.18.0.50"]`},
			ready: ips("172.18.0.50"), wantChanged: true},
		{name: "shared, absent: nothing", ready: ips("172.18.0.50")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, changed := ReadyChange(tc.current, tc.ready, tc.publish)
			if changed != tc.wantChanged {
				t.Fatalf("changed = %v, want %v (value %v)", changed, tc.wantChanged, v)
			}
			switch {
			case !changed && v != nil:
				t.Fatalf("no change but value %q", *v)
			case changed && tc.want == "" && v != nil:
				t.Fatalf("want removal, got %q", *v)
			case changed && tc.want != "" && (v == nil || *v != tc.want):
				t.Fatalf("value = %v, want %s", v, tc.want)
			}
		})
	}
}

func TestMergePatchCarriesFactsAndReadiness(t *testing.T) {
	set := Changes(nil, Facts{Primary: annotations.DualPrefix{V4: mp("172.18.0.10/16")}})
	v, _ := ReadyChange(nil, map[netip.Addr]bool{netip.MustParseAddr("172.18.0.50"): true}, true)
	set[annotations.EgressIPsReady] = v
	set["gone"] = nil
	got := string(MergePatch(set))
	want := `{"metadata":{"annotations":{"gone":null,"k8s.ovn.org/egress-ips-ready":"[\"172.18.0.50\"]",` +
		`"k8s.ovn.org/host-cidrs":"[]","k8s.ovn.org/node-primary-ifaddr":"{\"ipv4\":\"172.18.0.10/16\"}"}}}`
	if got != want {
		t.Fatalf("patch\n got %s\nwant %s", got, want)
	}
}
