package config

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// load runs Load over args as ovnkube would parse them.
// wantLoadError: loading args fails with a one-line error that contains want.
func wantLoadError(t *testing.T, args []string, want string) {
	t.Helper()
	_, err := load(t, args...)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want it to contain %q", err, want)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Fatalf("error is not one line: %q", err)
	}
}

func load(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	var cfg *Config
	var loadErr error
	app := &cli.App{Flags: Flags(), Action: func(c *cli.Context) error {
		cfg, loadErr = Load(c)
		return nil
	}}
	if err := app.Run(NormalizeArgs(append([]string{"ovnkube"}, args...))); err != nil {
		t.Fatalf("flag parsing failed: %v", err)
	}
	return cfg, loadErr
}

func kubeconfig(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(p, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadErrorsNameTheFlag(t *testing.T) {
	kc := kubeconfig(t)
	base := []string{"--init-master", "--egress-ip-enable", "--kubeconfig", kc, "--nb-address", "unix:/run/nb.sock"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad gateway mode", []string{"--gateway-mode", "bogus"}, `invalid --gateway-mode: gateway mode "bogus" is neither "shared" nor "local"`},
		{"bad cluster subnet", []string{"--cluster-subnets", "10.244.0.0/33"}, `invalid --cluster-subnets "10.244.0.0/33"`},
		{"host bits", []string{"--join-subnet", "100.64.0.1/16"}, `invalid --join-subnet "100.64.0.1/16"`},
		{"bad nb scheme", []string{"--nb-address", "http://x"}, `invalid --nb-address "http://x"`},
		{"bad nb port", []string{"--nb-address", "tcp:1.2.3.4:xx"}, `invalid --nb-address "tcp:1.2.3.4:xx"`},
		{"missing kubeconfig file", []string{"--kubeconfig", "/nonexistent/kc"}, `invalid --kubeconfig "/nonexistent/kc"`},
		{"bad health port", []string{"--egressip-node-healthcheck-port", "70000"}, `invalid --egressip-node-healthcheck-port 70000`},
		{"negative release linger", []string{"--egressip-node-release-linger", "-1s"}, `invalid --egressip-node-release-linger -1s`},
		{"zero API QPS", []string{"--kube-api-qps", "0"}, `invalid --kube-api-qps 0`},
		{"zero API burst", []string{"--kube-api-burst", "0"}, `invalid --kube-api-burst 0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantLoadError(t, append(append([]string{}, base...), tc.args...), tc.want)
		})
	}
}

func TestLoadNothingToDoAndMissingNB(t *testing.T) {
	kc := kubeconfig(t)
	if _, err := load(t, "--kubeconfig", kc); err == nil || !strings.Contains(err.Error(), "--init-master") {
		t.Fatalf("want a 'nothing to do' error, got %v", err)
	}
	if _, err := load(t, "--kubeconfig", kc, "--init-master", "--egress-ip-enable"); err == nil || !strings.Contains(err.Error(), "missing --nb-address") {
		t.Fatalf("want a missing --nb-address error, got %v", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := load(t, "--init-node", "n1"); err == nil || !strings.Contains(err.Error(), "missing --kubeconfig") {
		t.Fatalf("want a missing --kubeconfig error, got %v", err)
	}
}

func TestConfigFileAndFlagsWin(t *testing.T) {
	kc := kubeconfig(t)
	ini := filepath.Join(t.TempDir(), "ovnkube.conf")
	content := `[default]
cluster-subnets = 10.128.0.0/14/23,fd00:10:128::/48/64

[kubernetes]
kubeconfig = ` + kc + `

[ovnnorth]
address = tcp:10.0.0.1:6641,tcp:10.0.0.2:6641

[gateway]
mode = local
interface = eth1

[logging]
loglevel = 2

[ovnkubernetesfeature]
enable-egress-ip = true
egressip-reachability-total-timeout = 2
egressip-node-healthcheck-port = 0
`
	if err := os.WriteFile(ini, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := load(t, "--config-file", ini, "--init-master", "--gateway-interface", "eth9")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GatewayMode != gwmode.Local || cfg.GatewayInterface != "eth9" || !cfg.EgressIPEnable || cfg.LogLevel != 2 ||
		cfg.HealthCheckPort != 0 || cfg.ReachabilityTotalTimeout != 2*time.Second || cfg.Kubeconfig != kc ||
		len(cfg.NBAddresses) != 2 || len(cfg.ClusterSubnets) != 2 || cfg.ClusterSubnets[0].String() != "10.128.0.0/14" ||
		cfg.JoinSubnets[0].String() != "100.64.0.0/16" {
		t.Fatalf("unexpected config: %+v", cfg)
	}
	cfg, err = load(t, "--config-file", ini, "--init-master", "--gateway-mode", "shared", "--egressip-node-healthcheck-port", "9107")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GatewayMode != gwmode.Shared || cfg.HealthCheckPort != 9107 {
		t.Fatalf("flags must win over the file: %+v", cfg)
	}
	bad := filepath.Join(t.TempDir(), "bad.conf")
	if err := os.WriteFile(bad, []byte("[gateway]\nmode = shared\n[ovnkubernetesfeature]\negressip-reachability-total-timeout = soon\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := load(t, "--config-file", bad, "--init-master", "--kubeconfig", kc); err == nil || !strings.Contains(err.Error(), "egressip-reachability-total-timeout") {
		t.Fatalf("want an error naming the file key, got %v", err)
	}
}

// The gateway mode is read from the flag, else from [gateway] mode, else "shared";
// a value that is not a mode is rejected with the same message from either.
func TestGatewayModeFromFlagOrFile(t *testing.T) {
	kc := kubeconfig(t)
	conf := func(mode string) string {
		p := filepath.Join(t.TempDir(), "ovnkube.conf")
		if err := os.WriteFile(p, []byte("[gateway]\nmode = "+mode+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := []string{"--init-node", "n1", "--kubeconfig", kc}
	for _, tc := range []struct {
		name string
		args []string
		want gwmode.Mode
		err  string
	}{
		{"default", nil, gwmode.Shared, ""},
		{"flag local", []string{"--gateway-mode", "local"}, gwmode.Local, ""},
		{"file local", []string{"--config-file", conf("local")}, gwmode.Local, ""},
		{"flag wins", []string{"--config-file", conf("local"), "--gateway-mode", "shared"}, gwmode.Shared, ""},
		{"flag bogus", []string{"--gateway-mode", "Local"}, "", `invalid --gateway-mode: gateway mode "Local" is neither "shared" nor "local"`},
		{"file bogus", []string{"--config-file", conf("bogus")}, "", `invalid --gateway-mode: gateway mode "bogus" is neither "shared" nor "local"`},
		{"flag empty", []string{"--gateway-mode", ""}, "", `invalid --gateway-mode: gateway mode "" is neither "shared" nor "local"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(t, append(append([]string{}, base...), tc.args...)...)
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || cfg.GatewayMode != tc.want {
				t.Fatalf("got %v, %v; want %q", cfg, err, tc.want)
			}
		})
	}
}

func TestWaitNBReachable(t *testing.T) {
	lis, err := net.Listen("unix", filepath.Join(t.TempDir(), "nb.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	if err := WaitNBReachable(context.Background(), []string{"tcp:127.0.0.1:1", "unix:" + lis.Addr().String()}, nil, time.Second); err != nil {
		t.Fatalf("one reachable address is enough: %v", err)
	}
	err = WaitNBReachable(context.Background(), []string{"unix:/nonexistent/nb.sock"}, nil, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "--nb-address unreachable") || !strings.Contains(err.Error(), "/nonexistent/nb.sock") {
		t.Fatalf("want an error naming the flag and address, got %v", err)
	}
}

// TestShippedConfigMapParses loads the ovnkube.conf shipped in dist/manifests.
func TestShippedConfigMapParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "dist", "manifests", "ovnkube-egressip.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var conf []string
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case strings.Contains(l, "ovnkube.conf: |"):
			in = true
		case in && (strings.HasPrefix(l, "    ") || l == ""):
			conf = append(conf, strings.TrimPrefix(l, "    "))
		case in:
			in = false
		}
	}
	if len(conf) == 0 {
		t.Fatal("no ovnkube.conf in the ConfigMap")
	}
	ini := filepath.Join(t.TempDir(), "ovnkube.conf")
	if err := os.WriteFile(ini, []byte(strings.Join(conf, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1") // in-cluster, as in the Deployment
	cfg, err := load(t, "--config-file", ini, "--init-master")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.EgressIPEnable || cfg.GatewayMode != gwmode.Shared || len(cfg.NBAddresses) != 1 || cfg.HealthCheckPort != 9107 {
		t.Fatalf("shipped config read as %+v", cfg)
	}
}

// TestInitMasterForms: upstream's "--init-master NODE" and "--enable-egress-ip",
// and this project's bare "--init-master" and "--egress-ip-enable", all parse.
func TestInitMasterForms(t *testing.T) {
	kc := kubeconfig(t)
	nb := []string{"--kubeconfig", kc, "--nb-address", "unix:/run/nb.sock"}
	for _, tc := range []struct {
		args       []string
		master     bool
		node, init string
		egress     bool
	}{
		{[]string{"--init-master", "node1", "--enable-egress-ip"}, true, "node1", "", true},
		{[]string{"--init-master=node1", "--init-node", "node1", "--enable-egress-ip"}, true, "node1", "node1", true},
		{[]string{"--init-master", "--egress-ip-enable"}, true, "", "", true},
		{[]string{"--egress-ip-enable", "--init-master"}, true, "", "", true},
		{[]string{"-init-master", "-enable-egress-ip"}, true, "", "", true},
		{[]string{"--init-master=false", "--init-node", "node2"}, false, "", "node2", false},
	} {
		cfg, err := load(t, append(tc.args, nb...)...)
		if err != nil {
			t.Errorf("%v: %v", tc.args, err)
			continue
		}
		if cfg.InitMaster != tc.master || cfg.MasterNode != tc.node || cfg.InitNode != tc.init || cfg.EgressIPEnable != tc.egress {
			t.Errorf("%v: master=%v node=%q init-node=%q egress=%v, want %v %q %q %v", tc.args,
				cfg.InitMaster, cfg.MasterNode, cfg.InitNode, cfg.EgressIPEnable, tc.master, tc.node, tc.init, tc.egress)
		}
	}
}

// TestInterconnectRoles: --init-cluster-manager [NODE] needs no NB address; --init-ovnkube-controller NODE does
// (its zone's), goes with --init-node of the same node, and neither goes with --init-master.
func TestInterconnectRoles(t *testing.T) {
	kc := kubeconfig(t)
	cfg, err := load(t, "--init-cluster-manager", "--enable-egress-ip", "--kubeconfig", kc)
	if err != nil || !cfg.InitClusterManager || cfg.ClusterManagerNode != "" {
		t.Fatalf("cluster manager without node: %+v %v", cfg, err)
	}
	cfg, err = load(t, "--init-cluster-manager", "cp1", "--enable-egress-ip", "--kubeconfig", kc)
	if err != nil || !cfg.InitClusterManager || cfg.ClusterManagerNode != "cp1" {
		t.Fatalf("cluster manager on cp1: %+v %v", cfg, err)
	}
	cfg, err = load(t, "--init-ovnkube-controller", "node1", "--init-node", "node1", "--enable-egress-ip", "--kubeconfig", kc,
		"--nb-address", "unix:/var/run/ovn/ovnnb_db.sock")
	if err != nil || cfg.InitZone != "node1" || cfg.InitNode != "node1" {
		t.Fatalf("zone controller + node: %+v %v", cfg, err)
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--init-ovnkube-controller", "node1", "--enable-egress-ip"}, "missing --nb-address"},
		{[]string{"--init-ovnkube-controller", "node1", "--init-node", "node2", "--enable-egress-ip", "--nb-address", "unix:/x"}, "its own node"},
		{[]string{"--init-master", "--init-cluster-manager", "--enable-egress-ip", "--nb-address", "unix:/x"}, "centralized layout"},
	} {
		_, err := load(t, append(tc.args, "--kubeconfig", kc)...)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%v: err %v, want %q", tc.args, err, tc.err)
		}
	}
}
