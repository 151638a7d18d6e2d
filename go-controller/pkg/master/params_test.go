package master

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	kubefake "k8s.io/client-go/kubernetes/fake"

	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
)

func TestParseNBAddress(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "unix:/var/run/ovn/ovnnb_db.sock", want: []string{"unix:/var/run/ovn/ovnnb_db.sock"}},
		{in: "tcp:172.18.0.2:6641", want: []string{"tcp:172.18.0.2:6641"}},
		{in: " ssl:10.0.0.1:6641, ssl:10.0.0.2:6641 ,ssl:[fd00::3]:6641", want: []string{"ssl:10.0.0.1:6641", "ssl:10.0.0.2:6641", "ssl:[fd00::3]:6641"}},
		{in: "", wantErr: "empty"},
		{in: "tcp:10.0.0.1", wantErr: "missing port"},
		{in: "http://10.0.0.1:6641", wantErr: "unknown scheme"},
		{in: "10.0.0.1:6641", wantErr: "unknown scheme"},
		{in: "unix:", wantErr: "want tcp"},
	}
	for _, tc := range tests {
		got, err := ParseNBAddress(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseNBAddress(%q) error = %v, want one containing %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseNBAddress(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Params{
		Kube: kubefake.NewSimpleClientset(), EgressIP: eipfake.NewSimpleClientset(),
		NBAddress: "unix:/x", GatewayMode: "shared", ClusterSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
	}
	s, err := ok.validate()
	if err != nil {
		t.Fatalf("valid params: %v", err)
	}
	if s.MinSyncInterval != defaultMinSyncInterval || s.ResyncPeriod != defaultResyncPeriod || s.NBTimeout != defaultNBTimeout || s.Reachability == nil {
		t.Errorf("defaults not applied: %+v", s)
	}
	bad := []struct {
		name string
		edit func(*Params)
		want string
	}{
		{"no clients", func(p *Params) { p.Kube = nil }, "clients are required"},
		{"gateway mode", func(p *Params) { p.GatewayMode = "hybrid" }, "gateway mode"},
		{"ssl without TLS", func(p *Params) { p.NBAddress = "ssl:1.2.3.4:6641" }, "TLS"},
		{"no cluster subnet", func(p *Params) { p.ClusterSubnets = nil }, "cluster subnet"},
		{"invalid join subnet", func(p *Params) { p.JoinSubnets = []netip.Prefix{{}} }, "invalid subnet"},
	}
	for _, tc := range bad {
		p := ok
		tc.edit(&p)
		if _, err := p.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestMetricsTwiceOnOneRegistry: Run may be called again on the same registry (a
// new leader term); the collectors are reused, not a panic or a silent copy.
func TestMetricsTwiceOnOneRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := newMetrics(reg)
	b := newMetrics(reg)
	a.rebalance.Inc()
	b.rebalance.Inc()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == metricRebalanceTotal {
			if got := mf.GetMetric()[0].GetCounter().GetValue(); got != 2 {
				t.Errorf("%s = %v, want 2", metricRebalanceTotal, got)
			}
			return
		}
	}
	t.Errorf("%s not registered", metricRebalanceTotal)
}
