package directconn

import (
	"fmt"
	"net/netip"
	"strings"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
)

// CIDRMap is the pod-CIDR part of one Configuration: the remote cluster's real pod CIDR Real[i]
// (spec.remote.cidr.pod[i]) is reached from this cluster as View[i] (status.remote.cidr.pod[i]). Entries are paired
// by position; both lists have the same length. Prefixes are masked (host bits cleared).
type CIDRMap struct {
	Real []netip.Prefix
	View []netip.Prefix
}

// CIDRMapFromConfiguration reads a Configuration's pod CIDRs. Errors (returned, never guessed around): a CIDR that
// does not parse, no status.remote yet, or spec and status lists of different lengths. Prefix-length and family
// mismatches within a pair are reported only when an address falls in that pair (see RealToView).
func CIDRMapFromConfiguration(cfg *netv1beta1.Configuration) (CIDRMap, error) {
	name := cfg.Namespace + "/" + cfg.Name
	reals, err := parsePrefixes(cfg.Spec.Remote.CIDR.Pod)
	if err != nil {
		return CIDRMap{}, fmt.Errorf("spec.remote.cidr.pod of Configuration %s: %w", name, err)
	}
	if cfg.Status.Remote == nil {
		return CIDRMap{}, fmt.Errorf("no status.remote in Configuration %s yet (remapping not done)", name)
	}
	views, err := parsePrefixes(cfg.Status.Remote.CIDR.Pod)
	if err != nil {
		return CIDRMap{}, fmt.Errorf("status.remote.cidr.pod of Configuration %s: %w", name, err)
	}
	if len(reals) != len(views) {
		return CIDRMap{}, fmt.Errorf("%d spec.remote.cidr.pod entries but %d in status in Configuration %s",
			len(reals), len(views), name)
	}
	return CIDRMap{Real: reals, View: views}, nil
}

func parsePrefixes(cidrs []netv1beta1.CIDR) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for i, c := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(string(c)))
		if err != nil {
			return nil, fmt.Errorf("entry %d %q: %w", i, c, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// RealToView returns the address at which this cluster reaches the remote pod whose own (real) IP is ip: the View
// prefix paired with the Real prefix that contains ip, with ip's host bits kept. Example: Real 10.244.0.0/16,
// View 10.72.0.0/16: 10.244.3.7 -> 10.72.3.7.
//
// Errors: ip in no Real prefix; the pair's prefix lengths or families differ; ip in several Real prefixes that
// would give different answers.
func (m CIDRMap) RealToView(ip netip.Addr) (netip.Addr, error) {
	return translate(ip, m.Real, m.View, "real", "remapped")
}

// ViewToReal is the inverse of RealToView: from the address this cluster uses for a remote pod back to the pod's
// own IP. Same errors.
func (m CIDRMap) ViewToReal(ip netip.Addr) (netip.Addr, error) {
	return translate(ip, m.View, m.Real, "remapped", "real")
}

// ContainsView reports whether ip is in one of the View prefixes.
func (m CIDRMap) ContainsView(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range m.View {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func translate(ip netip.Addr, from, to []netip.Prefix, fromName, toName string) (netip.Addr, error) {
	ip = ip.Unmap()
	var (
		out   netip.Addr
		found bool
	)
	for i, src := range from {
		if !src.Contains(ip) {
			continue
		}
		dst := to[i]
		if dst.Addr().BitLen() != src.Addr().BitLen() {
			return netip.Addr{}, fmt.Errorf("%s is in %s CIDR %s, paired with %s CIDR %s of another IP family",
				ip, fromName, src, toName, dst)
		}
		if dst.Bits() != src.Bits() {
			return netip.Addr{}, fmt.Errorf("%s is in %s CIDR %s, paired with %s CIDR %s: prefix lengths differ",
				ip, fromName, src, toName, dst)
		}
		candidate := graft(dst, ip)
		if found && candidate != out {
			return netip.Addr{}, fmt.Errorf("%s is in several %s CIDRs that translate it differently (%s, %s)",
				ip, fromName, out, candidate)
		}
		out, found = candidate, true
	}
	if !found {
		return netip.Addr{}, fmt.Errorf("%s is in no known %s CIDR %v", ip, fromName, from)
	}
	return out, nil
}

// graft returns the address made of p's network bits and ip's host bits. p and ip have the same family.
func graft(p netip.Prefix, ip netip.Addr) netip.Addr {
	net := p.Addr().AsSlice()
	host := ip.AsSlice()
	bits := p.Bits()
	for i := range net {
		keep := bits - 8*i // network bits left in this byte
		switch {
		case keep >= 8:
			// whole byte from the prefix
		case keep <= 0:
			net[i] = host[i]
		default:
			mask := byte(0xff << (8 - keep))
			net[i] = net[i]&mask | host[i]&^mask
		}
	}
	out, _ := netip.AddrFromSlice(net)
	return out
}
