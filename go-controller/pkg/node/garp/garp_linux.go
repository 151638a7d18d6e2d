// Package garp announces that this host now owns an IP: a gratuitous ARP for IPv4
// (github.com/mdlayher/arp) or an unsolicited neighbour advertisement with the
// Override flag for IPv6 (github.com/mdlayher/ndp). Neighbours that already have
// an entry for the IP (a previous holder's MAC) update it at once instead of
// waiting for it to go stale. Sockets are opened in the calling thread's network
// namespace, so call it where the address lives.
package garp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// Announce sends the announcement for ip out of the interface named ifName, which
// must hold ip already (the IPv6 advertisement is sent from ip itself).
func Announce(ifName string, ip netip.Addr) error {
	ifi, err := net.InterfaceByName(ifName)
	if err != nil {
		return fmt.Errorf("announce %s: %w", ip, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return fmt.Errorf("announce %s: interface %s has no Ethernet address", ip, ifName)
	}
	if ip.Is4() {
		return announce4(ifi, ip)
	}
	return announce6(ifi, ip)
}

// announce4 sends two gratuitous ARPs to the broadcast address: a request (the
// RFC 5227 announcement form) and a reply, since some neighbours only honour one.
func announce4(ifi *net.Interface, ip netip.Addr) error {
	c, err := arp.Dial(ifi)
	if err != nil {
		return fmt.Errorf("gratuitous ARP for %s on %s: %w", ip, ifi.Name, err)
	}
	defer c.Close()
	zero := net.HardwareAddr{0, 0, 0, 0, 0, 0}
	req, err := arp.NewPacket(arp.OperationRequest, ifi.HardwareAddr, ip, zero, ip)
	if err != nil {
		return fmt.Errorf("gratuitous ARP for %s: %w", ip, err)
	}
	rep, err := arp.NewPacket(arp.OperationReply, ifi.HardwareAddr, ip, ethernet.Broadcast, ip)
	if err != nil {
		return fmt.Errorf("gratuitous ARP for %s: %w", ip, err)
	}
	return errors.Join(
		wrap(c.WriteTo(req, ethernet.Broadcast), ip, ifi),
		wrap(c.WriteTo(rep, ethernet.Broadcast), ip, ifi))
}

func announce6(ifi *net.Interface, ip netip.Addr) error {
	c, _, err := ndp.Listen(ifi, ndp.Addr(ip.String()))
	if err != nil {
		return fmt.Errorf("neighbour advertisement for %s on %s: %w", ip, ifi.Name, err)
	}
	defer c.Close()
	na := &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: ip,
		Options: []ndp.Option{&ndp.LinkLayerAddress{
			Direction: ndp.Target,
			Addr:      ifi.HardwareAddr,
		}},
	}
	if err := c.WriteTo(na, nil, netip.IPv6LinkLocalAllNodes()); err != nil {
		return fmt.Errorf("neighbour advertisement for %s on %s: %w", ip, ifi.Name, err)
	}
	return nil
}

// AnnounceFor sends an unsolicited neighbour advertisement (Override) for the IPv6
// address ip out of the interface named ifName, naming mac as its link-layer
// address, on behalf of an owner that cannot announce it itself: in shared gateway
// mode an egress IP is a NAT address of the node's OVN gateway router, and OVN
// announces only IPv4 NAT addresses (gratuitous ARPs). The advertisement is sent
// from the interface's link-local address (the host does not hold ip).
func AnnounceFor(ifName string, ip netip.Addr, mac net.HardwareAddr) error {
	if !ip.Is6() || ip.Is4In6() {
		return fmt.Errorf("announce %s for %s: not an IPv6 address", ip, mac)
	}
	if len(mac) != 6 {
		return fmt.Errorf("announce %s: %q is not an Ethernet address", ip, mac)
	}
	ifi, err := net.InterfaceByName(ifName)
	if err != nil {
		return fmt.Errorf("announce %s: %w", ip, err)
	}
	c, _, err := ndp.Listen(ifi, ndp.LinkLocal)
	if err != nil {
		return fmt.Errorf("neighbour advertisement for %s on %s: %w", ip, ifName, err)
	}
	defer c.Close()
	na := &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
	if err := c.WriteTo(na, nil, netip.IPv6LinkLocalAllNodes()); err != nil {
		return fmt.Errorf("neighbour advertisement for %s (%s) on %s: %w", ip, mac, ifName, err)
	}
	return nil
}

func wrap(err error, ip netip.Addr, ifi *net.Interface) error {
	if err != nil {
		return fmt.Errorf("gratuitous ARP for %s on %s: %w", ip, ifi.Name, err)
	}
	return nil
}
