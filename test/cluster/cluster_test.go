package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// TestLocalCluster brings the whole cluster up in each gateway mode and IP family and checks it with real packets
// (of every family), then takes it down and checks that nothing of it is left. Root only (CI runs as root).
func TestLocalCluster(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the local cluster needs root (network namespaces, OVS, iptables)")
	}
	// Every family in one mode at least (about 10 s each; test/e2e brings up every mode x family combination);
	// all six with E2E_MATRIX=full (make test-matrix).
	type combo struct {
		mode   gwmode.Mode
		family string
	}
	combos := []combo{{gwmode.Shared, FamilyIPv4}, {gwmode.Local, FamilyIPv4}, {gwmode.Shared, FamilyDual}, {gwmode.Local, FamilyIPv6}}
	if os.Getenv("E2E_MATRIX") == "full" {
		combos = append(combos, combo{gwmode.Local, FamilyDual}, combo{gwmode.Shared, FamilyIPv6})
	}
	for _, tc := range combos {
		t.Run(string(tc.mode)+"/"+tc.family, func(t *testing.T) { testClusterMode(t, tc.mode, tc.family) })
	}
}

func testClusterMode(t *testing.T, mode gwmode.Mode, family string) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, cfg := upInTemp(ctx, t, "oeip-cluster-", Config{Nodes: 3, GatewayMode: mode, IPFamily: family, Logf: t.Logf})
	state := cfg.StateDir

	// Up again is a no-op on a healthy cluster with the same config.
	checkUpAgainKeeps(ctx, t, cfg, paths{dir: state}.pidfile("kube-apiserver"), "kube-apiserver")

	// kubectl sees the Ready nodes; the EgressIP CRD is served.
	out, err := exec.Command(c.Kubectl(), "--kubeconfig", c.Kubeconfig(), "get", "nodes", "--no-headers").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get nodes: %v: %s", err, out)
	}
	for _, n := range []string{"node1", "node2", "node3"} {
		if !strings.Contains(string(out), n+" ") || strings.Count(string(out), " Ready ") != 3 {
			t.Errorf("kubectl get nodes:\n%s\nwant %s and 3 Ready nodes", out, n)
		}
	}
	eip := exec.Command(c.Kubectl(), "--kubeconfig", c.Kubeconfig(), "apply", "-f", "-")
	eip.Stdin = strings.NewReader(`{"apiVersion":"k8s.ovn.org/v1","kind":"EgressIP","metadata":{"name":"egressip-prod"},
"spec":{"egressIPs":["172.18.0.33"],"namespaceSelector":{"matchLabels":{"environment":"prod"}}}}`)
	if out, err := eip.CombinedOutput(); err != nil {
		t.Errorf("kubectl apply EgressIP: %v: %s", err, out)
	}

	// Pods on two nodes: the echo server sees the node's egress source; pod-to-pod across nodes works.
	a, err := c.CreatePod(ctx, PodSpec{Namespace: "prod", Name: "web-a", Node: "node1", Labels: map[string]string{"app": "web"}})
	if err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	b, err := c.CreatePod(ctx, PodSpec{Namespace: "prod", Name: "web-b", Node: "node2"})
	if err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	pod, err := c.Client().CoreV1().Pods("prod").Get(ctx, "web-a", metav1.GetOptions{})
	if err != nil || pod.Status.Phase != "Running" || pod.Status.PodIP != a.IP.String() || pod.Labels["app"] != "web" ||
		len(pod.Status.PodIPs) != len(c.Families()) || len(a.IPs) != len(c.Families()) {
		t.Errorf("pod web-a = %+v, %v; want Running with IPs %v", pod.Status, err, a.IPs)
	}
	node, err := c.Client().CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
	if err != nil || len(node.Status.Addresses) != len(c.Families())+1 {
		t.Errorf("node2 status.addresses %v (%v), want one InternalIP per family", node.Status.Addresses, err)
	}
	for i, fam := range c.Families() {
		if FamilyOf(a.IPs[i]) != fam {
			t.Errorf("web-a IP %d is %s, want IPv%d", i, a.IPs[i], fam)
		}
		for _, tc := range []struct {
			p     *Pod
			proto string
		}{{a, "tcp"}, {b, "udp"}} {
			want, err := c.EgressSourceFamily(tc.p.Node, fam)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.RequestFamily(ctx, tc.p.Namespace, tc.p.Name, fam, tc.proto, 3*time.Second)
			if err != nil || got != want {
				t.Errorf("%s %s IPv%d -> echo server saw %s (%v), want %s (%s mode)", tc.p.Name, tc.proto, fam, got, err, want, mode)
			}
		}
		if out, err := c.Exec(ctx, "prod", "web-a", "ping", "-c1", "-W2", b.IPs[i].String()); err != nil {
			t.Errorf("pod-to-pod web-a -> web-b (%s): %v: %s", b.IPs[i], err, out)
		}
	}

	// The root namespace reaches every management port (the master's health checks); node netns reach the apiserver.
	for _, n := range c.Nodes() {
		for _, f := range n.Families {
			if out, err := exec.Command("ping", "-c1", "-W2", f.MgmtIP.String()).CombinedOutput(); err != nil {
				t.Errorf("root ns -> %s management IP %s: %v: %s", n.Name, f.MgmtIP, err, out)
			}
		}
	}
	conn, err := dialInNetns(NodeNetnsName("node3"), "tcp", strings.TrimPrefix(c.st.APIServer, "https://"), 2*time.Second)
	if err != nil {
		t.Errorf("node3 netns -> kube-apiserver: %v", err)
	} else {
		conn.Close()
	}

	// DeletePod removes the object, the namespace and the port; the address is reused.
	if err := c.DeletePod(ctx, "prod", "web-a"); err != nil {
		t.Fatalf("DeletePod: %v", err)
	}
	if _, err := os.Stat("/run/netns/" + a.Netns); err == nil {
		t.Errorf("netns %s still there after DeletePod", a.Netns)
	}
	if _, err := c.Client().CoreV1().Pods("prod").Get(ctx, "web-a", metav1.GetOptions{}); !errors.IsNotFound(err) {
		t.Errorf("pod web-a still there after DeletePod: %v", err)
	}
	a2, err := c.CreatePod(ctx, PodSpec{Namespace: "prod", Name: "web-c", Node: "node1"})
	if err != nil {
		t.Fatalf("CreatePod after delete: %v", err)
	}
	if a2.IP != a.IP {
		t.Errorf("web-c got %s, want the freed %s", a2.IP, a.IP)
	}

	// Down leaves no process, netns, veth, bridge or file of ours.
	var pids []int
	for _, d := range daemons {
		if pid, err := readPid(paths{dir: state}.pidfile(d)); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) != len(daemons) {
		t.Errorf("found %d of %d daemon pidfiles", len(pids), len(daemons))
	}
	t0 := time.Now()
	if err := Down(ctx, state); err != nil {
		t.Fatalf("Down: %v", err)
	}
	t.Logf("cluster down in %.1fs", time.Since(t0).Seconds())
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d still alive after Down", pid)
		}
	}
	checkNothingLeft(t, state)
}

// upInTemp brings the cluster of cfg up in a new state directory (short: unix socket paths are limited to 107
// bytes), logs how long Up took, and returns it with cfg as used. The test's clean-up closes it, tears it down and
// removes the directory.
func upInTemp(ctx context.Context, t *testing.T, prefix string, cfg Config) (*Cluster, Config) {
	t.Helper()
	state, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Down(context.Background(), state); err != nil {
			t.Logf("clean-up: %v", err)
		}
		os.RemoveAll(state)
	})
	cfg.StateDir = state
	t0 := time.Now()
	c, err := Up(ctx, cfg)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(c.Close)
	t.Logf("cluster up in %.1fs", time.Since(t0).Seconds())
	return c, cfg
}

// checkUpAgainKeeps: Up again with cfg (the healthy cluster's) is a no-op: the daemon of pidfile keeps running.
func checkUpAgainKeeps(ctx context.Context, t *testing.T, cfg Config, pidfile, daemon string) {
	t.Helper()
	before, err := readPid(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := Up(ctx, cfg)
	if err != nil {
		t.Fatalf("second Up: %v", err)
	}
	c2.Close()
	if pid, err := readPid(pidfile); err != nil || pid != before {
		t.Errorf("second Up restarted %s (pid %d -> %d, %v)", daemon, before, pid, err)
	}
}

// checkNothingLeft fails the test for what Down left: our network namespaces and interfaces, the OVS interfaces
// (and the extra ones), files in state.
func checkNothingLeft(t *testing.T, state string, extra ...string) {
	t.Helper()
	if ns, err := ourNetns(); err != nil || len(ns) > 0 {
		t.Errorf("network namespaces left: %v (%v)", ns, err)
	}
	if l, err := ourLinks(); err != nil || len(l) > 0 {
		t.Errorf("interfaces left: %v (%v)", l, err)
	}
	for _, l := range append([]string{BrInt, BrEx, "ovs-netdev"}, extra...) {
		if linkExists(l) {
			t.Errorf("interface %s left", l)
		}
	}
	if entries, err := filepath.Glob(filepath.Join(state, "*")); err != nil || len(entries) > 0 {
		t.Errorf("files left in %s: %v (%v)", state, entries, err)
	}
}
