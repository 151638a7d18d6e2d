// Package iptables keeps the nat chain OVN-KUBE-EGRESSIP (IPv4 and IPv6) equal to
// a desired list of SNAT rules, and its jump from POSTROUTING in first position
// (so it precedes any MASQUERADE). The chain is ours entirely: it is rendered whole
// and, when what the kernel holds differs, replaced in one iptables-restore
// --noflush transaction that flushes and refills only this chain. Reads, the chain
// itself and the jump go through go-iptables. Nothing outside the chain and its
// jump rule is ever touched. Works with iptables-nft and iptables-legacy: the
// binaries are whatever paths Config names (default: iptables/ip6tables on PATH).
package iptables

import (
	"bytes"
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
	// JumpComment marks the POSTROUTING rule that jumps to Chain.
	JumpComment = "ovn-egressip"
	table       = "nat"
	postrouting = "POSTROUTING"
)

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

func jumpSpec() []string {
	return []string{"-m", "comment", "--comment", JumpComment, "-j", Chain}
}

// Sync makes both families' chains hold exactly the rules (each rule goes to the
// family of its pod IP). A family with no rule has neither chain nor jump.
func (s *Syncer) Sync(rules []hostegress.SNAT) error {
	var errs []string
	for i, f := range s.fam {
		if err := s.syncFamily(f, Render(rules, i == 0)); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func (s *Syncer) syncFamily(f *family, want []string) error {
	ipt, err := f.get()
	if err != nil {
		if len(want) == 0 {
			return nil // no binary and nothing to program: nothing of ours can exist either.
		}
		return err
	}
	exists, err := ipt.ChainExists(table, Chain)
	if err != nil {
		return fmt.Errorf("%s: check chain %s: %w", f.path, Chain, err)
	}
	if len(want) == 0 {
		if !exists {
			return nil
		}
		if err := s.removeJumps(ipt); err != nil {
			return fmt.Errorf("%s: %w", f.path, err)
		}
		if err := ipt.ClearAndDeleteChain(table, Chain); err != nil {
			return fmt.Errorf("%s: delete chain %s: %w", f.path, Chain, err)
		}
		s.Stats.ChainsRemoved++
		return nil
	}
	var have []string
	if exists {
		lines, err := ipt.List(table, Chain)
		if err != nil {
			return fmt.Errorf("%s: list chain %s: %w", f.path, Chain, err)
		}
		for _, l := range lines {
			if strings.HasPrefix(l, "-A ") {
				have = append(have, l)
			}
		}
	}
	// Rules before the jump: the chain is complete before traffic can reach it.
	if !equal(have, want) {
		if err := f.apply(want); err != nil {
			return err
		}
		s.Stats.Restores++
	}
	return s.ensureJumpFirst(ipt)
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
func (f *family) apply(want []string) error {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "*%s\n:%s - [0:0]\n", table, Chain)
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

func isJump(line string) bool {
	return strings.HasPrefix(line, "-A "+postrouting+" ") && strings.HasSuffix(line, "-j "+Chain)
}

// ensureJumpFirst makes our jump the first rule of POSTROUTING, exactly once.
func (s *Syncer) ensureJumpFirst(ipt *goipt.IPTables) error {
	lines, err := ipt.List(table, postrouting)
	if err != nil {
		return fmt.Errorf("list %s: %w", postrouting, err)
	}
	var rules []string
	for _, l := range lines {
		if strings.HasPrefix(l, "-A ") {
			rules = append(rules, l)
		}
	}
	count := 0
	for _, l := range rules {
		if isJump(l) {
			count++
		}
	}
	if count == 1 && isJump(rules[0]) {
		return nil
	}
	if err := s.removeJumps(ipt); err != nil {
		return err
	}
	if err := ipt.Insert(table, postrouting, 1, jumpSpec()...); err != nil {
		return fmt.Errorf("insert jump to %s: %w", Chain, err)
	}
	s.Stats.JumpFixes++
	return nil
}

// removeJumps deletes every POSTROUTING rule that jumps to our chain, whatever
// its comment, by its own rule spec (never by position, which others may shift).
func (s *Syncer) removeJumps(ipt *goipt.IPTables) error {
	lines, err := ipt.List(table, postrouting)
	if err != nil {
		return fmt.Errorf("list %s: %w", postrouting, err)
	}
	for _, l := range lines {
		if !isJump(l) {
			continue
		}
		spec, err := SplitRule(strings.TrimPrefix(l, "-A "+postrouting+" "))
		if err != nil {
			return fmt.Errorf("jump rule %q: %w", l, err)
		}
		if err := ipt.DeleteIfExists(table, postrouting, spec...); err != nil {
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
