// Package metricsutil holds what our Prometheus metrics share: Register, and a
// provider that exports client-go workqueue metrics (depth, adds, time in
// the queue, work duration, unfinished work, retries) to a Prometheus registry,
// under the names every Kubernetes controller uses (workqueue_*, label "name").
//
// A Provider is handed to one queue through its config (no process-wide provider):
//
//	workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressip-master", MetricsProvider: metricsutil.NewWorkqueueProvider(reg)}
//
// With a single key per queue, as our controllers use, the queue is idle (nothing
// waiting, nothing being processed) exactly when workqueue_depth is 0 and
// workqueue_adds_total equals the count of workqueue_work_duration_seconds: each
// add is followed by one Get (depth - 1) and one Done (a work duration observed).
package metricsutil

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Metric names.
const (
	Depth                   = "workqueue_depth"
	Adds                    = "workqueue_adds_total"
	QueueDuration           = "workqueue_queue_duration_seconds"
	WorkDuration            = "workqueue_work_duration_seconds"
	UnfinishedWork          = "workqueue_unfinished_work_seconds"
	LongestRunningProcessor = "workqueue_longest_running_processor_seconds"
	Retries                 = "workqueue_retries_total"
)

// Provider implements workqueue.MetricsProvider on a Prometheus registry.
type Provider struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var _ workqueue.MetricsProvider = (*Provider)(nil)

// NewWorkqueueProvider registers the workqueue metrics with reg (nil = a private registry, not
// exported); collectors already registered under these names are reused, so
// several queues (or a second provider on the same registry) share them.
func NewWorkqueueProvider(reg prometheus.Registerer) *Provider {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	buckets := prometheus.ExponentialBuckets(1e-5, 10, 8) // 10 µs .. 100 s
	return &Provider{
		depth: Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: Depth, Help: "Items waiting in the workqueue (added, not yet taken by a worker).",
		}, []string{"name"})),
		adds: Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Adds, Help: "Items added to the workqueue (an item already waiting is not added again).",
		}, []string{"name"})),
		latency: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: QueueDuration, Help: "Seconds an item waited in the workqueue before a worker took it.", Buckets: buckets,
		}, []string{"name"})),
		work: Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: WorkDuration, Help: "Seconds a worker took to process an item.", Buckets: buckets,
		}, []string{"name"})),
		unfinished: Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: UnfinishedWork, Help: "Seconds of work in progress not yet observed by work_duration (updated every 500 ms).",
		}, []string{"name"})),
		longest: Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: LongestRunningProcessor, Help: "Seconds the longest-running item in progress has been processed (updated every 500 ms).",
		}, []string{"name"})),
		retries: Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: Retries, Help: "Items re-added with a rate limit after a failure.",
		}, []string{"name"})),
	}
}

func (p *Provider) NewDepthMetric(name string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(name)
}

func (p *Provider) NewAddsMetric(name string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(name)
}

func (p *Provider) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(name)
}

func (p *Provider) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return p.work.WithLabelValues(name)
}

func (p *Provider) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(name)
}

func (p *Provider) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return p.longest.WithLabelValues(name)
}

func (p *Provider) NewRetriesMetric(name string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(name)
}

// Register registers c with reg and returns it; when a collector of the same kind is
// already registered under the same name (a second controller on the same
// registry), that one is returned instead. A different collector under the name
// leaves c registered nowhere (not exported) rather than failing.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
