package chaos

// Local gateway mode: what each node's host must hold, from docs/egressip.md "Host side, local gateway mode" and
// "Connections across a move", read with ip and iptables-save in the node's netns. For each status item naming the
// node: the egress IP as a host address (/32) on the interface whose subnet contains it; in the nat chain
// OVN-KUBE-EGRESSIP, jumped to first from POSTROUTING (when it has rules), `-s <pod IP> -o <iface> -j SNAT
// --to-source <egress IP>` per served pod; in the filter chain OVN-KUBE-EGRESSIP-GUARD, jumped to first from INPUT, the TCP and UDP DROP
// rules for the egress IP; the IP listed in the node's k8s.ovn.org/egress-ips-ready. Anything of these for an IP
// the node does not hold (or twice) is stale. A node whose links are cut is not checked: its daemon cannot hear the
// apiserver, so nothing says what it must hold.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

const (
	snatChain  = "OVN-KUBE-EGRESSIP"
	guardChain = "OVN-KUBE-EGRESSIP-GUARD"
)

// hostAddr is one address of a node's netns.
type hostAddr struct {
	iface  string
	prefix netip.Prefix
}

// hostState is what the checker reads of a node's host.
type hostState struct {
	addrs  []hostAddr
	nat    []string // iptables-save -t nat
	filter []string // iptables-save -t filter
}

// readHostState reads a node's addresses and iptables rules in its netns.
func readHostState(ctx context.Context, node string) (hostState, error) {
	ns := cluster.NodeNetnsName(node)
	var hs hostState
	out, err := exec.CommandContext(ctx, "ip", "-n", ns, "-j", "addr", "show").Output()
	if err != nil {
		return hs, fmt.Errorf("ip -n %s addr: %w", ns, err)
	}
	if hs.addrs, err = parseIPAddrJSON(out); err != nil {
		return hs, fmt.Errorf("ip -n %s addr: %w", ns, err)
	}
	for _, t := range []struct {
		table string
		dst   *[]string
	}{{"nat", &hs.nat}, {"filter", &hs.filter}} {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns, "iptables-save", "-t", t.table).Output()
		if err != nil {
			return hs, fmt.Errorf("iptables-save -t %s in %s: %w", t.table, ns, err)
		}
		*t.dst = strings.Split(string(out), "\n")
	}
	return hs, nil
}

// parseIPAddrJSON parses `ip -j addr show`.
func parseIPAddrJSON(b []byte) ([]hostAddr, error) {
	var links []struct {
		IfName   string `json:"ifname"`
		AddrInfo []struct {
			Local     string `json:"local"`
			PrefixLen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(b, &links); err != nil {
		return nil, err
	}
	var out []hostAddr
	for _, l := range links {
		for _, a := range l.AddrInfo {
			ip, err := netip.ParseAddr(a.Local)
			if err != nil {
				return nil, fmt.Errorf("%s: address %q: %w", l.IfName, a.Local, err)
			}
			out = append(out, hostAddr{iface: l.IfName, prefix: netip.PrefixFrom(ip, a.PrefixLen)})
		}
	}
	return out, nil
}

func isHostPrefix(p netip.Prefix) bool { return p.Bits() == p.Addr().BitLen() }

// ifaceFor is the interface whose (non-host) subnet contains ip.
func (hs hostState) ifaceFor(ip netip.Addr) string {
	for _, a := range hs.addrs {
		if !isHostPrefix(a.prefix) && a.prefix.Masked().Contains(ip) && !a.prefix.Addr().IsLinkLocalUnicast() {
			return a.iface
		}
	}
	return ""
}

// ruleArg returns the value following flag in an iptables-save rule line ("" when absent).
func ruleArg(fields []string, flag string) string {
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] == flag {
			return fields[i+1]
		}
	}
	return ""
}

// chainRules returns the rules of chain (the fields of each "-A chain ..." line).
func chainRules(lines []string, chain string) [][]string {
	var out [][]string
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == "-A" && f[1] == chain {
			out = append(out, f)
		}
	}
	return out
}

// jumpsFirst tells whether the first rule of from jumps to chain.
func jumpsFirst(lines []string, from, chain string) bool {
	r := chainRules(lines, from)
	return len(r) > 0 && ruleArg(r[0], "-j") == chain
}

// hostWant is what one node must hold: its egress IPs (IP -> EgressIP name) and the served pods' IPs per egress IP.
type hostWant struct {
	ips  map[netip.Addr]string
	pods map[netip.Addr][]netip.Addr
}

// diffHost compares a node's host state (and its ready annotation) with what it must hold and returns the missing
// and the stale items, each naming the node.
func diffHost(node string, w hostWant, hs hostState, ready []string) (missing, stale []string) {
	miss := func(f string, a ...any) {
		missing = append(missing, fmt.Sprintf("host %s: ", node)+fmt.Sprintf(f, a...))
	}
	extra := func(f string, a ...any) { stale = append(stale, fmt.Sprintf("host %s: ", node)+fmt.Sprintf(f, a...)) }

	// Addresses: every host address (/32, /128) is an egress IP; it must be on the interface of its subnet.
	held := map[netip.Addr][]string{}
	for _, a := range hs.addrs {
		if isHostPrefix(a.prefix) && !a.prefix.Addr().IsLoopback() {
			held[a.prefix.Addr()] = append(held[a.prefix.Addr()], a.iface)
		}
	}
	for ip, eip := range w.ips {
		iface := hs.ifaceFor(ip)
		switch {
		case iface == "":
			miss("address %s (%s): no interface's subnet contains it", ip, eip)
		case !slices.Contains(held[ip], iface):
			miss("address %s/%d on %s (%s)", ip, ip.BitLen(), iface, eip)
		}
	}
	for ip, ifaces := range held {
		_, want := w.ips[ip]
		for _, iface := range ifaces {
			if !want || iface != hs.ifaceFor(ip) {
				extra("address %s/%d on %s", ip, ip.BitLen(), iface)
			}
		}
	}

	// SNAT rules, one per (served pod, egress IP held here).
	wantSNAT := map[string]int{}
	for ip, eip := range w.ips {
		for _, pod := range w.pods[ip] {
			wantSNAT[fmt.Sprintf("-s %s -o %s --to-source %s (%s)", netip.PrefixFrom(pod, pod.BitLen()), hs.ifaceFor(ip), ip, eip)]++
		}
	}
	haveSNAT := map[string]int{}
	for _, r := range chainRules(hs.nat, snatChain) {
		eip := "unparsable --to-source"
		if to, err := netip.ParseAddr(ruleArg(r, "--to-source")); err == nil {
			eip = w.ips[to]
		}
		line := fmt.Sprintf("-s %s -o %s --to-source %s (%s)", ruleArg(r, "-s"), ruleArg(r, "-o"), ruleArg(r, "--to-source"), eip)
		if ruleArg(r, "-j") != "SNAT" {
			line += " [not -j SNAT]"
		}
		haveSNAT[line]++
	}
	for l, n := range wantSNAT {
		if haveSNAT[l] < n {
			miss("nat %s %s", snatChain, l)
		}
	}
	for l, n := range haveSNAT {
		if n > wantSNAT[l] {
			extra("nat %s %s (x%d)", snatChain, l, n)
		}
	}

	// The guard: a TCP and a UDP DROP rule per egress IP held.
	guard := map[string]int{}
	for _, r := range chainRules(hs.filter, guardChain) {
		guard[fmt.Sprintf("%s %s %s", ruleArg(r, "-d"), ruleArg(r, "-p"), ruleArg(r, "-j"))]++
	}
	wantGuard := map[string]bool{}
	for ip := range w.ips {
		for _, proto := range []string{"tcp", "udp"} {
			k := fmt.Sprintf("%s %s DROP", netip.PrefixFrom(ip, ip.BitLen()), proto)
			wantGuard[k] = true
			if guard[k] == 0 {
				miss("filter %s %s", guardChain, k)
			}
		}
	}
	for k, n := range guard {
		if !wantGuard[k] || n > 1 {
			extra("filter %s %s (x%d)", guardChain, k, n)
		}
	}

	if len(wantSNAT) > 0 && !jumpsFirst(hs.nat, "POSTROUTING", snatChain) {
		miss("nat POSTROUTING does not jump to %s first", snatChain)
	}
	if len(w.ips) > 0 && !jumpsFirst(hs.filter, "INPUT", guardChain) {
		miss("filter INPUT does not jump to %s first", guardChain)
	}

	// Ready: the node lists exactly the IPs it holds.
	for ip, eip := range w.ips {
		if !slices.Contains(ready, ip.String()) {
			miss("%s does not list %s (%s)", annotations.EgressIPsReady, ip, eip)
		}
	}
	for _, r := range ready {
		ip, err := netip.ParseAddr(r)
		if _, ok := w.ips[ip]; err != nil || !ok {
			extra("%s lists %s", annotations.EgressIPsReady, r)
		}
	}
	return missing, stale
}

// checkHosts adds the host state of every node not cut off to v (local gateway mode).
func (k *checker) checkHosts(ctx context.Context, eips []egressipv1.EgressIP, nodes []corev1.Node,
	servedBy map[string]*egressipv1.EgressIP, pods []corev1.Pod, v *verdict) error {
	want := map[string]hostWant{}
	for _, n := range nodes {
		want[n.Name] = hostWant{ips: map[netip.Addr]string{}, pods: map[netip.Addr][]netip.Addr{}}
	}
	for i := range eips {
		e := &eips[i]
		var served []netip.Addr
		for _, p := range pods {
			if servedBy[p.Namespace+"/"+p.Name] == e {
				if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil {
					served = append(served, ip)
				}
			}
		}
		for _, it := range e.Status.Items {
			w, ok := want[it.Node]
			ip, err := netip.ParseAddr(it.EgressIP)
			if !ok || err != nil {
				continue // status errors are reported by check
			}
			w.ips[ip] = e.Name
			w.pods[ip] = served
		}
	}
	read := k.host
	if read == nil {
		read = readHostState
	}
	for _, n := range nodes {
		if k.isCut(n.Name) {
			continue
		}
		hs, err := read(ctx, n.Name)
		if err != nil {
			return err
		}
		var ready []string
		if a, ok := n.Annotations[annotations.EgressIPsReady]; ok {
			if err := json.Unmarshal([]byte(a), &ready); err != nil {
				v.statusErrs = append(v.statusErrs, fmt.Sprintf("node %s: %s %q does not parse: %v", n.Name, annotations.EgressIPsReady, a, err))
			}
		}
		miss, stale := diffHost(n.Name, want[n.Name], hs, ready)
		v.missing = append(v.missing, miss...)
		v.stale = append(v.stale, stale...)
	}
	return nil
}
