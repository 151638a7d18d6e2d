package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ovn-org/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/ports"
)

// The kubelet mode (Config.Kubelets, `clusterctl up --kubelets`, CLUSTER_KUBELETS=1; docs/images.md "Real
// kubelets"): kube-controller-manager and kube-scheduler beside the apiserver, and per node a containerd and a
// kubelet inside the node's network namespace (nsenter --net only: `ip netns exec` remounts /sys and hides the
// cgroup hierarchies). The kubelets report their nodes (the agent writes no heartbeat), run the pods bound to them
// and wire their sandboxes into OVN with the CNI plugin (cni.go, AttachPod). In-cluster clients reach the apiserver
// through the kubernetes Service: a DNAT of 10.96.0.1:443 to the apiserver in each node namespace (no kube-proxy).

// kubeServiceIP is the kubernetes Service's ClusterIP (the first address of serviceCIDR).
const kubeServiceIP = "10.96.0.1"

// KubeletImages are the image archives imported into every node's containerd, from Config.Images.
var KubeletImages = []string{"ovn-egressip.tar", "ovn-egressip-node.tar", "oeip-pause.tar", "oeip-prober.tar"}

// loopbackPlugin is Debian's loopback CNI plugin (containernetworking-plugins): containerd's CRI runs it for every
// sandbox besides the configured network.
const loopbackPlugin = "/usr/lib/cni/loopback"

// kubeletSandboxImage is the pod sandbox image (contrib/kubelet/pause; no registry here).
const kubeletSandboxImage = "docker.io/library/oeip-pause:latest"

func (p paths) kubelets() string              { return filepath.Join(p.dir, "kubelets") }
func (p paths) kubeletDir(node string) string { return filepath.Join(p.kubelets(), node) }
func (p paths) containerdSock(node string) string {
	return filepath.Join(p.kubeletDir(node), "containerd.sock")
}
func (p paths) cniBin() string { return filepath.Join(p.kubelets(), "cni-bin") }

// kubeletCgroup is the cgroupRoot of a node's kubelet (in every cgroup v1 hierarchy).
func kubeletCgroup(node string) string { return NetnsPrefix + "kubelet-" + node }

// kubeletDaemons are the pidfile names of the kubelet mode's processes, in stop order.
func kubeletDaemons(nodes int) []string {
	var ds []string
	for i := 1; i <= nodes; i++ {
		ds = append(ds, "kubelet-"+NodeName(i))
	}
	for i := 1; i <= nodes; i++ {
		ds = append(ds, "containerd-"+NodeName(i))
	}
	return append(ds, "kube-scheduler", "kube-controller-manager")
}

// kubeBinary finds a Kubernetes binary beside the cached kube-apiserver (contrib/build-kube.sh with KUBE_EXTRA).
func kubeBinary(apiserverBin, name string) (string, error) {
	b := filepath.Join(filepath.Dir(apiserverBin), name)
	if _, err := os.Stat(b); err != nil {
		return "", fmt.Errorf("%s not found beside %s: build it with KUBE_EXTRA=\"kubelet kube-controller-manager kube-scheduler\" contrib/build-kube.sh (make kubelet-demo does)", name, apiserverBin)
	}
	return b, nil
}

// kubeletPreflight checks what the kubelet mode needs before anything starts.
func kubeletPreflight(apiserverBin, images string) error {
	for _, n := range []string{"kubelet", "kube-controller-manager", "kube-scheduler"} {
		if _, err := kubeBinary(apiserverBin, n); err != nil {
			return err
		}
	}
	for _, tool := range []string{"containerd", "ctr", "runc", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not found: run KUBELET=1 make install-deps", tool)
		}
	}
	if _, err := os.Stat(loopbackPlugin); err != nil {
		return fmt.Errorf("%s not found (containerd runs it in every sandbox): run KUBELET=1 make install-deps", loopbackPlugin)
	}
	for _, a := range KubeletImages {
		if _, err := os.Stat(filepath.Join(images, a)); err != nil {
			return fmt.Errorf("image archive %s missing: make image kubelet-images", filepath.Join(images, a))
		}
	}
	return nil
}

// issueClientCert writes name.crt/.key: a client certificate signed by the cluster CA.
func issueClientCert(k pki, name string, serial int64, subj pkix.Name) error {
	caPEM, err := os.ReadFile(k.path("ca.crt"))
	if err != nil {
		return err
	}
	keyPEM, err := os.ReadFile(k.path("ca.key"))
	if err != nil {
		return err
	}
	cb, _ := pem.Decode(caPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return errors.New("cluster CA: bad PEM")
	}
	caCert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return err
	}
	caKey, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now().Add(-time.Hour)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: subj, NotBefore: now,
		NotAfter: now.Add(365 * 24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	return writeCertKey(k, name, der, key)
}

// kubeconfigFor renders a kubeconfig for server with the client certificate name.crt/.key of the PKI.
func (p pki) kubeconfigFor(server, name string) ([]byte, error) {
	kc, err := p.kubeconfig(server)
	if err != nil {
		return nil, err
	}
	if name == "admin" {
		return kc, nil
	}
	admCrt, err := os.ReadFile(p.path("admin.crt"))
	if err != nil {
		return nil, err
	}
	admKey, err := os.ReadFile(p.path("admin.key"))
	if err != nil {
		return nil, err
	}
	crt, err := os.ReadFile(p.path(name + ".crt"))
	if err != nil {
		return nil, err
	}
	key, err := os.ReadFile(p.path(name + ".key"))
	if err != nil {
		return nil, err
	}
	s := strings.Replace(string(kc), base64Std(admCrt), base64Std(crt), 1)
	s = strings.Replace(s, base64Std(admKey), base64Std(key), 1)
	return []byte(s), nil
}

// upKubelets starts kube-controller-manager, kube-scheduler and, per node, containerd (with the images imported)
// and a kubelet, then waits until every node is Ready as its kubelet reports it.
func upKubelets(ctx context.Context, p paths, k pki, apiserverBin, helper, images, server string, cs kubernetes.Interface,
	nodes []NodeAddrs, logf func(string, ...any)) error {
	kcm, err := kubeBinary(apiserverBin, "kube-controller-manager")
	if err != nil {
		return err
	}
	sched, err := kubeBinary(apiserverBin, "kube-scheduler")
	if err != nil {
		return err
	}
	kubelet, err := kubeBinary(apiserverBin, "kubelet")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(p.cniBin(), 0o755); err != nil {
		return err
	}
	if err := os.Symlink(helper, filepath.Join(p.cniBin(), CNIType)); err != nil && !os.IsExist(err) {
		return err
	}
	if err := os.Symlink(loopbackPlugin, filepath.Join(p.cniBin(), "loopback")); err != nil && !os.IsExist(err) {
		return err
	}
	if err := startKubeComponent(p, "kube-controller-manager", kcm,
		"--service-account-private-key-file="+k.path("sa.key"), "--root-ca-file="+k.path("ca.crt"),
		"--use-service-account-credentials=false", "--controllers=*,-nodeipam,-csrsigning,-csrapproving,-csrcleaner",
		"--concurrent-deployment-syncs=2", "--concurrent-daemonset-syncs=2"); err != nil {
		return err
	}
	if err := startKubeComponent(p, "kube-scheduler", sched); err != nil {
		return err
	}
	logf("kube-controller-manager and kube-scheduler started")
	var jobs []func(context.Context) error
	for i, n := range nodes {
		jobs = append(jobs, func(ctx context.Context) error {
			return upNodeKubelet(ctx, p, k, kubelet, images, server, n, int64(100+i))
		})
	}
	if err := parallel(ctx, jobs); err != nil {
		return err
	}
	logf("containerd (images imported) and a kubelet started in each node namespace")
	wctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	var notReady []string
	err = poll(wctx, 500*time.Millisecond, func() (bool, error) {
		for _, d := range kubeletDaemons(len(nodes)) {
			if pid, err := readPid(p.pidfile(d)); err != nil || !alive(pid) {
				return false, fmt.Errorf("%s exited: %s", d, lastLogLine(filepath.Join(p.log(), d+".log")))
			}
		}
		notReady = notReady[:0]
		for _, n := range nodes {
			obj, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil || !kubeletReady(obj) {
				notReady = append(notReady, n.Name)
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil && wctx.Err() != nil {
		return fmt.Errorf("nodes %v not Ready as their kubelets report them (logs: %s/kubelet-*.log)", notReady, p.log())
	}
	if err != nil {
		return err
	}
	logf("kubelets report %d nodes Ready", len(nodes))
	return nil
}

// kubeletReady: the node's Ready condition is True and was written by its kubelet.
func kubeletReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue && c.Reason == "KubeletReady" && !strings.Contains(c.Message, "ovn-egressip")
		}
	}
	return false
}

func upNodeKubelet(ctx context.Context, p paths, k pki, kubelet, images, server string, n NodeAddrs, serial int64) error {
	dir := p.kubeletDir(n.Name)
	cni := filepath.Join(dir, "cni")
	for _, d := range []string{dir, cni, filepath.Join(dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	conf, err := cniConfList(p.dir, n.Name)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cni, "10-ovn-egressip.conflist"), conf, 0o644); err != nil {
		return err
	}
	netnsPath := "/run/netns/" + NodeNetnsName(n.Name)
	// containerd 1.6 (Debian): CRI with runc, our sandbox image, restrict_oom_score_adj (root here lacks
	// CAP_SYS_RESOURCE, so runc cannot lower a sandbox's oom_score_adj), cgroupfs, our CNI plugin.
	ctdConf := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
`, filepath.Join(dir, "containerd", "root"), filepath.Join(dir, "containerd", "state"), p.containerdSock(n.Name),
		kubeletSandboxImage, p.cniBin(), cni)
	if err := os.WriteFile(filepath.Join(dir, "containerd.toml"), []byte(ctdConf), 0o644); err != nil {
		return err
	}
	// Its own UTS namespace with the node's name as hostname, as a host has: the hostNetwork containers share it
	// (two masters on two nodes must not both be "vm_1" in their Lease identity <hostname>_<pid>).
	if _, err := startDaemon(p.pidfile("containerd-"+n.Name), filepath.Join(p.log(), "containerd-"+n.Name+".log"), nil,
		"nsenter", "--net="+netnsPath, "unshare", "--uts", "sh", "-c", `hostname "$0" && exec "$@"`, n.Name,
		"containerd", "--config", filepath.Join(dir, "containerd.toml")); err != nil {
		return err
	}
	if err := poll(ctx, 100*time.Millisecond, func() (bool, error) {
		_, err := os.Stat(p.containerdSock(n.Name))
		return err == nil, nil
	}); err != nil {
		return fmt.Errorf("containerd of %s: no socket: %w", n.Name, err)
	}
	for _, a := range KubeletImages {
		if _, err := run(ctx, "ctr", "-a", p.containerdSock(n.Name), "-n", "k8s.io", "images", "import",
			filepath.Join(images, a)); err != nil {
			return fmt.Errorf("import %s into the containerd of %s: %w", a, n.Name, err)
		}
	}
	// The kubelet's cgroupRoot must exist in every v1 hierarchy (cpuset with cpus and mems).
	cg := kubeletCgroup(n.Name)
	hier, err := filepath.Glob("/sys/fs/cgroup/*")
	if err != nil {
		return err
	}
	for _, h := range hier {
		if fi, err := os.Stat(h); err != nil || !fi.IsDir() || filepath.Base(h) == "unified" {
			continue
		}
		if err := os.MkdirAll(filepath.Join(h, cg), 0o755); err != nil {
			return err
		}
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpuset", f))
		if err == nil {
			err = os.WriteFile(filepath.Join("/sys/fs/cgroup/cpuset", cg, f), b, 0o644)
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", cg, err)
		}
	}
	name := "kubelet-" + n.Name
	if err := issueClientCert(k, name, serial, pkix.Name{CommonName: "system:node:" + n.Name,
		Organization: []string{"system:nodes"}}); err != nil {
		return err
	}
	kc, err := k.kubeconfigFor(server, name)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), kc, 0o600); err != nil {
		return err
	}
	var nodeIPs []string
	for _, f := range n.Families {
		nodeIPs = append(nodeIPs, f.NodeIP.String())
	}
	kubeletConf := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
podLogsDir: %s
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %s}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://%s
enforceNodeAllocatable: []
imageGCHighThresholdPercent: 100
evictionHard: {"memory.available": "100Mi", "nodefs.available": "1%%", "imagefs.available": "1%%"}
serializeImagePulls: false
resolvConf: ""
`, cg, filepath.Join(dir, "logs"), nodeIPs[0], k.path("ca.crt"), p.containerdSock(n.Name))
	if err := os.WriteFile(filepath.Join(dir, "kubelet.yaml"), []byte(kubeletConf), 0o644); err != nil {
		return err
	}
	_, err = startDaemon(p.pidfile(name), filepath.Join(p.log(), name+".log"), nil,
		"nsenter", "--net="+netnsPath, kubelet, "--config", filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig", filepath.Join(dir, "kubeconfig"), "--root-dir", filepath.Join(dir, "root"),
		"--hostname-override", n.Name, "--node-ip", strings.Join(nodeIPs, ","), "--v=2")
	return err
}

// nodeServiceDNAT is the kubelet mode's stand-in for kube-proxy in a node's namespace: the kubernetes Service
// (10.96.0.1:443) to the apiserver, for the hostNetwork pods' in-cluster clients.
func nodeServiceDNAT(apiserver string) string {
	return fmt.Sprintf("iptables -t nat -A OUTPUT -d %s/32 -p tcp --dport 443 -m comment --comment %s -j DNAT --to-destination %s:%d\n",
		kubeServiceIP, HarnessKey, apiserver, APIServerPort)
}

// stopKubelets ends the kubelet mode's processes and what they made: kubelets, every process in their cgroups (the
// containers), containerd and its shims, the mounts under the kubelets' directories, the sandboxes' network
// namespaces the CNI plugin recorded, and the cgroups. Nothing to do when the mode did not run.
func stopKubelets(ctx context.Context, p paths) []error {
	if _, err := os.Stat(p.kubelets()); err != nil {
		return nil
	}
	var errs []error
	entries, err := os.ReadDir(p.kubelets())
	if err != nil {
		errs = append(errs, err)
	}
	var nodes []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != filepath.Base(p.cniBin()) {
			nodes = append(nodes, e.Name())
		}
	}
	var pids []int
	for _, n := range nodes {
		pids = append(pids, signalPidfile(p.pidfile("kubelet-"+n), syscall.SIGTERM))
	}
	pids = append(pids, signalPidfile(p.pidfile("kube-scheduler"), syscall.SIGTERM),
		signalPidfile(p.pidfile("kube-controller-manager"), syscall.SIGTERM))
	if err := waitGone(pids, 10*time.Second); err != nil {
		errs = append(errs, err)
	}
	// The containers: every process in the kubelets' cgroups.
	for _, n := range nodes {
		var cpids []int
		// A cgroup that is not there (or goes meanwhile) has no processes.
		if err := filepath.WalkDir("/sys/fs/cgroup/pids/"+kubeletCgroup(n), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			for _, l := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(l); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					cpids = append(cpids, pid)
				}
			}
			return nil
		}); err != nil {
			errs = append(errs, err)
		}
		if err := waitGone(cpids, 5*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, n := range nodes {
		pids = append(pids[:0], signalPidfile(p.pidfile("containerd-"+n), syscall.SIGTERM))
		if err := waitGone(pids, 10*time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	// The shims are in the node namespaces (ended with them); the mounts of the kubelets and containerd:
	if err := unmountUnder(p.kubelets()); err != nil {
		errs = append(errs, err)
	}
	recs, err := filepath.Glob(filepath.Join(p.cniRecords(), "sandbox-*"))
	if err != nil {
		errs = append(errs, err)
	}
	for _, r := range recs {
		b, err := os.ReadFile(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ns := strings.TrimSpace(string(b)); ns != "" {
			if _, err := os.Stat("/run/netns/" + ns); err == nil {
				if err := deleteNetns(ctx, ns); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for _, n := range nodes {
		dirs, err := filepath.Glob("/sys/fs/cgroup/*/" + kubeletCgroup(n))
		if err != nil {
			errs = append(errs, err)
		}
		for _, d := range dirs {
			if err := removeCgroupTree(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.RemoveAll(p.kubelets()); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// unmountUnder lazily unmounts every mount point under dir, deepest first.
func unmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var mps []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			mps = append(mps, f[4])
		}
	}
	slices.SortFunc(mps, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, m := range mps {
		// EINVAL: no longer a mount point (a mount listed twice)
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroupTree removes a cgroup directory and its children, deepest first (cgroup directories are removed with
// rmdir; their files go with them). A directory that is gone meanwhile is not an error.
func removeCgroupTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() {
			errs = append(errs, removeCgroupTree(filepath.Join(dir, e.Name())))
		}
	}
	_ = os.Remove(dir)
	return errors.Join(errs...)
}

// withServiceLB adds, for the kubelet mode, the kubernetes Service to the NB topology the way OVN-Kubernetes serves
// Services to pods: an OVN load balancer (10.96.0.1:443 -> the apiserver) on every node switch, so that pods on the
// pod network (directconn's) reach the apiserver in-cluster. hostNetwork pods are served by nodeServiceDNAT.
func withServiceLB(rows []model.Model, nodes []NodeAddrs, apiserver string) []model.Model {
	lb := uuidName("lb", "kubernetes")
	tcp := nbdb.LoadBalancerProtocolTCP
	rows = append(rows, &nbdb.LoadBalancer{UUID: lb, Name: "oeip-kubernetes-service", Protocol: &tcp,
		Vips:        map[string]string{kubeServiceIP + ":443": fmt.Sprintf("%s:%d", apiserver, APIServerPort)},
		ExternalIDs: harnessIDs("service", "default/kubernetes")})
	for _, r := range rows {
		sw, ok := r.(*nbdb.LogicalSwitch)
		if !ok {
			continue
		}
		if slices.ContainsFunc(nodes, func(n NodeAddrs) bool { return n.Name == sw.Name }) {
			sw.LoadBalancer = append(sw.LoadBalancer, lb)
		}
	}
	return rows
}

// startKubeComponent starts kube-controller-manager or kube-scheduler (bin, its log and pid file named name) on a free
// loopback secure port, with the admin kubeconfig for the API, authentication and authorization, no leader
// election, and extra flags.
func startKubeComponent(p paths, name, bin string, extra ...string) error {
	port, err := ports.FreeLoopback()
	if err != nil {
		return err
	}
	_, err = startDaemon(p.pidfile(name), filepath.Join(p.log(), name+".log"), nil, append([]string{bin,
		"--kubeconfig=" + p.kubeconfig(), "--authentication-kubeconfig=" + p.kubeconfig(),
		"--authorization-kubeconfig=" + p.kubeconfig(), "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false"}, extra...)...)
	return err
}
