package master

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names: the upstream names of DESIGN.md section 8 with the
// "ovnkube_master_" prefix (our binary's master role), plus our sync counters.
const (
	metricNumEgressIPs      = "ovnkube_master_num_egress_ips"
	metricRebalanceTotal    = "ovnkube_master_egress_ips_rebalance_total"
	metricUnreachableTotal  = "ovnkube_master_egress_ips_node_unreachable_total"
	metricHeldTotal         = "ovnkube_master_egress_ips_node_health_held_total"
	metricAssignLatency     = "ovnkube_master_egress_ips_assign_latency_seconds"
	metricUnassignLatency   = "ovnkube_master_egress_ips_unassign_latency_seconds"
	metricSyncsTotal        = "ovnkube_master_egress_ip_syncs_total"
	metricSyncErrorsTotal   = "ovnkube_master_egress_ip_sync_errors_total"
	metricNBTransactions    = "ovnkube_master_egress_ip_nb_transactions_total"
	metricStatusUpdateTotal = "ovnkube_master_egress_ip_status_updates_total"
	metricSyncDuration      = "ovnkube_master_egress_ip_sync_duration_seconds"
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
	// syncDuration{kind="full"|"incremental"}: seconds one sync took, status writes
	// and NB transaction included.
	syncDuration *prometheus.HistogramVec
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
		syncDuration: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricSyncDuration, Help: "Seconds one egress IP sync took, by kind: full (every pod and row) or incremental (what changed).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"kind"})),
	}
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

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		// A different collector under our name: keep ours unexported rather than fail.
	}
	return c
}
