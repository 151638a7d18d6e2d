package node

import (
	"net/netip"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/addr"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iproute"
)

// The host writers: each owns one kind of host state, acts on the calling
// thread's network namespace, and has a fake in this package's tests
// (writers_test.go). linuxHost.Apply drives them in make-before-break order and
// derives readiness from what they reported (readyIPs), nothing else.

// addressWriter lists and changes interface addresses.
type addressWriter interface {
	// List returns every address of the host; ours carry hostinfo.Proto.
	List() ([]addr.Entry, error)
	// AddHost adds ip as a /32 or /128 marked as ours; unix.EEXIST when present.
	AddHost(linkIndex int, ip netip.Addr) error
	// Delete removes an address; unix.EADDRNOTAVAIL when absent.
	Delete(linkIndex int, p netip.Prefix) error
}

// policyRouteWriter keeps our ip rules and routes equal to a desired list.
type policyRouteWriter interface {
	Sync(rules []hostegress.Rule, routes []hostegress.Route) (iproute.Stats, error)
}

// ruleWriter keeps our iptables chains equal to a desired list: the SNAT rules
// (nat) and the guard of the egress IP addresses held (filter).
type ruleWriter interface {
	SyncSNAT(rules []hostegress.SNAT) error
	SyncGuard(addrs []hostegress.Address) error
}

// announcer sends a gratuitous ARP (IPv4) or unsolicited neighbour advertisement (IPv6).
type announcer interface {
	Announce(ifName string, ip netip.Addr) error
}

// applyReport is what the writers reported during one Apply.
type applyReport struct {
	// held: wanted addresses present on their link and marked as ours.
	held map[addrKey]bool
	// announced: addresses this process has announced (now or before).
	announced map[addrKey]bool
	// guardErr, routesErr, snatErr: the outcome of each chain or table sync.
	guardErr, routesErr, snatErr error
}

// readyIPs is the set of egress IPs of want that are fully programmed according
// to r: the address is held and announced, and the guard, the policy routing and
// the SNAT chain synced without error (so every pod served with it leaves with it,
// and connections it takes over are not reset). An IP not in want is never ready;
// anything unknown (not reported) counts as not done.
func readyIPs(want []hostegress.Address, r applyReport) map[netip.Addr]bool {
	ready := map[netip.Addr]bool{}
	if r.guardErr != nil || r.routesErr != nil || r.snatErr != nil {
		return ready
	}
	for _, a := range want {
		k := keyOf(a)
		if r.held[k] && r.announced[k] {
			ready[a.IP] = true
		}
	}
	return ready
}

func keyOf(a hostegress.Address) addrKey {
	return addrKey{a.LinkIndex, netip.PrefixFrom(a.IP, a.IP.BitLen())}
}

type addrKey struct {
	link   int
	prefix netip.Prefix
}

// announceFunc adapts a function to announcer.
type announceFunc func(ifName string, ip netip.Addr) error

func (f announceFunc) Announce(ifName string, ip netip.Addr) error { return f(ifName, ip) }
