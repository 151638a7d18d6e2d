// Package addr lists, adds and deletes interface addresses over rtnetlink, including
// the address protocol attribute (IFA_PROTO, Linux 6.1+) that marks the egress IP
// addresses we own. vishvananda/netlink v1.3.1 does not carry IFA_PROTO, so the
// requests are built with its nl package. Every call acts on the calling thread's
// network namespace.
package addr

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// ifaProto is IFA_PROTO from linux/if_addr.h (not in golang.org/x/sys yet).
const ifaProto = 11

// Entry is one address as the kernel reports it.
type Entry struct {
	// LinkIndex is the interface index the address is on.
	LinkIndex int
	// Prefix is the address with its prefix length (host bits kept: 172.18.0.2/16).
	Prefix netip.Prefix
	// Flags are the IFA_F_* flags (from IFA_FLAGS when present, else ifa_flags).
	Flags uint32
	// Scope is the RT_SCOPE_* of the address.
	Scope uint8
	// Proto is the IFA_PROTO originator (0 when unset or unsupported by the kernel).
	Proto uint8
}

// List dumps every IPv4 and IPv6 address of every interface.
func List() ([]Entry, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
	req.AddData(nl.NewIfAddrmsg(unix.AF_UNSPEC))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWADDR)
	if err != nil {
		return nil, fmt.Errorf("dump addresses: %w", err)
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e, ok, err := parse(m)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, e)
		}
	}
	return out, nil
}

func parse(m []byte) (Entry, bool, error) {
	if len(m) < unix.SizeofIfAddrmsg {
		return Entry{}, false, fmt.Errorf("short RTM_NEWADDR message (%d bytes)", len(m))
	}
	hdr := nl.DeserializeIfAddrmsg(m)
	if hdr.Family != unix.AF_INET && hdr.Family != unix.AF_INET6 {
		return Entry{}, false, nil
	}
	attrs, err := nl.ParseRouteAttr(m[hdr.Len():])
	if err != nil {
		return Entry{}, false, fmt.Errorf("parse address attributes: %w", err)
	}
	e := Entry{LinkIndex: int(hdr.Index), Flags: uint32(hdr.Flags), Scope: hdr.Scope}
	var local, address netip.Addr
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFA_LOCAL:
			local, _ = netip.AddrFromSlice(a.Value)
		case unix.IFA_ADDRESS:
			address, _ = netip.AddrFromSlice(a.Value)
		case unix.IFA_FLAGS:
			if len(a.Value) >= 4 {
				e.Flags = binary.NativeEndian.Uint32(a.Value)
			}
		case ifaProto:
			if len(a.Value) >= 1 {
				e.Proto = a.Value[0]
			}
		}
	}
	ip := local // IPv4 reports the local address in IFA_LOCAL; IFA_ADDRESS may be a peer.
	if !ip.IsValid() {
		ip = address
	}
	if !ip.IsValid() {
		return Entry{}, false, nil
	}
	p, err := ip.Unmap().Prefix(int(hdr.Prefixlen))
	if err != nil {
		return Entry{}, false, fmt.Errorf("address %s/%d: %w", ip, hdr.Prefixlen, err)
	}
	e.Prefix = netip.PrefixFrom(ip.Unmap(), p.Bits())
	return e, true, nil
}

// AddHost adds ip as a host address (/32 or /128) to the interface with index
// linkIndex, stamped with proto (IFA_PROTO) and the IFA_F_NOPREFIXROUTE flag. An
// IPv6 address also gets IFA_F_NODAD (usable at once) and a preferred lifetime of
// 0 with an infinite valid lifetime: deprecated, so IPv6 source address selection
// never picks it for the host's own traffic or for MASQUERADE, while it still
// receives traffic and serves as an explicit SNAT source. (IPv4 source selection
// prefers the address of the nexthop's subnet, so a /32 is not picked there.)
// It fails with EEXIST when the address is already there.
func AddHost(linkIndex int, ip netip.Addr, proto uint8) error {
	flags := uint32(unix.IFA_F_NOPREFIXROUTE)
	if ip.Is6() {
		flags |= unix.IFA_F_NODAD
	}
	req := nl.NewNetlinkRequest(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK)
	addHeaderAndAddress(req, linkIndex, netip.PrefixFrom(ip, ip.BitLen()))
	req.AddData(nl.NewRtAttr(unix.IFA_FLAGS, nl.Uint32Attr(flags)))
	req.AddData(nl.NewRtAttr(ifaProto, nl.Uint8Attr(proto)))
	if ip.Is6() {
		ci := nl.IfaCacheInfo{IfaCacheinfo: unix.IfaCacheinfo{Prefered: 0, Valid: 0xffffffff}}
		req.AddData(nl.NewRtAttr(unix.IFA_CACHEINFO, ci.Serialize()))
	}
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("add %s to link %d: %w", ip, linkIndex, err)
	}
	return nil
}

// Delete removes the address p from the interface with index linkIndex.
func Delete(linkIndex int, p netip.Prefix) error {
	req := nl.NewNetlinkRequest(unix.RTM_DELADDR, unix.NLM_F_ACK)
	addHeaderAndAddress(req, linkIndex, p)
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("delete %s from link %d: %w", p, linkIndex, err)
	}
	return nil
}

func addHeaderAndAddress(req *nl.NetlinkRequest, linkIndex int, p netip.Prefix) {
	family := unix.AF_INET
	if p.Addr().Is6() {
		family = unix.AF_INET6
	}
	msg := nl.NewIfAddrmsg(family)
	msg.Index = uint32(linkIndex)
	msg.Prefixlen = uint8(p.Bits())
	msg.Scope = unix.RT_SCOPE_UNIVERSE
	req.AddData(msg)
	b := p.Addr().AsSlice()
	req.AddData(nl.NewRtAttr(unix.IFA_LOCAL, b))
	req.AddData(nl.NewRtAttr(unix.IFA_ADDRESS, b))
}
