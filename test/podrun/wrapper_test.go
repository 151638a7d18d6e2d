package podrun_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
	"github.com/ovn-egressip/ovn-egressip/test/repo"
)

// TestIPTablesWrapperChoosesBackend runs the node image's iptables wrapper (contrib/image/iptables-wrapper, called
// as "iptables") in network namespaces prepared as hosts are, and checks the backend it picks and keeps.
func TestIPTablesWrapperChoosesBackend(t *testing.T) {
	hostnet.RequireRoot(t)
	for _, bin := range []string{"xtables-legacy-multi", "xtables-nft-multi"} {
		if _, err := os.Stat("/usr/sbin/" + bin); err != nil {
			t.Skipf("/usr/sbin/%s missing (Debian iptables)", bin)
		}
	}
	wrapper := filepath.Join(repo.Root(), "contrib", "image", "iptables-wrapper")
	cases := []struct {
		name, want string
		env        []string
		setup      []string
	}{
		{name: "nothing", want: "nf_tables"},
		{name: "kubelet-hint-legacy", want: "legacy", setup: []string{"iptables-legacy -t mangle -N KUBE-IPTABLES-HINT",
			"iptables-nft -t nat -A POSTROUTING -j MASQUERADE", "iptables-nft -t nat -A POSTROUTING -j ACCEPT"}},
		{name: "kubelet-hint-nft", want: "nf_tables", setup: []string{"iptables-nft -t mangle -N KUBE-IPTABLES-HINT",
			"iptables-legacy -t nat -A POSTROUTING -j MASQUERADE"}},
		{name: "more-legacy-rules", want: "legacy", setup: []string{"iptables-legacy -t nat -A POSTROUTING -j MASQUERADE",
			"ip6tables-legacy -t nat -A POSTROUTING -j MASQUERADE", "iptables-nft -t nat -A POSTROUTING -j ACCEPT"}},
		{name: "override", want: "legacy", env: []string{"OVN_EGRESSIP_IPTABLES_BACKEND=legacy"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := hostnet.NewNS(t, "ipt")
			for _, s := range c.setup {
				ns.Exec(t, strings.Fields(s)...)
			}
			dir := t.TempDir()
			link := filepath.Join(dir, "iptables")
			if err := os.Symlink(wrapper, link); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(dir, "backend")
			for i := 0; i < 2; i++ { // the second call reads the kept choice
				cmd := exec.Command("ip", "netns", "exec", ns.Name, link, "-V")
				cmd.Env = append(append(os.Environ(), "OVN_EGRESSIP_IPTABLES_STATE="+state), c.env...)
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("iptables -V: %v: %s", err, out)
				}
				if !strings.Contains(string(out), "("+c.want+")") {
					t.Fatalf("call %d: iptables -V = %q, want the %s backend", i+1, strings.TrimSpace(string(out)), c.want)
				}
			}
			if kept, err := os.ReadFile(state); err != nil || len(kept) == 0 {
				t.Errorf("no choice kept in %s (%v)", state, err)
			}
		})
	}
}
