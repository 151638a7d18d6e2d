// Package iptables keeps our two chains (IPv4 and IPv6) equal to a desired list of
// rules, each jumped to in first position from its built-in chain:
//   - nat OVN-KUBE-EGRESSIP, from POSTROUTING (so it precedes any MASQUERADE): the
//     SNAT rules of the served pods;
//   - filter OVN-KUBE-EGRESSIP-GUARD, from INPUT: for every egress IP held, TCP
//     segments other than a bare SYN, and UDP datagrams, that reach the egress IP
//     and match no conntrack entry (state NEW or INVALID) are dropped instead of
//     being delivered to the local stack, which would answer the return traffic
//     of a connection another node SNATed (before the move) with a TCP RST or an
//     ICMP port unreachable. See docs/egressip.md, "Connections across a move".
//
// Each chain is ours entirely: it is rendered whole and, when what the kernel
// holds differs, replaced in one iptables-restore --noflush transaction that
// flushes and refills only this chain. Reads, the chain itself and the jump go
// through go-iptables. Nothing outside the chains and their jump rules is ever
// touched. Works with iptables-nft and iptables-legacy: the binaries are whatever
// paths Config names (default: iptables/ip6tables on PATH).
package iptables

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"

	goipt "github.com/coreos/go-iptables/iptables"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
)

const (
	// Chain is our nat chain.
	Chain = "OVN-KUBE-EGRESSIP"
	// GuardChain is our filter chain (jumped to from INPUT).
	GuardChain = "OVN-KUBE-EGRESSIP-GUARD"
	// JumpComment marks the built-in chain's rule that jumps to one of ours.
	JumpComment = "ovn-egressip"
)

// chainSpec names one of our chains: its table and the built-in chain that jumps to it.
type chainSpec struct {
	table, chain, hook string
}

func natSpec() chainSpec   { return chainSpec{table: "nat", chain: Chain, hook: "POSTROUTING"} }
func guardSpec() chainSpec { return chainSpec{table: "filter", chain: GuardChain, hook: "INPUT"} }

// RuleComment is the comment on each SNAT rule: it names the EgressIP object.
func RuleComment(eipName string) string { return "ovn-egressip eip=" + eipName }

// Config names the iptables binaries. Empty means "iptables"/"ip6tables" on PATH.
// The restore binary is the same path with "-restore" appended
// (/usr/sbin/iptables-legacy -> /usr/sbin/iptables-legacy-restore).
type Config struct {
	IPTablesPath  string
	IP6TablesPath string
}

// Stats counts what Sync did, for tests and logs.
type Stats struct {
	Restores, JumpFixes, ChainsRemoved int
}

// Syncer applies desired SNAT rules. Create it with New; it is not safe for
// concurrent use.
type Syncer struct {
	fam   [2]*family // 0: IPv4, 1: IPv6
	Stats Stats
}

type family struct {
	proto   goipt.Protocol
	path    string
	ipt     *goipt.IPTables // created on first use
	restore string
}

// New returns a Syncer for the binaries of cfg. The binaries are looked up on
// first use, so a host without ip6tables works as long as it has no IPv6 rules.
func New(cfg Config) *Syncer {
	p4, p6 := cfg.IPTablesPath, cfg.IP6TablesPath
	if p4 == "" {
		p4 = "iptables"
	}
	if p6 == "" {
		p6 = "ip6tables"
	}
	return &Syncer{fam: [2]*family{
		{proto: goipt.ProtocolIPv4, path: p4},
		{proto: goipt.ProtocolIPv6, path: p6},
	}}
}

func (f *family) get() (*goipt.IPTables, error) {
	if f.ipt != nil {
		return f.ipt, nil
	}
	ipt, err := goipt.New(goipt.IPFamily(f.proto), goipt.Path(f.path))
	if err != nil {
		return nil, fmt.Errorf("iptables binary %q: %w", f.path, err)
	}
	restore, err := exec.LookPath(f.path + "-restore")
	if err != nil {
		return nil, fmt.Errorf("iptables restore binary for %q: %w", f.path, err)
	}
	f.ipt, f.restore = ipt, restore
	return ipt, nil
}

// Render returns the chain's rule lines ("-A OVN-KUBE-EGRESSIP ..."), in the form
// `iptables -S` prints them, for the rules of one family.
func Render(rules []hostegress.SNAT, v4 bool) []string {
	var out []string
	for _, r := range rules {
		if r.PodIP.Is4() != v4 {
			continue
		}
		out = append(out, fmt.Sprintf("-A %s -s %s -o %s -m comment --comment %q -j SNAT --to-source %s",
			Chain, netip.PrefixFrom(r.PodIP, r.PodIP.BitLen()), r.Link, RuleComment(r.EgressIP), r.EgressIPAddr))
	}
	return out
}

// RenderGuard returns the guard chain's rule lines, in the form `iptables -S`
// prints them, for the egress IP addresses of one family: per address, TCP
// segments that are not a bare SYN and UDP datagrams, to the address, in conntrack
// state NEW or INVALID, are dropped. A bare SYN (a new inbound connection) and
// ICMP are left to the host as before.
func RenderGuard(addrs []hostegress.Address, v4 bool) []string {
	var out []string
	for _, a := range addrs {
		if a.IP.Is4() != v4 {
			continue
		}
		dst := netip.PrefixFrom(a.IP, a.IP.BitLen())
		out = append(out,
			fmt.Sprintf("-A %s -d %s -p tcp -m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN -m conntrack --ctstate INVALID,NEW -m comment --comment %q -j DROP",
				GuardChain, dst, RuleComment(a.EgressIP)),
			fmt.Sprintf("-A %s -d %s -p udp -m conntrack --ctstate NEW -m comment --comment %q -j DROP",
				GuardChain, dst, RuleComment(a.EgressIP)))
	}
	return out
}

func jumpSpec(cs chainSpec) []string {
	return []string{"-m", "comment", "--comment", JumpComment, "-j", cs.chain}
}

// Sync makes both families' nat chains hold exactly the rules (each rule goes to
// the family of its pod IP). A family with no rule has neither chain nor jump.
func (s *Syncer) Sync(rules []hostegress.SNAT) error {
	return s.sync(natSpec(), func(v4 bool) []string { return Render(rules, v4) })
}

// SyncGuard makes both families' guard chains hold exactly the rules for addrs
// (RenderGuard). A family with no address has neither chain nor jump.
func (s *Syncer) SyncGuard(addrs []hostegress.Address) error {
	return s.sync(guardSpec(), func(v4 bool) []string { return RenderGuard(addrs, v4) })
}

func (s *Syncer) sync(cs chainSpec, render func(v4 bool) []string) error {
	var errs []error
	for i, f := range s.fam {
		if err := s.syncFamily(f, cs, render(i == 0)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (s *Syncer) syncFamily(f *family, cs chainSpec, want []string) error {
	ipt, err := f.get()
	if err != nil {
		if len(want) == 0 {
			return nil // no binary and nothing to program: nothing of ours can exist either.
		}
		return err
	}
	exists, err := ipt.ChainExists(cs.table, cs.chain)
	if err != nil {
		return fmt.Errorf("%s: check chain %s %s: %w", f.path, cs.table, cs.chain, err)
	}
	if len(want) == 0 {
		if !exists {
			return nil
		}
		if err := s.removeJumps(ipt, cs); err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		if err := ipt.ClearAndDeleteChain(cs.table, cs.chain); err != nil {
			return fmt.Errorf("%s: delete chain %s: %w", f.path, cs.chain, err)
		}
		s.Stats.ChainsRemoved++
		return nil
	}
	var have []string
	if exists {
		lines, err := ipt.List(cs.table, cs.chain)
		if err != nil {
			return fmt.Errorf("%s: list chain %s: %w", f.path, cs.chain, err)
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "-A ") {
				have = append(have, l)
			}
		}
	}
	// Rules before the jump: the chain is complete before traffic can reach it.
	if !equal(have, want) {
		if err := f.apply(cs, want); err != nil {
			return err
		}
		s.Stats.Restores++
	}
	return s.ensureJumpFirst(ipt, cs)
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// apply replaces the chain's content in one transaction. With --noflush, the
// ":CHAIN" line creates the chain if needed and flushes it; nothing else changes.
func (f *family) apply(cs chainSpec, want []string) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "*%s\n:%s - [0:0]\n", cs.table, cs.chain)
	for _, l := range want {
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	buf.WriteString("COMMIT\n")
	cmd := exec.Command(f.restore, "--noflush", "-w")
	cmd.Stdin = &buf
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s --noflush: %w: %s", f.restore, err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

func isJump(cs chainSpec, line string) bool {
	return strings.HasPrefix(line, "-A "+cs.hook+" ") && strings.HasSuffix(line, "-j "+cs.chain)
}

// ensureJumpFirst makes our jump the first rule of the built-in chain, exactly once.
func (s *Syncer) ensureJumpFirst(ipt *goipt.IPTables, cs chainSpec) error {
	lines, err := ipt.List(cs.table, cs.hook)
	if err != nil {
		return fmt.Errorf("list %s %s: %w", cs.table, cs.hook, err)
	}
	var rules []string
	for _, l := range lines {
		if strings.HasPrefix(l, "-A ") {
			rules = append(rules, l)
		}
	}
	count := 0
	for _, l := range rules {
		if isJump(cs, l) {
			count++
		}
	}
	if count == 1 && isJump(cs, rules[0]) {
		return nil
	}
	if err := s.removeJumps(ipt, cs); err != nil {
		return err
	}
	if err := ipt.Insert(cs.table, cs.hook, 1, jumpSpec(cs)...); err != nil {
		return fmt.Errorf("insert jump to %s: %w", cs.chain, err)
	}
	s.Stats.JumpFixes++
	return nil
}

// removeJumps deletes every rule of the built-in chain that jumps to our chain,
// whatever its comment, by its own rule spec (never by position, which others may shift).
func (s *Syncer) removeJumps(ipt *goipt.IPTables, cs chainSpec) error {
	lines, err := ipt.List(cs.table, cs.hook)
	if err != nil {
		return fmt.Errorf("list %s %s: %w", cs.table, cs.hook, err)
	}
	for _, l := range lines {
		if !isJump(cs, l) {
			continue
		}
		spec, err := SplitRule(strings.TrimPrefix(l, "-A "+cs.hook+" "))
		if err != nil {
			return fmt.Errorf("jump rule %q: %w", l, err)
		}
		if err := ipt.DeleteIfExists(cs.table, cs.hook, spec...); err != nil {
			return fmt.Errorf("delete jump %q: %w", l, err)
		}
	}
	return nil
}

// SplitRule splits a rule as `iptables -S` prints it into arguments: words are
// separated by spaces; a double-quoted word may contain spaces and \" or \\.
func SplitRule(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == '"':
			quoted = !quoted
			inWord = true
		case c == ' ' && !quoted:
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote")
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
