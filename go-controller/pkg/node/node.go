// Package node is the egress IP part of the node daemon (ovnkube --init-node).
// It publishes the node's egress facts (k8s.ovn.org/node-primary-ifaddr,
// k8s.ovn.org/host-cidrs) on its own Node and, in local gateway mode, programs the
// host so that pods served by an egress IP this node holds leave with it: the
// address, the SNAT rules (chain OVN-KUBE-EGRESSIP), policy routing, and a
// gratuitous ARP / unsolicited neighbour advertisement when an address appears.
// In local gateway mode it also publishes, after each sync, which egress IPs it
// holds and has fully programmed (k8s.ovn.org/egress-ips-ready): the master
// reroutes pods to this node only for those, so a moved IP never sends traffic
// here before the SNAT rules exist (make-before-break).
//
// One controller does it all: informers on EgressIPs, Namespaces, Pods and the
// own Node, plus netlink address/route events and a periodic resync, all queue the
// same single key; each sync recomputes the whole desired host state from the
// caches and a fresh kernel snapshot, and converges (see egressfacts, hostegress,
// and the writers addr, iproute, iptables, garp).
//
// What we own on the host, and how it is recognised (nothing else is touched):
//   - egress IP addresses: /32 or /128 with address protocol 201 (IFA_PROTO,
//     Linux 6.1+; hostinfo.Proto), IFA_F_NOPREFIXROUTE; IPv6 also nodad and
//     preferred_lft 0 (never picked as a source address by the host);
//   - ip rules "from <podIP> lookup 7000+ifindex priority 6000" with protocol 201,
//     and routes with protocol 201 in those tables (copies of the egress
//     interface's main-table routes), only for egress IPs off the default route's
//     interface;
//   - the nat chain OVN-KUBE-EGRESSIP (iptables and ip6tables; every rule in it,
//     each commented "ovn-egressip eip=<name>") and the POSTROUTING rule jumping
//     to it (first position, comment "ovn-egressip");
//   - the filter chain OVN-KUBE-EGRESSIP-GUARD (same comments) and the INPUT rule
//     jumping to it (first position, comment "ovn-egressip"): for each egress IP
//     held, TCP segments other than a bare SYN and UDP datagrams that match no
//     conntrack entry are dropped, so the return traffic of a connection another
//     node SNATed before a move is not answered with a reset while OVN still
//     reroutes the pod's packets to the old holder (see iptables.RenderGuard).
//
// Each sync treats everything carrying these marks as stale until the desired
// state claims it: so start-up repair, drift repair and removal on unassignment
// are the same code path.
package node

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iptables"
)

// DefaultResyncInterval is used when Params.ResyncInterval is 0.
const DefaultResyncInterval = 30 * time.Second

// DefaultReleaseLinger is used when Params.ReleaseLinger is 0.
const DefaultReleaseLinger = 5 * time.Second

// Reasons of the Warning Events the node daemon sends on its own Node (those it
// sends on an EgressIP are hostegress.Problem reasons).
const (
	// ReasonEgressFactsUnknown: the daemon cannot tell its gateway interface, or
	// cannot parse what the master reroutes to it (annotations.EgressIPsRerouted).
	ReasonEgressFactsUnknown = "EgressFactsUnknown"
	// ReasonGatewayConfigInvalid (shared gateway mode): annotations.L3GatewayConfig
	// does not parse, so the IPv6 egress IPs held here are not announced.
	ReasonGatewayConfigInvalid = "GatewayConfigInvalid"
)

// Params are Run's dependencies and settings.
type Params struct {
	// Kube is used for Namespaces, Pods, the own Node (patched) and Events.
	Kube kubernetes.Interface
	// EgressIP is the EgressIP clientset (read only: the master owns status).
	EgressIP egressipclientset.Interface
	// NodeName is the name of this node's Node object (required).
	NodeName string
	// GatewayMode is gwmode.Shared (egress facts only) or gwmode.Local (facts and host programming).
	GatewayMode gwmode.Mode
	// GatewayInterface names the gateway interface; "" means the interface of the
	// main table's best default route (IPv4, else IPv6).
	GatewayInterface string
	// ResyncInterval is how often the whole state is recomputed and re-applied even
	// without events (repairs drift, e.g. a rule deleted by hand). 0 means 30 s.
	ResyncInterval time.Duration
	// IPTablesPath and IP6TablesPath select the iptables binaries (e.g.
	// /usr/sbin/iptables-legacy, /usr/sbin/iptables-nft); "" means iptables and
	// ip6tables on PATH. The matching "-restore" binary must sit next to each.
	IPTablesPath, IP6TablesPath string
	// ReleaseLinger is how long, in local gateway mode, the SNAT rules (and policy
	// routing) of an egress IP that moved to another node stay here, without the
	// address: OVN reroutes the served pods' traffic to this node until the master
	// has seen the new holder ready and rewritten the reroute policies, and that
	// traffic must not leave with this node's own address. 0 means
	// DefaultReleaseLinger; negative means the rules go at once.
	ReleaseLinger time.Duration

	// DaemonID, when set, is this daemon run's identity (annotations.EgressDaemonID): published on the own Node
	// with the egress facts, in the same patch as the first egress-ips-ready. The health server sends it too.
	DaemonID string

	// OnSync, when set, is called after every sync with its result (ovnkube's readiness endpoint).
	OnSync func(error)

	// InNetns, when set, runs every host operation (netlink, raw sockets, iptables
	// processes) inside it; it must call fn on an OS thread locked into the target
	// network namespace. nil means the process's own namespace (production: ovnkube
	// is started inside the node's network namespace). A test seam.
	InNetns func(fn func() error) error

	// host replaces the kernel (tests in this package).
	host host
}

func (p *Params) validate() error {
	switch {
	case p.Kube == nil || p.EgressIP == nil:
		return fmt.Errorf("node: Kube and EgressIP clients are required")
	case p.NodeName == "":
		return fmt.Errorf("node: NodeName is required")
	}
	if _, err := gwmode.Parse(string(p.GatewayMode)); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if p.ResyncInterval < 0 {
		return fmt.Errorf("node: ResyncInterval %s is negative", p.ResyncInterval)
	}
	return nil
}

// Run publishes egress facts and (local gateway mode) programs the host until ctx
// is done; then it returns nil, leaving the host programmed (a restart repairs it
// from the same marks). It returns an error at once for invalid Params or when
// the informer caches cannot sync.
func Run(ctx context.Context, p Params) error {
	if err := p.validate(); err != nil {
		return err
	}
	if p.ResyncInterval == 0 {
		p.ResyncInterval = DefaultResyncInterval
	}
	if p.ReleaseLinger == 0 {
		p.ReleaseLinger = DefaultReleaseLinger
	}
	if p.host == nil {
		p.host = newLinuxHost(p.InNetns, iptables.Config{IPTablesPath: p.IPTablesPath, IP6TablesPath: p.IP6TablesPath})
	}
	c, err := newController(p)
	if err != nil {
		return err
	}
	return c.run(ctx)
}
