package iptables

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
)

var ma = netip.MustParseAddr

var rules = []hostegress.SNAT{
	{PodIP: ma("10.244.1.3"), EgressIPAddr: ma("172.18.0.50"), Link: "eth0", EgressIP: "prod"},
	{PodIP: ma("10.244.2.4"), EgressIPAddr: ma("172.18.0.50"), Link: "eth0", EgressIP: "prod"},
	{PodIP: ma("fd00:10:244:1::3"), EgressIPAddr: ma("fd00:18::50"), Link: "eth0", EgressIP: "prod"},
}

func TestRender(t *testing.T) {
	got4 := Render(rules, true)
	want4 := []string{
		`-A OVN-KUBE-EGRESSIP -s 10.244.1.3/32 -o eth0 -m comment --comment "ovn-egressip eip=prod" -j SNAT --to-source 172.18.0.50`,
		`-A OVN-KUBE-EGRESSIP -s 10.244.2.4/32 -o eth0 -m comment --comment "ovn-egressip eip=prod" -j SNAT --to-source 172.18.0.50`,
	}
	if !reflect.DeepEqual(got4, want4) {
		t.Fatalf("v4:\n%q", got4)
	}
	got6 := Render(rules, false)
	if len(got6) != 1 || got6[0] != `-A OVN-KUBE-EGRESSIP -s fd00:10:244:1::3/128 -o eth0 -m comment --comment "ovn-egressip eip=prod" -j SNAT --to-source fd00:18::50` {
		t.Fatalf("v6: %q", got6)
	}
}

func TestSplitRule(t *testing.T) {
	got, err := SplitRule(`-s 10.0.0.1/32 -m comment --comment "a \"b\" c" -j X`)
	want := []string{"-s", "10.0.0.1/32", "-m", "comment", "--comment", `a "b" c`, "-j", "X"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := SplitRule(`--comment "open`); err == nil {
		t.Fatal("unterminated quote accepted")
	}
}

// TestSyncInNetns runs Sync against the real kernel in a throwaway namespace,
// under both iptables backends.
func TestSyncInNetns(t *testing.T) {
	inEachBackend(t, "ipt-", func(t *testing.T, ns *hostnet.NS, ipt, ip6t string, s *Syncer) {
		ns.Exec(t, ipt, "-t", "nat", "-A", "POSTROUTING", "-s", "10.244.0.0/16", "-o", "eth0", "-j", "MASQUERADE")
		ns.Exec(t, ipt, "-t", "nat", "-A", "POSTROUTING", "-s", "10.99.0.0/16", "-j", "SNAT", "--to-source", "172.18.0.10")
		ns.Exec(t, ip6t, "-t", "nat", "-A", "POSTROUTING", "-s", "fd00:99::/64", "-j", "MASQUERADE")
		foreign4 := ns.Exec(t, ipt+"-save", "-t", "filter")
		sync := func(r []hostegress.SNAT) {
			t.Helper()
			if err := ns.Do(func() error { return s.Sync(r) }); err != nil {
				t.Fatal(err)
			}
		}
		postrouting := func(cmd string) []string { return ruleLines(t, ns, cmd, "-t", "nat", "-S", "POSTROUTING") }

		sync(rules)
		pr := postrouting(ipt)
		if pr[1] != `-A POSTROUTING -m comment --comment ovn-egressip -j OVN-KUBE-EGRESSIP` || len(pr) != 4 {
			t.Fatalf("jump not first or foreign rules changed:\n%s", strings.Join(pr, "\n"))
		}
		if got := strings.TrimSpace(ns.Exec(t, ipt, "-t", "nat", "-S", Chain)); !strings.Contains(got, Render(rules, true)[1]) {
			t.Fatalf("chain:\n%s", got)
		}
		if pr6 := postrouting(ip6t); len(pr6) != 3 || !strings.HasSuffix(pr6[1], "-j "+Chain) {
			t.Fatalf("ip6tables POSTROUTING:\n%s", strings.Join(pr6, "\n"))
		}
		if s.Stats.Restores != 2 || s.Stats.JumpFixes != 2 {
			t.Fatalf("stats after first sync: %+v", s.Stats)
		}

		sync(rules) // unchanged: no write at all
		if s.Stats.Restores != 2 || s.Stats.JumpFixes != 2 {
			t.Fatalf("an unchanged sync wrote something: %+v", s.Stats)
		}

		// Drift: a rule deleted by hand, a stranger rule added to our chain, our
		// jump moved to the end.
		ns.Exec(t, ipt, "-t", "nat", "-D", Chain, "-s", "10.244.1.3/32", "-o", "eth0", "-m", "comment",
			"--comment", "ovn-egressip eip=prod", "-j", "SNAT", "--to-source", "172.18.0.50")
		ns.Exec(t, ipt, "-t", "nat", "-A", Chain, "-s", "10.1.1.1", "-j", "SNAT", "--to-source", "1.1.1.1")
		ns.Exec(t, ipt, "-t", "nat", "-D", "POSTROUTING", "1")
		ns.Exec(t, ipt, "-t", "nat", "-A", "POSTROUTING", "-j", Chain)
		sync(rules)
		chain := ruleLines(t, ns, ipt, "-t", "nat", "-S", Chain)
		if !reflect.DeepEqual(chain[1:], Render(rules, true)) {
			t.Fatalf("chain not repaired:\n%s", strings.Join(chain, "\n"))
		}
		if pr := postrouting(ipt); len(pr) != 4 || !strings.HasSuffix(pr[1], "-j "+Chain) {
			t.Fatalf("jump not repaired:\n%s", strings.Join(pr, "\n"))
		}

		// Only IPv6 rules left, then none: chains and jumps go, foreign rules stay.
		sync(rules[2:])
		if _, err := ns.TryExec(ipt, "-t", "nat", "-S", Chain); err == nil {
			t.Fatal("IPv4 chain still exists with no IPv4 rule")
		}
		sync(nil)
		for _, bin := range []string{ipt, ip6t} {
			if _, err := ns.TryExec(bin, "-t", "nat", "-S", Chain); err == nil {
				t.Fatalf("%s: chain still exists", bin)
			}
		}
		if pr := postrouting(ipt); len(pr) != 3 || !strings.Contains(pr[1], "MASQUERADE") || !strings.Contains(pr[2], "10.99.0.0/16") {
			t.Fatalf("foreign IPv4 rules changed:\n%s", strings.Join(pr, "\n"))
		}
		if pr6 := postrouting(ip6t); len(pr6) != 2 || !strings.Contains(pr6[1], "MASQUERADE") {
			t.Fatalf("foreign IPv6 rules changed:\n%s", strings.Join(pr6, "\n"))
		}
		if got := ns.Exec(t, ipt+"-save", "-t", "filter"); stripComments(got) != stripComments(foreign4) {
			t.Fatalf("filter table changed:\n%s", got)
		}
	})
}

// inEachBackend runs f as a subtest per iptables backend (legacy, nft), as root, in a new network namespace named
// prefix+backend, with the paths of that backend's iptables and ip6tables and a Syncer that uses them.
func inEachBackend(t *testing.T, prefix string, f func(t *testing.T, ns *hostnet.NS, ipt, ip6t string, s *Syncer)) {
	hostnet.RequireRoot(t)
	for _, backend := range []string{"legacy", "nft"} {
		t.Run(backend, func(t *testing.T) {
			ns := hostnet.NewNS(t, prefix+backend)
			ipt, ip6t := "/usr/sbin/iptables-"+backend, "/usr/sbin/ip6tables-"+backend
			f(t, ns, ipt, ip6t, New(Config{IPTablesPath: ipt, IP6TablesPath: ip6t}))
		})
	}
}

// ruleLines runs bin with args (a -S listing) in ns and returns its output lines.
func ruleLines(t *testing.T, ns *hostnet.NS, bin string, args ...string) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(ns.Exec(t, append([]string{bin}, args...)...)), "\n")
}

func stripComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// BenchmarkSync measures one Sync of 1000 IPv4 SNAT rules in a throwaway namespace:
// "rewrite" alternates between two rule sets (every Sync replaces the chain),
// "unchanged" re-applies the same set (a list and a compare, no write).
func BenchmarkSync(b *testing.B) {
	hostnet.RequireRoot(b)
	mk := func(eip string) []hostegress.SNAT {
		var out []hostegress.SNAT
		for i := 0; i < 1000; i++ {
			out = append(out, hostegress.SNAT{PodIP: netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i%250 + 2)}),
				EgressIPAddr: ma(eip), Link: "eth0", EgressIP: "bench"})
		}
		return out
	}
	a, c := mk("172.18.0.50"), mk("172.18.0.51")
	for _, backend := range []string{"legacy", "nft"} {
		ns := hostnet.NewNS(b, "bench-"+backend)
		s := New(Config{IPTablesPath: "/usr/sbin/iptables-" + backend, IP6TablesPath: "/usr/sbin/ip6tables-" + backend})
		b.Run(backend+"/rewrite", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				r := a
				if i%2 == 1 {
					r = c
				}
				if err := ns.Do(func() error { return s.Sync(r) }); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(backend+"/unchanged", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if err := ns.Do(func() error { return s.Sync(a) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

var guarded = []hostegress.Address{
	{IP: ma("172.18.0.50"), LinkIndex: 2, Link: "eth0", EgressIP: "prod"},
	{IP: ma("fd00:18::50"), LinkIndex: 2, Link: "eth0", EgressIP: "prod"},
}

func TestRenderGuard(t *testing.T) {
	want4 := []string{
		`-A OVN-KUBE-EGRESSIP-GUARD -d 172.18.0.50/32 -p tcp -m tcp ! --tcp-flags FIN,SYN,RST,ACK SYN -m conntrack --ctstate INVALID,NEW -m comment --comment "ovn-egressip eip=prod" -j DROP`,
		`-A OVN-KUBE-EGRESSIP-GUARD -d 172.18.0.50/32 -p udp -m conntrack --ctstate NEW -m comment --comment "ovn-egressip eip=prod" -j DROP`,
	}
	if got := RenderGuard(guarded, true); !reflect.DeepEqual(got, want4) {
		t.Fatalf("v4:\n%s", strings.Join(got, "\n"))
	}
	if got := RenderGuard(guarded, false); len(got) != 2 || !strings.HasPrefix(got[0], "-A OVN-KUBE-EGRESSIP-GUARD -d fd00:18::50/128 -p tcp") {
		t.Fatalf("v6:\n%s", strings.Join(got, "\n"))
	}
}

// TestSyncGuardInNetns: the filter chain is created with its jump first in INPUT,
// read back exactly as rendered (no rewrite when unchanged), repaired after drift,
// and removed with its jump when no address is held; foreign rules stay.
func TestSyncGuardInNetns(t *testing.T) {
	inEachBackend(t, "guard-", func(t *testing.T, ns *hostnet.NS, ipt, ip6t string, s *Syncer) {
		ns.Exec(t, ipt, "-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED", "-j", "ACCEPT")
		ns.Exec(t, ip6t, "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
		sync := func(a []hostegress.Address) {
			t.Helper()
			if err := ns.Do(func() error { return s.SyncGuard(a) }); err != nil {
				t.Fatal(err)
			}
		}
		input := func(bin string) []string { return ruleLines(t, ns, bin, "-S", "INPUT") }
		chain := func(bin string) []string { return ruleLines(t, ns, bin, "-S", GuardChain)[1:] }
		sync(guarded)
		for i, bin := range []string{ipt, ip6t} {
			in := input(bin)
			if len(in) != 3 || in[1] != "-A INPUT -m comment --comment ovn-egressip -j "+GuardChain {
				t.Fatalf("%s INPUT:\n%s", bin, strings.Join(in, "\n"))
			}
			if got := chain(bin); !reflect.DeepEqual(got, RenderGuard(guarded, i == 0)) {
				t.Fatalf("%s guard chain:\n%s", bin, strings.Join(got, "\n"))
			}
		}
		if s.Stats.Restores != 2 || s.Stats.JumpFixes != 2 {
			t.Fatalf("stats after first sync: %+v", s.Stats)
		}
		sync(guarded)
		if s.Stats.Restores != 2 || s.Stats.JumpFixes != 2 {
			t.Fatalf("an unchanged sync wrote something (the rendered form differs from what iptables prints): %+v", s.Stats)
		}
		ns.Exec(t, ipt, "-F", GuardChain)
		ns.Exec(t, ipt, "-D", "INPUT", "1")
		ns.Exec(t, ipt, "-A", "INPUT", "-j", GuardChain)
		sync(guarded)
		if got := chain(ipt); !reflect.DeepEqual(got, RenderGuard(guarded, true)) {
			t.Fatalf("guard chain not repaired:\n%s", strings.Join(got, "\n"))
		}
		if in := input(ipt); len(in) != 3 || !strings.HasSuffix(in[1], "-j "+GuardChain) {
			t.Fatalf("jump not repaired:\n%s", strings.Join(in, "\n"))
		}
		sync(nil)
		for _, bin := range []string{ipt, ip6t} {
			if _, err := ns.TryExec(bin, "-S", GuardChain); err == nil {
				t.Fatalf("%s: guard chain still exists", bin)
			}
			if in := input(bin); len(in) != 2 || !strings.Contains(in[1], "ACCEPT") {
				t.Fatalf("%s: foreign INPUT rules changed:\n%s", bin, strings.Join(in, "\n"))
			}
		}
	})
}
