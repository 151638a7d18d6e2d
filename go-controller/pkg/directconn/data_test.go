package directconn

import (
	"encoding/json"
	"net/netip"
	"reflect"
	"testing"
)

func TestDataEncodeIsLiqoFormat(t *testing.T) {
	d := Data{ClusterAddresses: map[string][]string{"cluster-d": {"fd00:71::1"}, "cluster-c": {"10.71.3.7", "10.71.3.8"}}}
	s, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"clusterAddresses":{"cluster-c":["10.71.3.7","10.71.3.8"],"cluster-d":["fd00:71::1"]}}`; s != want {
		t.Fatalf("Encode = %s, want %s", s, want)
	}
	d.RealIPs = map[string]string{"10.71.3.7": "10.244.3.7"}
	if s, err = d.Encode(); err != nil || s != `{"clusterAddresses":{"cluster-c":["10.71.3.7","10.71.3.8"],"cluster-d":["fd00:71::1"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}` {
		t.Fatalf("Encode with real IPs = %s, %v", s, err)
	}
	// Liqo's reader (a struct with only clusterAddresses, unknown fields ignored) sees the same addresses.
	var liqo struct {
		ClusterAddresses map[string][]string `json:"clusterAddresses"`
	}
	if err := json.Unmarshal([]byte(s), &liqo); err != nil || !reflect.DeepEqual(liqo.ClusterAddresses, d.ClusterAddresses) {
		t.Fatalf("Liqo's shape reads %+v, %v", liqo, err)
	}
}

func TestParseData(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		name         string
		doc          string
		wantCluster  map[netip.Addr]string
		wantReal     map[netip.Addr]netip.Addr
		wantProblems []string
	}{
		{
			name:        "Liqo's document",
			doc:         `{"clusterAddresses":{"cluster-c":["10.71.3.7"],"cluster-d":["fd00::1","10.9.0.1"]}}`,
			wantCluster: map[netip.Addr]string{a("10.71.3.7"): "cluster-c", a("fd00::1"): "cluster-d", a("10.9.0.1"): "cluster-d"},
			wantReal:    map[netip.Addr]netip.Addr{},
		},
		{
			name:        "ours, with real IPs",
			doc:         `{"clusterAddresses":{"cluster-c":["10.71.3.7"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}`,
			wantCluster: map[netip.Addr]string{a("10.71.3.7"): "cluster-c"},
			wantReal:    map[netip.Addr]netip.Addr{a("10.71.3.7"): a("10.244.3.7")},
		},
		{
			name:         "unknown fields: named, the rest used",
			doc:          `{"clusterAddresses":{"cluster-c":["10.71.3.7"]},"endpoints":[],"zz":1}`,
			wantCluster:  map[netip.Addr]string{a("10.71.3.7"): "cluster-c"},
			wantReal:     map[netip.Addr]netip.Addr{},
			wantProblems: []string{`unknown field "endpoints" ignored`, `unknown field "zz" ignored`},
		},
		{
			name:         "not JSON",
			doc:          `{"clusterAddresses":`,
			wantCluster:  map[netip.Addr]string{},
			wantReal:     map[netip.Addr]netip.Addr{},
			wantProblems: []string{"not a JSON object (unexpected end of JSON input): no address is listed, every address is mapped through the consumer"},
		},
		{
			name:         "clusterAddresses not an object",
			doc:          `{"clusterAddresses":["10.71.3.7"]}`,
			wantCluster:  map[netip.Addr]string{},
			wantReal:     map[netip.Addr]netip.Addr{},
			wantProblems: []string{"field clusterAddresses is not an object of cluster IDs (json: cannot unmarshal array into Go value of type map[string]json.RawMessage): no address is listed"},
		},
		{
			name:        "one cluster's entry malformed, an address not an IP, an empty cluster ID: the rest used",
			doc:         `{"clusterAddresses":{"":["10.1.1.1"],"cluster-c":["10.71.3.7","nope"],"cluster-d":"10.9.0.1"}}`,
			wantCluster: map[netip.Addr]string{a("10.71.3.7"): "cluster-c"},
			wantReal:    map[netip.Addr]netip.Addr{},
			wantProblems: []string{
				`clusterAddresses has an empty cluster ID: its addresses [10.1.1.1] are not listed`,
				`clusterAddresses["cluster-c"][1] "nope" is not an IP address: ignored`,
				`clusterAddresses["cluster-d"] is not a list of addresses (json: cannot unmarshal string into Go value of type []string): ignored`,
			},
		},
		{
			name:         "an address listed for two clusters: for neither",
			doc:          `{"clusterAddresses":{"cluster-c":["10.71.3.7","10.71.3.8"],"cluster-d":["10.71.3.7"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}`,
			wantCluster:  map[netip.Addr]string{a("10.71.3.8"): "cluster-c"},
			wantReal:     map[netip.Addr]netip.Addr{},
			wantProblems: []string{`address 10.71.3.7 is listed for clusters cluster-c and cluster-d (clusterAddresses["cluster-d"][0]): listed for neither`},
		},
		{
			name:        "bad realIPs entries ignored",
			doc:         `{"clusterAddresses":{"cluster-c":["10.71.3.7","10.71.3.8","10.71.3.9"]},"realIPs":{"x":"10.244.0.1","10.71.3.7":"y","10.71.3.8":"fd00::8","10.1.1.1":"10.244.1.1","10.71.3.9":"10.244.3.9"}}`,
			wantCluster: map[netip.Addr]string{a("10.71.3.7"): "cluster-c", a("10.71.3.8"): "cluster-c", a("10.71.3.9"): "cluster-c"},
			wantReal:    map[netip.Addr]netip.Addr{a("10.71.3.9"): a("10.244.3.9")},
			wantProblems: []string{
				`realIPs["10.1.1.1"] names an address not listed in clusterAddresses: ignored`,
				`realIPs["10.71.3.7"] "y" is not an IP address: ignored`,
				`realIPs["10.71.3.8"] "fd00::8" is of another IP family: ignored`,
				`realIPs key "x" is not an IP address: ignored`,
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := ParseData(tc.doc)
			if !reflect.DeepEqual(got.Cluster, tc.wantCluster) || !reflect.DeepEqual(got.Real, tc.wantReal) {
				t.Errorf("ParseData = %v %v, want %v %v", got.Cluster, got.Real, tc.wantCluster, tc.wantReal)
			}
			var msgs []string
			for _, p := range problems {
				if p.Reason != ReasonInvalidData {
					t.Errorf("reason %s", p.Reason)
				}
				msgs = append(msgs, p.Message[len("annotation "+DataAnnotation+": "):])
			}
			if !reflect.DeepEqual(msgs, tc.wantProblems) {
				t.Errorf("problems =\n%q\nwant\n%q", msgs, tc.wantProblems)
			}
		})
	}
}
