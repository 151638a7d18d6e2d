package master

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/metricsutil"
)

// Metric names: the upstream names of DESIGN.md section 8 with the
// "ovnkube_master_" prefix (our binary's master role), plus our sync counters.
const (
	metricNumEgressIPs      = "ovnkube_master_num_egress_ips"
	metricRebalanceTotal    = "ovnkube_master_egress_ips_rebalance_total"
	metricUnreachableTotal  = "ovnkube_master_egress_ips_node_unreachable_total"
	metricHeldTotal         = "ovnkube_master_egress_ips_node_health_held_total"
	metricNodeReachable     = "ovnkube_master_egress_node_reachable"
	metricAssignLatency     = "ovnkube_master_egress_ips_assign_latency_seconds"
	metricUnassignLatency   = "ovnkube_master_egress_ips_unassign_latency_seconds"
	metricSyncsTotal        = "ovnkube_master_egress_ip_syncs_total"
	metricSyncErrorsTotal   = "ovnkube_master_egress_ip_sync_errors_total"
	metricNBTransactions    = "ovnkube_master_egress_ip_nb_transactions_total"
	metricStatusUpdateTotal = "ovnkube_master_egress_ip_status_updates_total"
	metricSyncDuration      = "ovnkube_master_egress_ip_sync_duration_seconds"
	metricOwnWritesIgnored  = "ovnkube_master_egress_ip_own_writes_ignored_total"
)

// metrics are the master's Prometheus metrics.
type metrics struct {
	// numEgressIPs{state="assigned"|"unassigned"}: spec entries held by a node, and not.
	numEgressIPs *prometheus.GaugeVec
	// rebalance counts egress IPs that moved from one node to another.
	rebalance prometheus.Counter
	// unreachable counts egress-assignable nodes seen going from reachable to unreachable.
	unreachable prometheus.Counter
	// assignLatency / unassignLatency: from the first event of a sync's batch to the
	// NB commit, for syncs that assigned (or unassigned) at least one egress IP.
	assignLatency, unassignLatency                   prometheus.Histogram
	syncs, syncErrors, nbTransactions, statusUpdates prometheus.Counter
	// ownWritesIgnored counts EgressIP updates that were only this master's own
	// status write (statusMemory.ownWrite): not an event.
	ownWritesIgnored prometheus.Counter
	// syncDuration{kind="full"|"incremental"}: seconds one sync took, status writes
	// and NB transaction included.
	syncDuration *prometheus.HistogramVec
	// queue: the sync queue's workqueue_* metrics (name "egressip-master"); idle
	// when workqueue_depth is 0 and workqueue_adds_total equals the count of
	// workqueue_work_duration_seconds (the chaos harness waits for that).
	queue workqueue.MetricsProvider
}

// newMetrics creates the metrics and registers them with reg (nil = a private
// registry, i.e. not exported). A collector already registered under the same name
// (Run called again on the same registry) is reused.
func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	latency := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &metrics{
		numEgressIPs: register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricNumEgressIPs, Help: "Egress IPs in EgressIP specs, by state: assigned to a node or unassigned.",
		}, []string{"state"})),
		rebalance: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricRebalanceTotal, Help: "Egress IPs moved from one node to another.",
		})),
		unreachable: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricUnreachableTotal, Help: "Times an egress-assignable node was seen going from reachable to unreachable.",
		})),
		assignLatency: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricAssignLatency, Help: "Seconds from the event that led to assigning egress IPs to the NB commit.", Buckets: latency,
		})),
		unassignLatency: register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: metricUnassignLatency, Help: "Seconds from the event that led to unassigning egress IPs to the NB commit.", Buckets: latency,
		})),
		syncs: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricSyncsTotal, Help: "Egress IP syncs run.",
		})),
		syncErrors: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricSyncErrorsTotal, Help: "Egress IP syncs that failed and were retried.",
		})),
		nbTransactions: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricNBTransactions, Help: "NB transactions committed by the egress IP master (at most one per sync).",
		})),
		statusUpdates: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricStatusUpdateTotal, Help: "EgressIP status updates written.",
		})),
		ownWritesIgnored: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricOwnWritesIgnored, Help: "EgressIP updates that were only this master's own status write, and so started no sync.",
		})),
		syncDuration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricSyncDuration, Help: "Seconds one egress IP sync took, by kind: full (every pod and row) or incremental (what changed).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"kind"})),
	}
	m.queue = metricsutil.NewWorkqueueProvider(reg)
	m.numEgressIPs.WithLabelValues("assigned")
	m.numEgressIPs.WithLabelValues("unassigned")
	return m
}

// HealthHeldCounter is the counter of egress-assignable nodes held reachable
// because no node answered the health check (the master suspected itself),
// registered with reg (reused when already registered; nil = not exported). The
// health checker is outside this package, its metric is named here with the others.
func HealthHeldCounter(reg prometheus.Registerer) prometheus.Counter {
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	return register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: metricHeldTotal,
		Help: "Times an egress-assignable node failed its health checks while no node answered, and was held reachable (the master suspected itself).",
	}))
}

// RegisterNodeReachable exports ovnkube_master_egress_node_reachable{node}: per
// egress-assignable node probed by the health check, 1 while it is reachable and
// 0 while it is not, read from reachable when scraped. unregister removes it (a
// master that stops leading probes nothing). reg nil = not exported.
func RegisterNodeReachable(reg prometheus.Registerer, reachable func() map[string]bool) (unregister func()) {
	if reg == nil {
		return func() {}
	}
	c := &nodeReachable{
		desc: prometheus.NewDesc(metricNodeReachable,
			"Whether the health check finds an egress-assignable node reachable (1) or not (0).", []string{"node"}, nil),
		reachable: reachable,
	}
	if err := reg.Register(c); err != nil {
		return func() {}
	}
	return func() { reg.Unregister(c) }
}

type nodeReachable struct {
	desc      *prometheus.Desc
	reachable func() map[string]bool
}

func (c *nodeReachable) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *nodeReachable) Collect(ch chan<- prometheus.Metric) {
	for node, ok := range c.reachable() {
		v := 0.0
		if ok {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, node)
	}
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	return metricsutil.Register(reg, c)
}
