package podrun_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/iptables"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/hostnet"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
	"github.com/ovn-egressip/ovn-egressip/test/podrun"
	"github.com/ovn-egressip/ovn-egressip/test/repo"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

const ns = "ovn-egressip"

// setup needs root, runc and the images of make image; it starts an API server with dist/manifests/ovnkube-egressip.yaml
// applied and returns the manifests and a runtime.
func setup(t *testing.T) (*apiserver.Env, kubernetes.Interface, *podrun.Manifests, *podrun.Runtime) {
	t.Helper()
	hostnet.RequireRoot(t)
	if _, err := exec.LookPath("runc"); err != nil {
		t.Skip("runc not installed (make install-deps)")
	}
	root := repo.Root()
	d := podrun.NeedDist(t, root, func(a string) { t.Skipf("%s missing: run make image first (make test does)", a) })
	m := d.Manifests
	env := apiserver.Start(t)
	env.ApplyManifests(t)
	cs := kubernetes.NewForConfigOrDie(env.Config)
	dir := t.TempDir()
	rt := &podrun.Runtime{Dir: dir, Images: d.Images, OCIImage: d.OCIImage, Kube: cs, CA: env.Config.CAData}
	t.Cleanup(func() {
		if t.Failed() {
			logs, err := filepath.Glob(filepath.Join(dir, "log", "*.log"))
			if err != nil {
				t.Logf("logs: %v", err)
			}
			for _, l := range logs {
				data, err := os.ReadFile(l)
				if err != nil {
					t.Logf("== %s: %v", filepath.Base(l), err)
					continue
				}
				t.Logf("== %s\n%s", filepath.Base(l), data)
			}
		}
		if err := podrun.Cleanup(dir); err != nil {
			t.Errorf("podrun clean-up: %v", err)
		}
	})
	return env, cs, m, rt
}

// setConfig changes keys of ovnkube.conf in the ConfigMap ovnkube-config in the API server, as an admin edits it.
func setConfig(t *testing.T, cs kubernetes.Interface, set map[string]string) {
	t.Helper()
	ctx := context.Background()
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "ovnkube-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["ovnkube.conf"] = podrun.SetINI(cm.Data["ovnkube.conf"], set)
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func apiHostPort(t *testing.T, env *apiserver.Env) (string, string) {
	u, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatalf("apiserver host %q: %v", env.Config.Host, err)
	}
	return u.Hostname(), u.Port()
}

// TestMasterImageTakesLease runs the master Deployment's pod from the static image (non-root, its ServiceAccount's
// token, the ConfigMap) in the host's network namespace: it must become ready (its readiness probe) and hold the
// Lease of the manifests under its own identity.
func TestMasterImageTakesLease(t *testing.T) {
	env, cs, m, rt := setup(t)
	nb := nbserver.Start(t)
	nbTCP := tcpToUnix(t, strings.TrimPrefix(nb.Addr, "unix:"))
	setConfig(t, cs, map[string]string{"ovnnorth.address": "tcp:" + nbTCP})
	w, err := m.Workload("Deployment", ns, "ovnkube-egressip-master")
	if err != nil {
		t.Fatal(err)
	}
	host, port := apiHostPort(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pod, err := rt.Start(ctx, w, podrun.Placement{PodName: "master-smoke", NodeName: "host", APIServerHost: host, APIServerPort: port})
	if err != nil {
		t.Fatal(err)
	}
	defer stopPod(t, pod)
	if err := pod.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	var lease *coordinationv1.Lease
	for {
		lease, err = cs.CoordinationV1().Leases(ns).Get(ctx, "ovn-egressip-master", metav1.GetOptions{})
		if err == nil && lease.Spec.HolderIdentity != nil {
			break
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no holder of Lease %s/ovn-egressip-master: %v", ns, err)
		case <-pod.Exited():
			t.Fatal("the master container exited")
		case <-time.After(100 * time.Millisecond):
		}
	}
	// hostname = pod name (its UTS namespace), pid 1 (its PID namespace).
	if got, want := *lease.Spec.HolderIdentity, "master-smoke_1"; got != want {
		t.Fatalf("Lease holder %q, want %q", got, want)
	}
	t.Logf("master container %s holds Lease %s/ovn-egressip-master", pod.ContainerIDs()[0], ns)
}

// forwardIntoNetns listens on listen inside ns and forwards each connection to target in the test's own namespace.
func forwardIntoNetns(t *testing.T, ns *hostnet.NS, listen, target string) {
	var l net.Listener
	if err := ns.Do(func() error {
		var err error
		l, err = net.Listen("tcp", listen)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go pipe(l, func() (net.Conn, error) { return net.Dial("tcp", target) })
}

func pipe(l net.Listener, dial func() (net.Conn, error)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		u, err := dial()
		if err != nil {
			c.Close()
			continue
		}
		go func() { _, _ = io.Copy(u, c); u.Close() }() //nolint:errcheck // it ends when a side closes: no more to say
		go func() { _, _ = io.Copy(c, u); c.Close() }() //nolint:errcheck // it ends when a side closes: no more to say
	}
}

// tcpToUnix forwards a loopback TCP port to a unix socket (the NB server of the test listens on a unix socket; the
// master reaches the NB over TCP as in a cluster).
func tcpToUnix(t *testing.T, sock string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go pipe(l, func() (net.Conn, error) { return net.Dial("unix", sock) })
	return l.Addr().String()
}

var (
	podIP    = netip.MustParseAddr("10.244.1.3")
	eip      = netip.MustParseAddr("172.18.0.50")
	echoAddr = netip.AddrPortFrom(netip.MustParseAddr("172.18.0.100"), 9000)
)

// TestNodeImageProgramsEgressIP runs the node DaemonSet's pod from the node image inside a node network namespace
// whose iptables rules are in one backend (as a host's are): the image's iptables wrapper must pick that backend,
// the node daemon must add the egress IP and SNAT, and the echo server must see the pod's request with the egress IP.
func TestNodeImageProgramsEgressIP(t *testing.T) {
	for _, backend := range []string{"nft", "legacy"} {
		t.Run(backend, func(t *testing.T) { nodeImage(t, backend) })
	}
}

func nodeImage(t *testing.T, backend string) {
	env, cs, m, rt := setup(t)
	node, pod, ext := hostnet.NewNS(t, "node"), hostnet.NewNS(t, "pod"), hostnet.NewNS(t, "ext")
	hostnet.Veth(t, pod, "eth0", node, "k8s0")
	hostnet.Veth(t, node, "eth0", ext, "eth0")
	ipt := "/usr/sbin/iptables-" + backend
	for _, c := range []struct {
		ns  *hostnet.NS
		cmd string
	}{
		{pod, "ip addr add 10.244.1.3/24 dev eth0"}, {pod, "ip route add default via 10.244.1.1"},
		{node, "sysctl -qw net.ipv4.ip_forward=1"},
		{node, "ip addr add 10.244.1.1/24 dev k8s0"}, {node, "ip addr add 10.244.1.2/24 dev k8s0"},
		{node, "ip addr add 172.18.0.10/16 dev eth0"}, {node, "ip route add default via 172.18.0.100"},
		// the host's own NAT rules, in the backend the host uses
		{node, ipt + " -t nat -A POSTROUTING -s 10.244.0.0/16 -o eth0 -j MASQUERADE"},
		{ext, "ip addr add 172.18.0.100/16 dev eth0"},
	} {
		c.ns.Exec(t, strings.Fields(c.cmd)...)
	}
	hostnet.EchoServer(t, ext, int(echoAddr.Port()))

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	eipcs := egressipclientset.NewForConfigOrDie(env.Config)
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1",
		Annotations: map[string]string{"k8s.ovn.org/node-subnets": `{"default":["10.244.1.0/24"]}`}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod",
		Labels: map[string]string{"env": "prod"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller-manager runs: the namespace's default ServiceAccount is created by hand.
	if _, err := cs.CoreV1().ServiceAccounts("prod").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	no := false
	p, err := cs.CoreV1().Pods("prod").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{NodeName: "node1", AutomountServiceAccountToken: &no,
			Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: podIP.String(), PodIPs: []corev1.PodIP{{IP: podIP.String()}}}
	if _, err := cs.CoreV1().Pods("prod").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e, err := eipcs.K8sV1().EgressIPs().Create(ctx, &egressipv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "eip"},
		Spec: egressipv1.EgressIPSpec{EgressIPs: []string{eip.String()},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}},
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What the master would write: node1 holds the IP.
	e.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "node1", EgressIP: eip.String()}}
	if _, err := eipcs.K8sV1().EgressIPs().UpdateStatus(ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	setConfig(t, cs, map[string]string{"gateway.mode": "local"})
	w, err := m.Workload("DaemonSet", ns, "ovnkube-egressip-node")
	if err != nil {
		t.Fatal(err)
	}
	host, port := apiHostPort(t, env)
	// The API server listens on the host's loopback; the node namespace reaches it through a forwarder.
	forwardIntoNetns(t, node, "127.0.0.1:"+port, host+":"+port)
	ctr, err := rt.Start(ctx, w, podrun.Placement{PodName: "node-smoke", NodeName: "node1", HostIP: "172.18.0.10",
		PodIP: "172.18.0.10", Netns: "/var/run/netns/" + node.Name, APIServerHost: "127.0.0.1", APIServerPort: port})
	if err != nil {
		t.Fatal(err)
	}
	defer stopPod(t, ctr)
	if err := ctr.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	waitfor.True(t, 30*time.Second, 100*time.Millisecond, "the echo server sees the egress IP "+eip.String(), func() (bool, string) {
		got, err := hostnet.SourceSeen(pod, podIP, echoAddr, time.Second)
		return err == nil && got == eip, fmt.Sprintf("saw %v (%v)", got, err)
	})
	rules := node.Exec(t, ipt, "-t", "nat", "-S", iptables.Chain)
	if !strings.Contains(rules, "--to-source "+eip.String()) {
		t.Fatalf("no SNAT to %s in %s's %s chain:\n%s", eip, ipt, iptables.Chain, rules)
	}
	t.Logf("node container in %s programmed %s with iptables-%s:\n%s", node.Name, eip, backend, rules)
}

// stopPod stops pod as a kubelet does (10 s grace) and fails the test if that does not go cleanly.
func stopPod(t *testing.T, pod *podrun.Pod) {
	t.Helper()
	if err := pod.Stop(10 * time.Second); err != nil {
		t.Errorf("stop pod %s: %v", pod.Placement.PodName, err)
	}
}
