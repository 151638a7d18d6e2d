package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/podrun"
	"github.com/ovn-egressip/ovn-egressip/test/repo"
)

// fromImage says whether ovnkube runs from the images of make image (OVNKUBE_FROM=image) instead of as processes:
// the master and node pods of dist/manifests/ovnkube-egressip.yaml run with runc (test/podrun), the master in the
// host's network namespace, one node pod in each node's.
func fromImage() bool { return os.Getenv("OVNKUBE_FROM") == "image" }

// imageRun is the image side of an env.
type imageRun struct {
	e      *env
	rt     *podrun.Runtime
	master *podrun.Workload
	node   *podrun.Workload

	mu      sync.Mutex
	started []*podrun.Pod
}

// newImageRun applies the manifests to the cluster, sets the ConfigMap for this cluster (its NB address, the gateway
// mode, log level 4) as an admin edits it, and leaves in each node the iptables hint a kubelet leaves.
func newImageRun(t *testing.T, e *env) *imageRun {
	t.Helper()
	root := repo.Root()
	d := podrun.NeedDist(t, root, func(a string) { t.Fatalf("OVNKUBE_FROM=image: %s missing: run make image first", a) })
	ir := &imageRun{e: e}
	var err error
	if ir.master, err = d.Manifests.Workload("Deployment", "ovn-egressip", "ovnkube-egressip-master"); err != nil {
		t.Fatal(err)
	}
	if ir.node, err = d.Manifests.Workload("DaemonSet", "ovn-egressip", "ovnkube-egressip-node"); err != nil {
		t.Fatal(err)
	}
	e.kubectl("", "apply", "-f", filepath.Join(root, "dist", "manifests", "ovnkube-egressip.yaml"))
	ctx := context.Background()
	cms := e.c.Client().CoreV1().ConfigMaps("ovn-egressip")
	cm, err := cms.Get(ctx, "ovnkube-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["ovnkube.conf"] = podrun.SetINI(cm.Data["ovnkube.conf"], map[string]string{
		"ovnnorth.address": e.c.NBTCPAddress(), "gateway.mode": string(e.mode), "logging.loglevel": "4"})
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ca, err := e.c.CACert()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.dir, "podrun")
	if err := podrun.Cleanup(dir); err != nil {
		t.Fatal(err)
	}
	ir.rt = &podrun.Runtime{Dir: dir, LogDir: filepath.Join(e.dir, "log"), Images: d.Images,
		OCIImage: d.OCIImage, Kube: e.c.Client(), CA: ca}
	t.Cleanup(func() {
		if err := podrun.Cleanup(dir); err != nil {
			t.Errorf("podrun clean-up: %v", err)
		}
	})
	e.leaseNamespace = "ovn-egressip" // the manifests' --leader-elect-namespace
	// A kubelet creates KUBE-IPTABLES-HINT in the mangle table with the iptables it uses; the node image's wrapper
	// reads it. Our nodes have no kubelet: the host's iptables leaves the hint.
	for _, n := range e.c.Nodes() {
		ns, err := e.c.NodeNetns(n.Name)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("ip", "netns", "exec", ns, "iptables", "-t", "mangle", "-N", "KUBE-IPTABLES-HINT").CombinedOutput(); err != nil {
			t.Logf("iptables hint in %s: %v: %s", n.Name, err, out)
		}
	}
	return ir
}

func (ir *imageRun) start(t *testing.T, w *podrun.Workload, pl podrun.Placement) *podDaemon {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pl.APIServerHost, pl.APIServerPort = cluster.APIServerIP, strconv.Itoa(cluster.APIServerPort)
	p, err := ir.rt.Start(ctx, w, pl)
	if err != nil {
		t.Fatalf("start pod %s from the image: %v", pl.PodName, err)
	}
	ir.mu.Lock()
	ir.started = append(ir.started, p)
	ir.mu.Unlock()
	return &podDaemon{p}
}

// startMaster runs the master Deployment's pod named name in the host's network namespace.
func (ir *imageRun) startMaster(t *testing.T, name string) daemon {
	return ir.start(t, ir.master, podrun.Placement{PodName: name, NodeName: "host"})
}

// startNode runs the node DaemonSet's pod of node in the node's network namespace.
func (ir *imageRun) startNode(t *testing.T, node string) daemon {
	n, err := ir.e.c.Node(node)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := ir.e.c.NodeNetns(node)
	if err != nil {
		t.Fatal(err)
	}
	ip := n.NodeIP.String()
	return ir.start(t, ir.node, podrun.Placement{PodName: "ovnkube-egressip-node-" + node, NodeName: node,
		HostIP: ip, PodIP: ip, Netns: filepath.Join("/var/run/netns", ns)})
}

// waitReady waits for the readiness probes of the pods started so far and records how long the image path took
// from start to ready.
func (ir *imageRun) waitReady(t *testing.T, since time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ir.mu.Lock()
	pods := append([]*podrun.Pod(nil), ir.started...)
	ir.mu.Unlock()
	for _, p := range pods {
		if err := p.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(since)
	t.Logf("OVNKUBE_FROM=image: %d pods started from the images and ready in %s", len(pods), took.Round(time.Millisecond))
	recordResult(t, fmt.Sprintf("IMAGES (%s): 1 master and %d node pods from the images (unpack, runc, readiness probes) ready in %s\n",
		ir.e.mode, len(pods)-1, took.Round(time.Millisecond)))
}

// podDaemon is a pod run from the images.
type podDaemon struct{ p *podrun.Pod }

func (d *podDaemon) signal(sig syscall.Signal) error { return d.p.Signal(sig) }
func (d *podDaemon) stop(sig syscall.Signal) error {
	if sig == syscall.SIGKILL {
		return d.p.Kill()
	}
	return d.p.Stop(10 * time.Second) // SIGTERM, as a kubelet stops a pod

}

// holds: the pod's hostname is its name and ovnkube is pid 1 of its PID namespace.
func (d *podDaemon) holds(identity string) bool { return identity == d.p.Placement.PodName+"_1" }
