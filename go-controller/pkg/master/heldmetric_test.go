package master

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestHealthHeldCounter: the counter is exported under its name, and a second
// leadership term on the same registry counts on the same counter.
func TestHealthHeldCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	HealthHeldCounter(reg).Inc()
	HealthHeldCounter(reg).Inc()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() != metricHeldTotal {
			continue
		}
		found = true
		if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetCounter().GetValue() != 2 {
			t.Fatalf("%s: %v, want one series at 2", metricHeldTotal, mf.GetMetric())
		}
	}
	if !found {
		t.Fatalf("%s not exported", metricHeldTotal)
	}
}
