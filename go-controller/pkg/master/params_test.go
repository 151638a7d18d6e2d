package master

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	kubefake "k8s.io/client-go/kubernetes/fake"

	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

func TestValidate(t *testing.T) {
	ok := Params{
		Kube: kubefake.NewSimpleClientset(), EgressIP: eipfake.NewSimpleClientset(),
		NBAddress: "unix:/x", GatewayMode: gwmode.Shared, ClusterSubnets: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
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
