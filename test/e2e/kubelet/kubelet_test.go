// Package kubelet installs dist/manifests, and the Helm chart with helm install in each layout, on real kubelets (the
// local cluster's kubelet mode, docs/images.md "Real kubelets"; in the interconnect layout beside each node's own
// zone NB) and checks what an admin would: the master (or cluster manager) and node pods Running and Ready, one of
// them holding the Lease, an EgressIP serving a pod that is a real container (the oeip-prober
// image, wired into OVN by the CNI plugin), and a roll of the daemons (`kubectl rollout restart` of the node
// DaemonSet; a `helm upgrade` that changes a setting) during which no request of that pod leaves with another source.
// It skips without root, without the kubelet, kube-controller-manager and kube-scheduler builds (about 11 minutes
// cold: KUBE_EXTRA="kubelet kube-controller-manager kube-scheduler" contrib/build-kube.sh) or without the image
// archives (make kubelet-images), or without containerd and Debian's loopback CNI plugin (KUBELET=1 make
// install-deps); make kubelet-test builds what it needs and runs it (about a minute warm per test).
package kubelet

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/repo"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

const (
	ns         = "ovn-egressip"
	masterName = "ovnkube-egressip-master"
	nodeDSName = "ovnkube-egressip-node"
	// clusterManagerName is the chart's control-plane Deployment in the interconnect layout.
	clusterManagerName = "ovnkube-egressip-cluster-manager"
)

// bed is the kubelet-mode local cluster of one test (local gateway mode: the node daemons program the egress IPs,
// so their roll is what is checked), in the OVN layout the test installs (cluster.LayoutCentralized or
// cluster.LayoutInterconnect).
type bed struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	cs     kubernetes.Interface
	root   string
	mode   gwmode.Mode
	layout string
	eips   []string
}

// startBed brings up the kubelet-mode cluster in layout, or skips the test without what it needs (fails, with
// E2E_KUBELETS=required: make kubelet-test, a stage of make test). It is torn down at cleanup.
func startBed(t *testing.T, layout string) *bed {
	skipf := t.Skipf
	if os.Getenv("E2E_KUBELETS") == "required" {
		skipf = t.Fatalf
	}
	if os.Geteuid() != 0 {
		skipf("needs root (network namespaces, OVS, containerd, kubelets)")
	}
	root := repo.Root()
	bins, err := apiserver.ResolveBinaries(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"kubelet", "kube-controller-manager", "kube-scheduler"} {
		if _, err := os.Stat(filepath.Join(filepath.Dir(bins.APIServer), b)); err != nil {
			skipf("%s not built (KUBE_EXTRA=\"kubelet kube-controller-manager kube-scheduler\" contrib/build-kube.sh, ~11 min cold)", b)
		}
	}
	for _, a := range cluster.KubeletImages {
		if _, err := os.Stat(filepath.Join(root, "_output", "images", a)); err != nil {
			skipf("image archive %s missing (make kubelet-images)", a)
		}
	}
	for _, tool := range []string{"containerd", "ctr", "runc", "nsenter", "/usr/lib/cni/loopback"} {
		if _, err := exec.LookPath(tool); err != nil {
			skipf("%s not installed (KUBELET=1 make install-deps)", tool)
		}
	}
	b := &bed{t: t, root: root, mode: gwmode.Local, layout: layout, eips: []string{"172.18.0.33", "172.18.0.44"}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	b.ctx = ctx
	state := t.TempDir()
	t0 := time.Now()
	c, err := cluster.Up(ctx, cluster.Config{StateDir: state, GatewayMode: b.mode, Layout: layout, Kubelets: true,
		RepoRoot: root, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		if err := cluster.Down(context.Background(), state); err != nil {
			t.Errorf("cluster down: %v", err)
		}
	})
	t.Logf("cluster with kubelets (%s layout) up in %v", layout, time.Since(t0).Round(time.Millisecond))
	b.c, b.cs = c, c.Client()
	return b
}

// run runs a command with the cluster's KUBECONFIG and returns its output; a failure is fatal.
func (b *bed) run(name string, args ...string) string {
	b.t.Helper()
	cmd := exec.CommandContext(b.ctx, name, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+b.c.Kubeconfig())
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.t.Fatalf("%s %v: %v: %s", filepath.Base(name), args, err, out)
	}
	return string(out)
}

func (b *bed) kubectl(args ...string) string {
	b.t.Helper()
	return b.run(b.c.Kubectl(), args...)
}

// controlPlane is the name of the Deployment that holds the Lease: the master (centralized layout) or the cluster
// manager (interconnect layout).
func (b *bed) controlPlane() string {
	if b.layout == cluster.LayoutInterconnect {
		return clusterManagerName
	}
	return masterName
}

// checkRunning waits for the control-plane Deployment (b.controlPlane) and the node DaemonSet to roll out, their
// pods to be Running and Ready, and a control-plane pod to hold the Lease; it records how long after since (when
// how began) the pods were Ready.
func (b *bed) checkRunning(since time.Time, how string) {
	t, ctx, cs := b.t, b.ctx, b.cs
	t.Helper()
	b.kubectl("-n", ns, "rollout", "status", "daemonset/"+nodeDSName, "--timeout=240s")
	b.kubectl("-n", ns, "rollout", "status", "deployment/"+b.controlPlane(), "--timeout=240s")
	ready := time.Since(since).Round(time.Millisecond)
	masters := runningReady(ctx, t, cs, "app="+b.controlPlane(), 2)
	nodes := runningReady(ctx, t, cs, "app="+nodeDSName, 3)
	line := fmt.Sprintf("INSTALL (kubelets, %s, %s layout): %s: Deployment %s (%d pods) and DaemonSet %s (%d pods) Running and Ready %v after it began",
		b.mode, b.layout, how, b.controlPlane(), len(masters), nodeDSName, len(nodes), ready)
	t.Log(line)
	recordResult(line)

	// The Lease: held by one of the master pods (identity <hostname>_<pid>: the node's name, pid 1 in the container).
	var holder string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoordinationV1().Leases(ns).Get(ctx, "ovn-egressip-master", metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder != "", nil
	}); err != nil {
		t.Fatalf("no %s pod holds the Lease ovn-egressip/ovn-egressip-master", b.controlPlane())
	}
	var masterIDs []string
	for _, p := range masters {
		masterIDs = append(masterIDs, p.Spec.NodeName+"_1")
	}
	if !slices.Contains(masterIDs, holder) {
		t.Fatalf("Lease held by %q, not by a %s pod (%v)", holder, b.controlPlane(), masterIDs)
	}
	t.Logf("Lease held by %s", holder)
}

// startServedPod runs the demo: an EgressIP for app=web in prod, a served pod on node1 (a real container), and
// waits until its requests leave with the egress IPs.
func (b *bed) startServedPod() {
	t, ctx, cs := b.t, b.ctx, b.cs
	t.Helper()
	b.kubectl("label", "node", "node2", "node3", "k8s.ovn.org/egress-assignable=", "--overwrite")
	b.kubectl("create", "namespace", "prod")
	b.kubectl("label", "namespace", "prod", "environment=production")
	b.kubectl("apply", "-f", filepath.Join(b.root, "dist", "examples", "egressip.yaml"))
	no := false
	grace := int64(1)
	_, err := cs.CoreV1().Pods("prod").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-prober", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": "node1"},
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: "prober", Image: "oeip-prober:latest", ImagePullPolicy: corev1.PullNever,
				Args: []string{"-target", "172.18.0.100:9000", "-interval", "20ms"}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b.kubectl("-n", "prod", "wait", "--for=condition=Ready", "pod/web-prober", "--timeout=120s")
	var before []probe
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		before = proberLog(ctx, t, cs)
		return len(before) >= 20 && countOther(before[len(before)-20:], b.eips) == 0 && countAnswered(before[len(before)-20:]) == 20, nil
	}); err != nil {
		t.Fatalf("the served pod's requests do not leave with an egress IP %v: last ones %v", b.eips, tail(before, 20))
	}
	t.Logf("served pod prod/web-prober: the echo server sees %v", tail(before, 5))
}

// underProbing runs change (a roll of the daemons) while the served pod asks every 20 ms, then records and checks
// its requests meanwhile: some answered, none with another source than the egress IPs.
func (b *bed) underProbing(label, what string, change func()) {
	t, ctx, cs := b.t, b.ctx, b.cs
	t.Helper()
	n0 := len(proberLog(ctx, t, cs))
	t0 := time.Now()
	change()
	took := time.Since(t0)
	//nolint:forbidigo // the prober's window: requests after the last pod turned ready are part of what is measured
	time.Sleep(500 * time.Millisecond)
	during := proberLog(ctx, t, cs)[n0:]
	answered, other := countAnswered(during), countOther(during, b.eips)
	line := fmt.Sprintf("%s (kubelets, %s, %s layout): %s done in %v; %d requests (lost %d, other source %d)",
		label, b.mode, b.layout, what, took.Round(time.Millisecond), len(during), len(during)-answered, other)
	t.Log(line)
	recordResult(line)
	if answered < len(during) {
		b.explainLost(during)
	}
	if answered == 0 {
		t.Fatalf("%s: no request of the served pod was answered", label)
	}
	if other != 0 {
		t.Fatalf("%s: %d requests left with another source than %v", label, other, b.eips)
	}
}

func TestManifestsOnKubelets(t *testing.T) {
	b := startBed(t, cluster.LayoutCentralized)
	// The manifests, with the two settings an admin gives this cluster (NB address, gateway mode).
	dir := t.TempDir()
	for _, f := range []string{"ovnkube-egressip.yaml", "directconn.yaml"} {
		data, err := os.ReadFile(filepath.Join(b.root, "dist", "manifests", f))
		if err != nil {
			t.Fatal(err)
		}
		s := strings.Replace(string(data), "address = tcp:ovnkube-db.ovn-kubernetes.svc:6641", "address = "+b.c.NBTCPAddress(), 1)
		s = strings.Replace(s, "\n    mode = shared\n", "\n    mode = "+string(b.mode)+"\n", 1)
		if f == "ovnkube-egressip.yaml" && s == string(data) {
			t.Fatal("the ConfigMap of dist/manifests/ovnkube-egressip.yaml no longer has the NB address and gateway mode lines this test sets")
		}
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t1 := time.Now()
	b.kubectl("apply", "-f", dir)
	b.checkRunning(t1, "kubectl apply")
	b.startServedPod()
	b.underProbing("ROLLING RESTART", "kubectl rollout restart of 3 node daemon pods", func() {
		b.kubectl("-n", ns, "rollout", "restart", "daemonset/"+nodeDSName)
		b.kubectl("-n", ns, "rollout", "status", "daemonset/"+nodeDSName, "--timeout=300s")
	})
}

// TestChartOnKubelets installs the Helm chart with helm install in each layout, on a kubelet-mode cluster of that
// layout (gateway mode local): centralized with the cluster's NB address; interconnect with each DaemonSet pod's
// zone NB socket (zoneValues). Then it changes a setting with helm upgrade under probing: the control-plane and node
// pods roll, and no request of the served pod leaves with another source.
func TestChartOnKubelets(t *testing.T) {
	for _, layout := range []string{cluster.LayoutCentralized, cluster.LayoutInterconnect} {
		t.Run(layout, func(t *testing.T) { chartOnKubelets(t, layout) })
	}
}

func chartOnKubelets(t *testing.T, layout string) {
	b := startBed(t, layout)
	helm, err := apiserver.Helm(b.root)
	if err != nil {
		t.Fatal(err)
	}
	const release = "ovnkube-egressip"
	chart := filepath.Join(b.root, "dist", "helm", "ovnkube-egressip")
	set := []string{"--set", "layout=" + layout, "--set", "gatewayMode=" + string(b.mode)}
	if layout == cluster.LayoutInterconnect {
		set = append(set, b.zoneValues()...)
	} else {
		set = append(set, "--set", "nbAddress="+b.c.NBTCPAddress())
	}
	// The local cluster applied the chart's access objects (ServiceAccounts, roles, admission policy) from
	// dist/manifests with kubectl before it issued ovnkube's tokens: helm install takes them over (--take-ownership)
	// and overrides kubectl's field ownership of them (--force-conflicts), as when adopting an install from
	// dist/manifests.
	t1 := time.Now()
	b.run(helm, append([]string{"install", release, chart, "--namespace", ns, "--take-ownership", "--force-conflicts"}, set...)...)
	b.checkRunning(t1, "helm install")
	b.startServedPod()
	b.underProbing("HELM UPGRADE", "helm upgrade --set logLevel=5 (2 "+b.controlPlane()+" and 3 node daemon pods roll)", func() {
		b.run(helm, append([]string{"upgrade", release, chart, "--namespace", ns, "--reuse-values"}, "--set", "logLevel=5")...)
		b.kubectl("-n", ns, "rollout", "status", "daemonset/"+nodeDSName, "--timeout=300s")
		b.kubectl("-n", ns, "rollout", "status", "deployment/"+b.controlPlane(), "--timeout=300s")
	})
	for _, obj := range []string{"daemonset/" + nodeDSName, "deployment/" + b.controlPlane()} {
		if out := b.kubectl("-n", ns, "get", obj, "-o", "jsonpath={.spec.template.spec.containers[0].command}"); !strings.Contains(out, "--loglevel=5") {
			t.Fatalf("after helm upgrade --set logLevel=5 %s runs %s", obj, out)
		}
	}
}

// zoneValues are the chart's interconnect settings for this cluster: every zone NB listens on the socket
// <run>/<node>/<file> of the cluster's state directory, so zone.ovnRunDir is <run> (mounted at /var/run/ovn in the
// DaemonSet pods) and zone.nbAddress names the pod's node with $(NODE_NAME), which the kubelet expands.
func (b *bed) zoneValues() []string {
	b.t.Helper()
	sock := strings.TrimPrefix(b.c.ZoneNBAddress("node1"), "unix:")
	run, file := filepath.Dir(filepath.Dir(sock)), filepath.Base(sock)
	for _, n := range b.c.Nodes() {
		if got, want := b.c.ZoneNBAddress(n.Name), "unix:"+filepath.Join(run, n.Name, file); got != want {
			b.t.Fatalf("zone %s NB at %s, not %s: zone.nbAddress cannot name it with $(NODE_NAME)", n.Name, got, want)
		}
	}
	return []string{"--set", "zone.ovnRunDir=" + run, "--set", "zone.nbAddress=unix:/var/run/ovn/$(NODE_NAME)/" + file}
}

// runningReady waits for want pods matching selector in ns, each Running and Ready, and returns them.
func runningReady(ctx context.Context, t *testing.T, cs kubernetes.Interface, selector string, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, nil
		}
		pods = pods[:0]
		for _, p := range l.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				pods = append(pods, p)
			}
		}
		return len(pods) == want, nil
	})
	if err != nil {
		t.Fatalf("pods %s: %d Running and Ready, want %d", selector, len(pods), want)
	}
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// probe is one line of the prober: the source the echo server saw, or "" when the request failed.
type probe struct{ src, line string }

func (p probe) String() string {
	if p.src == "" {
		return "error"
	}
	return p.src
}

// proberLog reads the prober container's log through the apiserver (the kubelet serves it).
func proberLog(ctx context.Context, t *testing.T, cs kubernetes.Interface) []probe {
	t.Helper()
	b, err := cs.CoreV1().Pods("prod").GetLogs("web-prober", &corev1.PodLogOptions{}).Do(ctx).Raw()
	if err != nil {
		t.Fatalf("logs of prod/web-prober: %v", err)
	}
	var out []probe
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		if f[2] == "error" {
			out = append(out, probe{line: sc.Text()})
		} else {
			out = append(out, probe{src: f[2], line: sc.Text()})
		}
	}
	return out
}

// explainLost logs the requests that were not answered, as the prober wrote them, and what the control plane's
// pods logged meanwhile about status, conditions, reachability, health, node claims and NB rows (where a lost
// request comes from: a move, a next hop left out of the pod's reroute, a roll).
func (b *bed) explainLost(during []probe) {
	t := b.t
	t.Helper()
	for _, p := range during {
		if p.src == "" {
			t.Logf("lost: %s", p.line)
		}
	}
	// A diagnosis only: a log that cannot be read is said, not a failure.
	cmd := exec.CommandContext(b.ctx, b.c.Kubectl(), "-n", ns, "logs", "-l", "app="+b.controlPlane(), "--since=5m", "--tail=-1", "--prefix")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+b.c.Kubeconfig())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("logs of the %s pods: %v: %s", b.controlPlane(), err, out)
		return
	}
	var keep []string
	for _, l := range strings.Split(string(out), "\n") {
		if slices.ContainsFunc([]string{"status updated", "conditions updated", "nreachable", "ealth", "Became leader",
			"Standing by", "claim", "daemon restarted", "host egress IPs", "rows updated"}, func(w string) bool { return strings.Contains(l, w) }) {
			keep = append(keep, l)
		}
	}
	t.Logf("control plane log lines about status, conditions, reachability, health, node claims, NB rows and the Lease (last 5 minutes):\n%s", strings.Join(keep, "\n"))
}

func countAnswered(ps []probe) int {
	n := 0
	for _, p := range ps {
		if p.src != "" {
			n++
		}
	}
	return n
}

func countOther(ps []probe, eips []string) int {
	n := 0
	for _, p := range ps {
		if p.src != "" && !slices.Contains(eips, p.src) {
			n++
		}
	}
	return n
}

func tail(ps []probe, n int) []probe {
	if len(ps) > n {
		return ps[len(ps)-n:]
	}
	return ps
}

// recordResult appends a measured line to _output/e2e-results.txt (make test-serial prints it).
func recordResult(line string) {
	if err := os.MkdirAll(filepath.Join(repo.Root(), "_output"), 0o755); err != nil {
		fmt.Fprintf(os.Stderr, "cannot record %q: %v\n", line, err)
		return
	}
	f, err := os.OpenFile(filepath.Join(repo.Root(), "_output", "e2e-results.txt"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot record %q: %v\n", line, err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}
