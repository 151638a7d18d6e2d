package metricsutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/util/workqueue"
)

// idle reads the registry as a scraper would: depth 0 and every add processed.
func idle(t *testing.T, reg *prometheus.Registry, name string) bool {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var depth, adds, done float64 = -1, -1, -1
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			if !hasName(m, name) {
				continue
			}
			switch f.GetName() {
			case Depth:
				depth = m.GetGauge().GetValue()
			case Adds:
				adds = m.GetCounter().GetValue()
			case WorkDuration:
				done = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	if depth < 0 || adds < 0 || done < 0 {
		t.Fatalf("queue %s: metrics missing (depth %v, adds %v, work duration count %v)", name, depth, adds, done)
	}
	return depth == 0 && adds == done
}

func hasName(m *dto.Metric, name string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == "name" && l.GetValue() == name {
			return true
		}
	}
	return false
}

func TestWorkqueueIdle(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "q", MetricsProvider: NewWorkqueueProvider(reg)})
	defer q.ShutDown()
	// A second queue on the same registry shares the collectors under its own name.
	q2 := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "other", MetricsProvider: NewWorkqueueProvider(reg)})
	defer q2.ShutDown()
	q2.Add("x")

	if !idle(t, reg, "q") {
		t.Fatal("a new queue is not idle")
	}
	q.Add("sync")
	q.Add("sync") // already waiting: not added again
	if idle(t, reg, "q") {
		t.Fatal("idle with an item waiting")
	}
	k, _ := q.Get()
	if idle(t, reg, "q") {
		t.Fatal("idle while the item is processed")
	}
	q.Add("sync") // an event during processing: processed again after Done
	q.Done(k)
	if idle(t, reg, "q") {
		t.Fatal("idle with the item re-added during processing")
	}
	k, _ = q.Get()
	q.Done(k)
	if !idle(t, reg, "q") {
		t.Fatal("not idle once every add was processed")
	}
	if idle(t, reg, "other") {
		t.Fatal("the other queue's waiting item is not counted under its name")
	}
}
