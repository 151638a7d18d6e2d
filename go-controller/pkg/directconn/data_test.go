package directconn

import (
	"net/netip"
	"strings"
	"testing"
)

func TestDataRoundTrip(t *testing.T) {
	d := Data{Endpoints: []DataEndpoint{
		{ClusterID: "cluster-c", RealIP: "10.244.3.7", ConsumerIP: "10.71.3.7", ReflectedIP: "10.71.3.7"},
		{ClusterID: "cluster-d", RealIP: "fd00::1", ReflectedIP: "fd00:71::1"},
	}}
	s, err := d.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeData(s)
	if err != nil {
		t.Fatalf("DecodeData(%s): %v", s, err)
	}
	want := []ParsedEndpoint{
		{ClusterID: "cluster-c", RealIP: netip.MustParseAddr("10.244.3.7"), ConsumerIP: netip.MustParseAddr("10.71.3.7"), ReflectedIP: netip.MustParseAddr("10.71.3.7")},
		{ClusterID: "cluster-d", RealIP: netip.MustParseAddr("fd00::1"), ReflectedIP: netip.MustParseAddr("fd00:71::1")},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestDecodeDataRejects(t *testing.T) {
	tests := map[string]struct{ doc, wantErr string }{
		"not JSON":         {`nope`, "not a valid document"},
		"unknown field":    {`{"endpoints":[{"clusterID":"c","realIP":"1.1.1.1","reflectedIP":"2.2.2.2","x":1}]}`, "unknown field"},
		"empty cluster":    {`{"endpoints":[{"realIP":"1.1.1.1","reflectedIP":"2.2.2.2"}]}`, "clusterID is empty"},
		"bad reflectedIP":  {`{"endpoints":[{"clusterID":"c","realIP":"1.1.1.1","reflectedIP":"2.2.2"}]}`, "reflectedIP"},
		"bad consumerIP":   {`{"endpoints":[{"clusterID":"c","realIP":"1.1.1.1","reflectedIP":"2.2.2.2","consumerIP":"x"}]}`, "consumerIP"},
		"families differ":  {`{"endpoints":[{"clusterID":"c","realIP":"1.1.1.1","reflectedIP":"fd00::2"}]}`, "different families"},
		"missing realIP":   {`{"endpoints":[{"clusterID":"c","reflectedIP":"2.2.2.2"}]}`, "realIP"},
		"endpoints not []": {`{"endpoints":{}}`, "not a valid document"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeData(tc.doc)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("DecodeData(%s) = %v, want error containing %q", tc.doc, err, tc.wantErr)
			}
		})
	}
}
