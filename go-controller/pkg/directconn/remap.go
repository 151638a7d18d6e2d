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

// CIDRMapFromConfiguration reads a Configuration's pod CIDRs (pod) and external CIDRs (ext). Errors (returned,
// never guessed around): a CIDR that does not parse, no status.remote yet, or spec and status lists of different
// lengths. Prefix-length and family mismatches within a pair are reported only when an address falls in that pair
// (see RealToView).
func CIDRMapFromConfiguration(cfg *netv1beta1.Configuration) (pod, ext CIDRMap, err error) {
	name := cfg.Namespace + "/" + cfg.Name
	if cfg.Status.Remote == nil {
		return CIDRMap{}, CIDRMap{}, fmt.Errorf("no status.remote in Configuration %s yet (remapping not done)", name)
	}
	if pod, err = cidrMap(cfg.Spec.Remote.CIDR.Pod, cfg.Status.Remote.CIDR.Pod, "pod", name); err != nil {
		return CIDRMap{}, CIDRMap{}, err
	}
	if ext, err = cidrMap(cfg.Spec.Remote.CIDR.External, cfg.Status.Remote.CIDR.External, "external", name); err != nil {
		return CIDRMap{}, CIDRMap{}, err
	}
	return pod, ext, nil
}

func cidrMap(spec, status []netv1beta1.CIDR, field, name string) (CIDRMap, error) {
	reals, err := parsePrefixes(spec)
	if err != nil {
		return CIDRMap{}, fmt.Errorf("spec.remote.cidr.%s of Configuration %s: %w", field, name, err)
	}
	views, err := parsePrefixes(status)
	if err != nil {
		return CIDRMap{}, fmt.Errorf("status.remote.cidr.%s of Configuration %s: %w", field, name, err)
	}
	if len(reals) != len(views) {
		return CIDRMap{}, fmt.Errorf("%d spec.remote.cidr.%s entries but %d in status in Configuration %s",
			len(reals), field, len(views), name)
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
func (m CIDRMap) ContainsView(ip netip.Addr) bool { return containedIn(ip, m.View) }

// ContainsReal reports whether ip is in one of the Real prefixes.
func (m CIDRMap) ContainsReal(ip netip.Addr) bool { return containedIn(ip, m.Real) }

func containedIn(ip netip.Addr, prefixes []netip.Prefix) bool {
	ip = ip.Unmap()
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// ViewByHostBits returns the address in the only View prefix with ip's host bits, for an address of the remote
// cluster that another cluster (the consumer) sees under a remapped CIDR unknown here. Every remapping keeps the
// prefix length and the host bits, so with a single pod CIDR the answer is exact; with several the CIDR the address
// came from is unknown, and it is an error, as are a family or prefix-length mismatch.
func (m CIDRMap) ViewByHostBits(ip netip.Addr) (netip.Addr, error) {
	ip = ip.Unmap()
	if len(m.Real) != 1 {
		return netip.Addr{}, fmt.Errorf("%s is in no real CIDR %v, and with %d CIDRs its own CIDR is unknown",
			ip, m.Real, len(m.Real))
	}
	src, dst := m.Real[0], m.View[0]
	switch {
	case src.Addr().BitLen() != ip.BitLen() || dst.Addr().BitLen() != ip.BitLen():
		return netip.Addr{}, fmt.Errorf("%s is in no real CIDR %v, of another IP family", ip, m.Real)
	case src.Bits() != dst.Bits():
		return netip.Addr{}, fmt.Errorf("%s is in no real CIDR %v, paired with %s: prefix lengths differ", ip, src, dst)
	}
	return graft(dst, ip), nil
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
