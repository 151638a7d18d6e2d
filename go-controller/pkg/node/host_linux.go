package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/addr"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/garp"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iproute"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iptables"
)

// host is the controller's window on the kernel: it reads a Snapshot and makes the
// host match a desired State. The Linux implementation is linuxHost; tests use a fake.
type host interface {
	Snapshot() (hostinfo.Snapshot, error)
	// Apply makes the host match st and returns the egress IPs of st.Addresses that
	// are now fully programmed (readyIPs). The set is what the node publishes as
	// annotations.EgressIPsReady.
	Apply(st hostegress.State) (ready map[netip.Addr]bool, err error)
	// Watch calls notify on every host network change until ctx is done.
	Watch(ctx context.Context, notify func())
	// AnnounceFor sends an unsolicited neighbour advertisement for the IPv6 address
	// ip out of ifName naming mac (shared gateway mode: the gateway router's MAC).
	AnnounceFor(ifName string, ip netip.Addr, mac net.HardwareAddr) error
}

// linuxHost programs the kernel through its writers. Every operation runs through
// inNetns (nil: the calling thread's namespace), so netlink sockets, raw sockets
// and the iptables processes all act on the same network namespace.
type linuxHost struct {
	inNetns  func(func() error) error
	addrs    addressWriter
	routes   policyRouteWriter
	rules    ruleWriter
	announce announcer
	// announced are the addresses of ours this process has announced (Apply runs on
	// the controller's single worker only). A wanted address missing from it is
	// announced by the next Apply: a failed announcement is retried, and a
	// restarted daemon announces again what it holds.
	announced map[addrKey]bool
}

func newLinuxHost(inNetns func(func() error) error, cfg iptables.Config) *linuxHost {
	if inNetns == nil {
		inNetns = func(fn func() error) error { return fn() }
	}
	return &linuxHost{inNetns: inNetns, addrs: kernelAddrs{}, routes: kernelRoutes{},
		rules: iptRules{iptables.New(cfg)}, announce: garpAnnouncer{}, announced: map[addrKey]bool{}}
}

// The kernel writers.

type kernelAddrs struct{}

func (kernelAddrs) List() ([]addr.Entry, error) { return addr.List() }
func (kernelAddrs) AddHost(linkIndex int, ip netip.Addr) error {
	return addr.AddHost(linkIndex, ip, hostinfo.Proto)
}
func (kernelAddrs) Delete(linkIndex int, p netip.Prefix) error { return addr.Delete(linkIndex, p) }

type kernelRoutes struct{}

func (kernelRoutes) Sync(rules []hostegress.Rule, routes []hostegress.Route) (iproute.Stats, error) {
	return iproute.Sync(rules, routes)
}

type iptRules struct{ s *iptables.Syncer }

func (r iptRules) SyncSNAT(rules []hostegress.SNAT) error     { return r.s.Sync(rules) }
func (r iptRules) SyncGuard(addrs []hostegress.Address) error { return r.s.SyncGuard(addrs) }

type garpAnnouncer struct{}

func (garpAnnouncer) Announce(ifName string, ip netip.Addr) error { return garp.Announce(ifName, ip) }

func (h *linuxHost) AnnounceFor(ifName string, ip netip.Addr, mac net.HardwareAddr) error {
	return h.inNetns(func() error { return garp.AnnounceFor(ifName, ip, mac) })
}

func (h *linuxHost) Snapshot() (hostinfo.Snapshot, error) {
	var snap hostinfo.Snapshot
	err := h.inNetns(func() error {
		var err error
		snap, err = hostinfo.Read()
		return err
	})
	return snap, err
}

// Apply converges the host in make-before-break order: sync the guard chain for
// the wanted addresses (before an address appears, so return traffic of
// connections another node SNATed is never answered with a reset), add missing
// egress IP addresses, sync ip rules and routes, sync the SNAT chain, announce the
// addresses not yet announced (GARP / unsolicited NA), and only then delete
// addresses of ours that are no longer wanted. It keeps going after an error and
// returns them all, with the egress IPs that are fully programmed (readyIPs).
func (h *linuxHost) Apply(st hostegress.State) (map[netip.Addr]bool, error) {
	var ready map[netip.Addr]bool
	err := h.inNetns(func() error {
		var errs []error
		rep := applyReport{held: map[addrKey]bool{}}
		rep.guardErr = h.rules.SyncGuard(st.Addresses)
		errs = append(errs, rep.guardErr)
		have, err := h.addrs.List()
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		ours := map[addrKey]addr.Entry{}
		for _, e := range have {
			if e.Proto == hostinfo.Proto {
				ours[addrKey{e.LinkIndex, e.Prefix}] = e
			}
		}
		var added []hostegress.Address
		wanted := map[addrKey]bool{}
		for _, a := range st.Addresses {
			k := keyOf(a)
			wanted[k] = true
			if _, ok := ours[k]; ok {
				rep.held[k] = true
				continue
			}
			err := h.addrs.AddHost(a.LinkIndex, a.IP)
			switch {
			case errors.Is(err, unix.EEXIST):
				klog.InfoS("Egress IP address already present, not ours; left alone", "ip", a.IP, "link", a.Link)
			case err != nil:
				errs = append(errs, fmt.Errorf("EgressIP %s: %w", a.EgressIP, err))
			default:
				klog.InfoS("Added egress IP address", "ip", a.IP, "link", a.Link, "egressIP", a.EgressIP)
				added = append(added, a)
			}
		}
		if len(added) > 0 {
			if err := h.verifyMarked(added); err != nil {
				return errors.Join(append(errs, err)...) // nothing else is programmed with addresses we could not mark
			}
			for _, a := range added {
				rep.held[keyOf(a)] = true
			}
		}
		rst, err := h.routes.Sync(st.Rules, st.Routes)
		rep.routesErr = err
		errs = append(errs, err)
		if rst != (iproute.Stats{}) {
			klog.V(2).InfoS("Synced egress ip rules and routes", "stats", rst)
		}
		rep.snatErr = h.rules.SyncSNAT(st.SNAT)
		errs = append(errs, rep.snatErr)
		errs = append(errs, h.announceHeld(st.Addresses, rep.held)...)
		rep.announced = h.announced
		ready = readyIPs(st.Addresses, rep)
		for k, e := range ours {
			if wanted[k] {
				continue
			}
			if err := h.addrs.Delete(e.LinkIndex, e.Prefix); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				errs = append(errs, err)
				continue
			}
			klog.InfoS("Removed egress IP address", "address", e.Prefix, "linkIndex", e.LinkIndex)
		}
		return errors.Join(errs...)
	})
	if ready == nil {
		ready = map[netip.Addr]bool{}
	}
	return ready, err
}

// announceHeld announces (GARP / unsolicited NA) each address of addrs that is
// held and not announced yet, and forgets the announcements of addresses no longer
// held. A failed announcement is an error and is retried by the next Apply.
func (h *linuxHost) announceHeld(addrs []hostegress.Address, held map[addrKey]bool) []error {
	var errs []error
	for k := range h.announced {
		if !held[k] {
			delete(h.announced, k)
		}
	}
	for _, a := range addrs {
		k := keyOf(a)
		if !held[k] || h.announced[k] {
			continue
		}
		if err := h.announce.Announce(a.Link, a.IP); err != nil {
			// The address works without it, but a neighbour holding the previous
			// holder's MAC would keep sending replies there: not ready, retried.
			errs = append(errs, fmt.Errorf("EgressIP %s: %w", a.EgressIP, err))
			continue
		}
		h.announced[k] = true
	}
	return errs
}

// verifyMarked checks that the kernel kept our IFA_PROTO mark on the addresses just
// added. Kernels before Linux 6.1 silently drop the attribute: such an address
// could never be recognised (nor removed) as ours, so it is deleted again and an
// error says why.
func (h *linuxHost) verifyMarked(added []hostegress.Address) error {
	list, err := h.addrs.List()
	if err != nil {
		return err
	}
	marked := map[addrKey]bool{}
	for _, e := range list {
		if e.Proto == hostinfo.Proto {
			marked[addrKey{e.LinkIndex, e.Prefix}] = true
		}
	}
	var errs []error
	for _, a := range added {
		p := netip.PrefixFrom(a.IP, a.IP.BitLen())
		if marked[keyOf(a)] {
			continue
		}
		if err := h.addrs.Delete(a.LinkIndex, p); err != nil {
			errs = append(errs, fmt.Errorf("egress IP %s on %s: the kernel did not keep the address protocol mark "+
				"(IFA_PROTO, Linux 6.1 or later), and removing the address again failed: %w", a.IP, a.Link, err))
			continue
		}
		errs = append(errs, fmt.Errorf("egress IP %s on %s: the kernel did not keep the address protocol mark "+
			"(IFA_PROTO, Linux 6.1 or later); the address was removed again", a.IP, a.Link))
	}
	return errors.Join(errs...)
}
