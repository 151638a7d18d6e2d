// Package annotations names the labels and annotations that carry a Node's egress
// facts, in the formats OVN-Kubernetes uses, and parses them. It holds no state.
package annotations

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

const (
	// EgressAssignableLabel (value "") marks a Node that may host egress IPs.
	EgressAssignableLabel = "k8s.ovn.org/egress-assignable"
	// PrimaryIfAddr is the node daemon's JSON {"ipv4":"172.18.0.2/16","ipv6":"fc00::2/64"}:
	// the CIDRs of the gateway interface; it defines which egress IPs the node can host.
	PrimaryIfAddr = "k8s.ovn.org/node-primary-ifaddr"
	// EgressIPConfig is the cloud's JSON list [{"interface","ifaddr":{"ipv4","ipv6"},"capacity":{"ipv4","ipv6","ip"}}];
	// when present it takes precedence over PrimaryIfAddr for the egress network and adds capacity limits.
	EgressIPConfig = "cloud.network.openshift.io/egress-ipconfig"
	// HostCIDRs is a JSON list of every host CIDR of the node; it never contains egress IPs.
	HostCIDRs = "k8s.ovn.org/host-cidrs"
	// NodeSubnets is JSON {"default":["10.244.1.0/24"]} (a single string is also accepted): the pod subnets.
	NodeSubnets = "k8s.ovn.org/node-subnets"
	// GatewayRouterLRPIfAddr is JSON {"ipv4":"100.64.0.2/16","ipv6":...}: the node's gateway router join IPs.
	GatewayRouterLRPIfAddr = "k8s.ovn.org/node-gateway-router-lrp-ifaddr"
	// EgressIPsReady is the node daemon's JSON list of egress IPs (canonical address
	// strings, sorted, e.g. ["172.18.0.33","fc00::33"]) that the node holds and has
	// fully programmed in local gateway mode: address present, GARP / unsolicited NA
	// sent, SNAT rules for every pod it serves applied. The master reroutes to a
	// holder only once the IP it holds is listed here (make-before-break). Not
	// written in shared gateway mode.
	EgressIPsReady = "k8s.ovn.org/egress-ips-ready"
	// EgressDaemonID is the identity of the node daemon run that wrote the node's egress facts (a random string
	// drawn at each start, e.g. "5f0c2a9e41d7b3c8"), written in the same patch as its first EgressIPsReady. Its
	// health server sends the same identity with every answer (healthcheck.DaemonIDHeader). A master that probes
	// the node trusts EgressIPsReady (and the linger the daemon publishes) only while the two agree: after a
	// restart, the annotation its cache holds may still be the previous daemon's, whose list can name an IP the
	// new daemon no longer programs (make-before-break on a DaemonSet roll). A node whose health server sends no
	// identity (an older daemon) is trusted as before.
	EgressDaemonID = "k8s.ovn.org/egress-daemon-id"
	// L3GatewayConfig is OVN-Kubernetes' JSON {"default":{"mode":"shared","mac-address":"0a:58:...",
	// "ip-addresses":[...],"next-hops":[...],...}}: the node's gateway; "mac-address" is the MAC of its gateway
	// router's external port (in OVN-Kubernetes the gateway bridge's, i.e. the gateway interface's MAC).
	L3GatewayConfig = "k8s.ovn.org/l3-gateway-config"
)

// GatewayRouterMAC returns the "mac-address" of the node's L3GatewayConfig
// ("default" network). ok is false when the annotation is absent; a present but
// unparsable annotation, or one without a valid MAC, is an error.
func GatewayRouterMAC(node *corev1.Node) (mac net.HardwareAddr, ok bool, err error) {
	v, present := node.Annotations[L3GatewayConfig]
	if !present {
		return nil, false, nil
	}
	var cfg map[string]struct {
		MAC string `json:"mac-address"`
	}
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		return nil, false, fmt.Errorf("%s: not JSON {\"default\":{\"mac-address\":MAC}}: %w", L3GatewayConfig, err)
	}
	d, found := cfg["default"]
	if !found || d.MAC == "" {
		return nil, false, fmt.Errorf("%s: no default.mac-address", L3GatewayConfig)
	}
	mac, err = net.ParseMAC(d.MAC)
	if err != nil || len(mac) != 6 {
		return nil, false, fmt.Errorf("%s: default.mac-address %q is not an Ethernet address", L3GatewayConfig, d.MAC)
	}
	return mac, true, nil
}

// IfAddr is the JSON shape {"ipv4": CIDR, "ipv6": CIDR} used by several node annotations.
type IfAddr struct {
	IPv4 string `json:"ipv4,omitempty"`
	IPv6 string `json:"ipv6,omitempty"`
}

// DualPrefix holds up to one prefix per family; the address keeps its host bits
// (172.18.0.2/16 stays 172.18.0.2/16). A zero Prefix means "absent".
type DualPrefix struct {
	V4 netip.Prefix
	V6 netip.Prefix
}

// Prefixes returns the valid prefixes, IPv4 first.
func (d DualPrefix) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	if d.V4.IsValid() {
		out = append(out, d.V4)
	}
	if d.V6.IsValid() {
		out = append(out, d.V6)
	}
	return out
}

// For returns the prefix of addr's family (zero when absent).
func (d DualPrefix) For(addr netip.Addr) netip.Prefix {
	if addr.Is4() {
		return d.V4
	}
	return d.V6
}

// Marshal renders d in the IfAddr JSON shape.
func (d DualPrefix) Marshal() string {
	var ia IfAddr
	if d.V4.IsValid() {
		ia.IPv4 = d.V4.String()
	}
	if d.V6.IsValid() {
		ia.IPv6 = d.V6.String()
	}
	b, _ := json.Marshal(ia)
	return string(b)
}

// ParseIfAddr parses the IfAddr JSON shape. Each present field must be a CIDR of
// its own family. An empty document (no field) is an error.
func ParseIfAddr(value string) (DualPrefix, error) {
	var ia IfAddr
	if err := json.Unmarshal([]byte(value), &ia); err != nil {
		return DualPrefix{}, fmt.Errorf("not JSON {\"ipv4\":CIDR,\"ipv6\":CIDR}: %w", err)
	}
	var d DualPrefix
	var err error
	if ia.IPv4 != "" {
		if d.V4, err = parseFamily(ia.IPv4, true); err != nil {
			return DualPrefix{}, fmt.Errorf("ipv4: %w", err)
		}
	}
	if ia.IPv6 != "" {
		if d.V6, err = parseFamily(ia.IPv6, false); err != nil {
			return DualPrefix{}, fmt.Errorf("ipv6: %w", err)
		}
	}
	if !d.V4.IsValid() && !d.V6.IsValid() {
		return DualPrefix{}, fmt.Errorf("neither ipv4 nor ipv6 is set")
	}
	return d, nil
}

func parseFamily(s string, want4 bool) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if p.Addr().Is4() != want4 {
		return netip.Prefix{}, fmt.Errorf("%q is of the wrong address family", s)
	}
	return p, nil
}

// EgressConfig is what a node offers for egress IPs: its egress network(s) and capacity.
type EgressConfig struct {
	// Network is the egress interface's CIDR per family (address keeps host bits).
	Network DualPrefix
	// Capacity limits: per family and in total; a negative value means unlimited.
	CapacityV4, CapacityV6, CapacityTotal int
}

type cloudEntry struct {
	Interface string `json:"interface"`
	IfAddr    IfAddr `json:"ifaddr"`
	Capacity  struct {
		IPv4 *int `json:"ipv4,omitempty"`
		IPv6 *int `json:"ipv6,omitempty"`
		IP   *int `json:"ip,omitempty"`
	} `json:"capacity"`
}

// ParseEgressConfig reads a node's egress offer: the cloud egress-ipconfig
// annotation when present (first entry; missing capacity = unlimited), else
// PrimaryIfAddr with unlimited capacity. Errors name the annotation and the problem;
// a node with neither annotation returns an error too (it cannot host egress IPs).
func ParseEgressConfig(node *corev1.Node) (EgressConfig, error) {
	unlimited := EgressConfig{CapacityV4: -1, CapacityV6: -1, CapacityTotal: -1}
	if v, ok := node.Annotations[EgressIPConfig]; ok {
		var entries []cloudEntry
		if err := json.Unmarshal([]byte(v), &entries); err != nil {
			return EgressConfig{}, fmt.Errorf("annotation %s: not a JSON list: %w", EgressIPConfig, err)
		}
		if len(entries) == 0 {
			return EgressConfig{}, fmt.Errorf("annotation %s: empty list", EgressIPConfig)
		}
		e := entries[0]
		b, _ := json.Marshal(e.IfAddr)
		netw, err := ParseIfAddr(string(b))
		if err != nil {
			return EgressConfig{}, fmt.Errorf("annotation %s: ifaddr: %w", EgressIPConfig, err)
		}
		cfg := unlimited
		cfg.Network = netw
		if e.Capacity.IPv4 != nil {
			cfg.CapacityV4 = *e.Capacity.IPv4
		}
		if e.Capacity.IPv6 != nil {
			cfg.CapacityV6 = *e.Capacity.IPv6
		}
		if e.Capacity.IP != nil {
			cfg.CapacityTotal = *e.Capacity.IP
		}
		return cfg, nil
	}
	v, ok := node.Annotations[PrimaryIfAddr]
	if !ok {
		return EgressConfig{}, fmt.Errorf("annotation %s is missing", PrimaryIfAddr)
	}
	netw, err := ParseIfAddr(v)
	if err != nil {
		return EgressConfig{}, fmt.Errorf("annotation %s: %w", PrimaryIfAddr, err)
	}
	cfg := unlimited
	cfg.Network = netw
	return cfg, nil
}

// ParseHostCIDRs reads HostCIDRs (a JSON list of CIDRs). Absent: nil, nil.
func ParseHostCIDRs(node *corev1.Node) ([]netip.Prefix, error) {
	v, ok := node.Annotations[HostCIDRs]
	if !ok {
		return nil, nil
	}
	var list []string
	if err := json.Unmarshal([]byte(v), &list); err != nil {
		return nil, fmt.Errorf("annotation %s: not a JSON list of CIDRs: %w", HostCIDRs, err)
	}
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", HostCIDRs, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// ParseNodeSubnets reads NodeSubnets' "default" network: one or more pod subnets
// (masked prefixes), as a JSON list or a single string.
func ParseNodeSubnets(node *corev1.Node) ([]netip.Prefix, error) {
	v, ok := node.Annotations[NodeSubnets]
	if !ok {
		return nil, fmt.Errorf("annotation %s is missing", NodeSubnets)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, fmt.Errorf("annotation %s: not JSON: %w", NodeSubnets, err)
	}
	def, ok := raw["default"]
	if !ok {
		return nil, fmt.Errorf("annotation %s: no \"default\" network", NodeSubnets)
	}
	var list []string
	if err := json.Unmarshal(def, &list); err != nil {
		var one string
		if err2 := json.Unmarshal(def, &one); err2 != nil {
			return nil, fmt.Errorf("annotation %s: default is neither a CIDR nor a list of CIDRs", NodeSubnets)
		}
		list = []string{one}
	}
	out := make([]netip.Prefix, 0, len(list))
	for _, s := range list {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("annotation %s: %w", NodeSubnets, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// ManagementIP is the management port address of a pod subnet: its second host
// (10.244.1.0/24 -> 10.244.1.2).
func ManagementIP(subnet netip.Prefix) netip.Addr {
	return subnet.Masked().Addr().Next().Next()
}

// ParseGatewayRouterIPs reads GatewayRouterLRPIfAddr: the gateway router's join IPs.
func ParseGatewayRouterIPs(node *corev1.Node) (DualPrefix, error) {
	v, ok := node.Annotations[GatewayRouterLRPIfAddr]
	if !ok {
		return DualPrefix{}, fmt.Errorf("annotation %s is missing", GatewayRouterLRPIfAddr)
	}
	d, err := ParseIfAddr(v)
	if err != nil {
		return DualPrefix{}, fmt.Errorf("annotation %s: %w", GatewayRouterLRPIfAddr, err)
	}
	return d, nil
}

// IsEgressAssignable reports whether the node carries EgressAssignableLabel.
func IsEgressAssignable(node *corev1.Node) bool {
	_, ok := node.Labels[EgressAssignableLabel]
	return ok
}

// IsReady reports whether the node's Ready condition is True.
func IsReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeAddresses returns the node's InternalIP/ExternalIP addresses from status, plus
// the addresses of PrimaryIfAddr and HostCIDRs (each parsed leniently: unparsable
// entries are skipped). An egress IP must equal none of them.
func NodeAddresses(node *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	if v, ok := node.Annotations[PrimaryIfAddr]; ok {
		if d, err := ParseIfAddr(v); err == nil {
			for _, p := range d.Prefixes() {
				out = append(out, p.Addr())
			}
		}
	}
	if cidrs, err := ParseHostCIDRs(node); err == nil {
		for _, p := range cidrs {
			out = append(out, p.Addr())
		}
	}
	return out
}
