// Package master is the egress IP master: it assigns the egress IPs of every
// EgressIP to egress-assignable nodes, writes the assignment to EgressIP status,
// reports requests it cannot meet as Events, and programs the OVN Northbound rows
// that steer the served pods' traffic (reroute policies, no-reroute policies, SNAT
// in shared gateway mode, address sets).
//
// Data flows one way: informer caches -> snapshot -> assign.Assign ->
// UpdateStatus (on change) -> selection (Ranked.Serve) -> nbstate.Routes/PodRows
// -> nbstate.Diff against the rows we own -> one NB transaction.
//
// Reconcile granularity: every event queues ONE key, so syncs never run at once
// and each is level-driven. Assignment is a function of all EgressIPs and nodes
// together (contested IPs, node capacity, fewest allocations) and runs over all of
// them every sync (they are few). What scales with pods does not: informer
// handlers record which pods and namespaces changed, each sync compares every
// EgressIP's selection signature and routes with what it remembers, and only the
// pods concerned are selected again and get their rows computed and compared,
// against a Mirror of the rows we own that follows every committed transaction.
// A full sync (start-up, NB reconnect or a router appearing, Params.ResyncPeriod,
// after any NB error) selects every pod again and compares every row we own in NB,
// repairing drift. Each sync writes NB in at most one transaction and touches only
// rows whose desired content changed; a burst of events is folded into few syncs
// (Params.MinSyncInterval).
package master

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/ovsdbaddr"
)

// Reachability tells whether the master reaches a node's egress health check.
// Unreachable nodes lose their egress IPs (they move to other nodes) and take no
// new ones. It is called from the sync goroutine for every egress-assignable node
// on every sync, so it must be cheap (return a cached verdict).
type Reachability interface {
	Reachable(node string) bool
}

// DaemonIdentity may also be implemented by a Reachability: DaemonID returns the
// node daemon identity (annotations.EgressDaemonID) the node's latest passed
// health probe carried, "" when it carried none or no probe passed yet. In local
// gateway mode the master then trusts the node's egress-ips-ready and linger only
// while the node's annotation names the same daemon: a daemon that restarted
// answers probes before the master's cache holds what it published. Changes (of
// ReachabilityNotifier) should fire when it changes. Cheap, like Reachable.
type DaemonIdentity interface {
	DaemonID(node string) string
}

// ReachabilityNotifier may also be implemented by a Reachability: Changes returns a
// channel that receives a value whenever some node's verdict may have changed; the
// master then syncs (coalesced with other events). Send without blocking, e.g. on a
// channel with a buffer of one.
type ReachabilityNotifier interface {
	Changes() <-chan struct{}
}

// Role is the part of the egress IP work a master process does.
type Role string

const (
	// RoleMaster is all of it, for one NB that holds every node (the centralized
	// layout, --init-master): assignment, status, conditions, Events and NB rows.
	RoleMaster Role = ""
	// RoleClusterManager is the interconnect layout's cluster manager
	// (--init-cluster-manager): assignment, health-checked nodes, status items,
	// conditions, Events and metrics. It connects to no NB and writes no row. An
	// item is programmed once its holder lists it ready (the zone's SNAT-ready list
	// in shared gateway mode, the node daemon's ready list in local mode).
	RoleClusterManager Role = "cluster-manager"
	// RoleZone is the interconnect layout's zone controller
	// (--init-ovnkube-controller NODE): the NB rows of Params.Zone's zone, from the
	// EgressIP status it reads and never writes (nbstate.Input.Zone). In shared
	// gateway mode it publishes which egress IPs its node's gateway router SNATs
	// (annotations.EgressIPsSNATReady, EgressIPsLingering).
	RoleZone Role = "zone"
)

// Params are Run's inputs. Kube, EgressIP, NBAddress (but for RoleClusterManager)
// and GatewayMode are required.
type Params struct {
	// Role: RoleMaster (default), RoleClusterManager or RoleZone.
	Role Role
	// Zone is the node whose zone a RoleZone controller programs (one zone per node).
	Zone string

	// Kube is the core client (Nodes, Namespaces, Pods, Events).
	Kube kubernetes.Interface
	// EgressIP is the EgressIP client (informer + status subresource writes).
	EgressIP egressipclientset.Interface
	// NBAddress is the OVN Northbound address: "tcp:IP:PORT", "ssl:IP:PORT" or
	// "unix:PATH", or a comma-separated list of them (RAFT cluster; the leader is used).
	NBAddress string
	// NBTLS is required when NBAddress has ssl: endpoints.
	NBTLS *tls.Config
	// GatewayMode is gwmode.Shared (reroute to the gateway router join IP, SNAT
	// on GR_<node>) or gwmode.Local (reroute to the management port IP, no SNAT rows).
	GatewayMode gwmode.Mode
	// ClusterSubnets are the pod networks; JoinSubnets the join switch networks
	// (100.64.0.0/16 by default in OVN-Kubernetes). They shape the no-reroute policies.
	ClusterSubnets []netip.Prefix
	JoinSubnets    []netip.Prefix
	// Reachability: nil means every node is reachable.
	Reachability Reachability
	// Metrics receives the master's metrics (see metrics.go); nil = not exported.
	Metrics prometheus.Registerer
	// Recorder receives Events; nil = an events broadcaster writing to Kube.
	Recorder record.EventRecorder

	// MinSyncInterval bounds how long events wait to be folded into one sync: after
	// a sync that took d, the next starts min(d, MinSyncInterval) after it ended
	// (cheap syncs follow each other at once; costly ones leave the master at
	// least as much idle time, up to this). 0 = 50 ms.
	MinSyncInterval time.Duration
	// ResyncPeriod is how often a sync runs with no event, repairing NB rows changed
	// behind our back. 0 = 10 minutes; negative = never.
	ResyncPeriod time.Duration
	// NBTimeout bounds one NB transaction and the initial connection attempt. 0 = 30 s.
	NBTimeout time.Duration
	// ReleaseLinger (local gateway mode) is how long, after the last ready holder of
	// an EgressIP's family went, its pods stay rerouted to it while no new holder is
	// ready (the node keeps the SNAT rules of an IP that moved away for as long:
	// node.Params.ReleaseLinger). After it, they are not rerouted until a holder
	// lists the IP as ready. 0 = 5 s; negative = no fallback.
	ReleaseLinger time.Duration
	// StatusWriters is how many EgressIP status updates one sync sends at once
	// (they are independent objects). 0 = 16. The Kube client's QPS/Burst still apply.
	StatusWriters int

	// OnSync, when set, is called after every sync with its result (ovnkube's readiness endpoint).
	OnSync func(error)

	// beforeSync and afterSync, when set (tests), are called around every sync.
	beforeSync func()
	afterSync  func(error)
	// doubtGrace (tests) replaces defaultDoubtGrace when positive.
	doubtGrace time.Duration
}

const (
	defaultMinSyncInterval = 50 * time.Millisecond
	defaultResyncPeriod    = 10 * time.Minute
	defaultNBTimeout       = 30 * time.Second
	defaultStatusWriters   = 16
	defaultReleaseLinger   = 5 * time.Second
)

// settings are validated Params.
type settings struct {
	Params
	mode      gwmode.Mode
	endpoints []string
	// interconnect: a cluster manager or a zone controller (node facts of the
	// interconnect layout); noNB: the cluster manager.
	interconnect, noNB bool
	linger             time.Duration // ReleaseLinger, 0 = none
}

func (p Params) validate() (settings, error) {
	s := settings{Params: p}
	if p.Kube == nil || p.EgressIP == nil {
		return s, fmt.Errorf("master: Kube and EgressIP clients are required")
	}
	mode, err := gwmode.Parse(string(p.GatewayMode))
	if err != nil {
		return s, fmt.Errorf("master: %w", err)
	}
	s.mode = mode
	switch p.Role {
	case RoleMaster:
	case RoleClusterManager:
		s.interconnect, s.noNB = true, true
	case RoleZone:
		s.interconnect = true
		if p.Zone == "" {
			return s, fmt.Errorf("master: a zone controller needs its zone (the node name)")
		}
	default:
		return s, fmt.Errorf("master: role %q: want %q, %q or %q", p.Role, RoleMaster, RoleClusterManager, RoleZone)
	}
	if s.noNB {
		if p.NBAddress != "" {
			return s, fmt.Errorf("master: the cluster manager writes no NB rows: no NB address is used (got %q)", p.NBAddress)
		}
	} else if err := s.parseNB(); err != nil {
		return s, err
	}
	if len(p.ClusterSubnets) == 0 {
		return s, fmt.Errorf("master: at least one cluster subnet is required")
	}
	for _, pr := range append(append([]netip.Prefix(nil), p.ClusterSubnets...), p.JoinSubnets...) {
		if !pr.IsValid() {
			return s, fmt.Errorf("master: invalid subnet %v", pr)
		}
	}
	if s.MinSyncInterval <= 0 {
		s.MinSyncInterval = defaultMinSyncInterval
	}
	if s.ResyncPeriod == 0 {
		s.ResyncPeriod = defaultResyncPeriod
	}
	if s.NBTimeout <= 0 {
		s.NBTimeout = defaultNBTimeout
	}
	switch {
	case s.ReleaseLinger == 0:
		s.linger = defaultReleaseLinger
	case s.ReleaseLinger > 0:
		s.linger = s.ReleaseLinger
	}
	if s.doubtGrace <= 0 {
		s.doubtGrace = defaultDoubtGrace
	}
	if s.StatusWriters <= 0 {
		s.StatusWriters = defaultStatusWriters
	}
	if s.Reachability == nil {
		s.Reachability = allReachable{}
	}
	return s, nil
}

func (s *settings) parseNB() error {
	eps, err := ovsdbaddr.ParseList(s.NBAddress)
	if err != nil {
		return fmt.Errorf("master: NB address: %w", err)
	}
	for _, ep := range eps {
		if strings.HasPrefix(ep, "ssl:") && s.NBTLS == nil {
			return fmt.Errorf("master: NB address %s needs a TLS configuration", ep)
		}
	}
	s.endpoints = eps
	return nil
}

type allReachable struct{}

func (allReachable) Reachable(string) bool { return true }
