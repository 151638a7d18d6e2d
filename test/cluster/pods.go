package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodSpec is a pod to create: a Pod object bound to Node, and a network namespace on the node's switch.
type PodSpec struct {
	Namespace string // created (without labels) when missing
	Name      string
	Node      string            // node1..nodeN
	Labels    map[string]string // pod labels
	// IP, when set, is the pod's primary address instead of the next free one: a pod address of the node's subnet
	// (.3 and up) that no port has, such as a deleted pod's (a new pod object given the IP of one that is gone). The
	// other families take the same host part.
	IP netip.Addr
}

// Pod is a created pod.
type Pod struct {
	Namespace string
	Name      string
	Node      string
	IP        netip.Addr   // from the node subnet (.3 and up), primary family
	IPs       []netip.Addr // one per family of the cluster, primary first (the same host part in each)
	MAC       string
	Netns     string // network namespace (ip netns exec Netns ...)
	LSP       string // logical switch port <namespace>_<name>
}

// podLSP is the OVN-Kubernetes name of a pod's logical switch port.
func podLSP(namespace, name string) string { return namespace + "_" + name }

// CreatePod creates the Pod object, allocates the next free address of the node subnet, creates the logical switch
// port and the pod's network namespace (eth0, default route via the node switch's router IP), waits until
// ovn-controller has bound the port, then patches the pod status to Running with its podIPs (what a kubelet and a CNI
// would do). On failure everything made is removed again.
func (c *Cluster) CreatePod(ctx context.Context, spec PodSpec) (*Pod, error) {
	node, err := c.Node(spec.Node)
	if err != nil {
		return nil, err
	}
	if spec.Namespace == "" || spec.Name == "" {
		return nil, errors.New("pod namespace and name are required")
	}
	if c.st.Kubelets {
		// A Pod bound to a node is the kubelet's to run there (it would try to pull the placeholder image and write
		// the status the harness writes): in the kubelet mode pods are real (kubectl apply; the CNI plugin wires them).
		return nil, fmt.Errorf("pod %s/%s: the cluster runs kubelets, which run the pods bound to their nodes: create a real pod (kubectl apply; image oeip-prober:latest is there, docs/images.md)", spec.Namespace, spec.Name)
	}
	if err := c.ensureNamespace(ctx, spec.Namespace); err != nil {
		return nil, err
	}
	pod := &Pod{Namespace: spec.Namespace, Name: spec.Name, Node: node.Name,
		Netns: PodNetnsName(spec.Namespace, spec.Name), LSP: podLSP(spec.Namespace, spec.Name)}
	obj := podObject(spec)
	if _, err := c.cs.CoreV1().Pods(spec.Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create pod %s/%s: %w", spec.Namespace, spec.Name, err)
	}
	if err := c.plumbPod(ctx, node, pod, spec.IP); err != nil {
		return nil, errors.Join(err, c.DeletePod(context.WithoutCancel(ctx), spec.Namespace, spec.Name))
	}
	if err := c.markRunning(ctx, node, pod); err != nil {
		return nil, errors.Join(err, c.DeletePod(context.WithoutCancel(ctx), spec.Namespace, spec.Name))
	}
	return pod, nil
}

func (c *Cluster) ensureNamespace(ctx context.Context, ns string) error {
	_, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	return ensureServiceAccount(ctx, c.cs, ns)
}

func podObject(spec PodSpec) *corev1.Pod {
	no := false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Namespace: spec.Namespace, Labels: spec.Labels},
		Spec: corev1.PodSpec{
			NodeName:                     spec.Node,
			AutomountServiceAccountToken: &no,
			Containers:                   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// plumbPod wires a harness pod into OVN: its network namespace is created here; ip is PodSpec.IP.
func (c *Cluster) plumbPod(ctx context.Context, node NodeAddrs, pod *Pod, ip netip.Addr) error {
	return c.attach(ctx, node, pod, "eth0", false, ip)
}

// AttachPod wires the existing network namespace netns (a name under /run/netns, e.g. a containerd sandbox's) into
// OVN as pod namespace/name on node, with interface ifname: what CreatePod does for the harness's own pods, for the
// CNI plugin of the kubelet mode (test/cluster/cni.go). One rule for both: the next free address of the node's
// subnet (per family, the same host part), the OVN-Kubernetes MAC of the primary address, the logical switch port
// <namespace>_<name> with those addresses, a veth whose root end is the OVS port with iface-id = the LSP name, the
// default route via the node switch's router IP; it returns when ovn-controller has bound the port.
func (c *Cluster) AttachPod(ctx context.Context, node, namespace, name, netns, ifname string) (*Pod, error) {
	n, err := c.Node(node)
	if err != nil {
		return nil, err
	}
	pod := &Pod{Namespace: namespace, Name: name, Node: n.Name, Netns: netns, LSP: podLSP(namespace, name)}
	if err := c.attach(ctx, n, pod, ifname, true, netip.Addr{}); err != nil {
		return nil, err
	}
	return pod, nil
}

// attach allocates the address (want, when valid: PodSpec.IP) and creates the LSP (under the cluster-wide allocation
// lock), then the veth into pod.Netns (created unless netnsExists).
func (c *Cluster) attach(ctx context.Context, node NodeAddrs, pod *Pod, ifname string, netnsExists bool, want netip.Addr) error {
	nb, err := c.nbConnFor(ctx, node.Name)
	if err != nil {
		return err
	}
	unlock, err := lockFile(c.p.ipamLock())
	if err != nil {
		return err
	}
	err = func() error {
		defer unlock()
		_, exists, err := nb.portByName(pod.LSP)
		if err != nil {
			return err
		}
		if exists {
			return fmt.Errorf("pod %s/%s already has a logical switch port", pod.Namespace, pod.Name)
		}
		sw, err := nb.switchByName(node.Name)
		if err != nil {
			return err
		}
		used, err := nb.usedIPs(sw)
		if err != nil {
			return err
		}
		first := 0
		if want.IsValid() {
			i, ok := podIndex(node.Families[0].Subnet, want)
			if !ok {
				return fmt.Errorf("%s is not a pod address of node %s's subnet %s", want, node.Name, node.Families[0].Subnet)
			}
			first = i
		}
		for i := first; ; i++ {
			pod.IPs = pod.IPs[:0]
			free := true
			for _, f := range node.Families {
				ip, ok := PodIP(f.Subnet, i)
				if !ok {
					return fmt.Errorf("node %s subnet %s is full", node.Name, f.Subnet)
				}
				free = free && !used[ip]
				pod.IPs = append(pod.IPs, ip)
			}
			if free {
				break
			}
			if want.IsValid() {
				return fmt.Errorf("node %s: pod address %s is in use", node.Name, want)
			}
		}
		pod.IP = pod.IPs[0]
		pod.MAC = ovnMAC(pod.IP)
		addr := pod.MAC
		for _, ip := range pod.IPs {
			addr += " " + ip.String()
		}
		return nb.addPort(ctx, sw, &nbdb.LogicalSwitchPort{Name: pod.LSP,
			Addresses:   []string{addr},
			ExternalIDs: harnessIDs("namespace", pod.Namespace, "pod", pod.Name, "node", node.Name)})
	}()
	if err != nil {
		return fmt.Errorf("pod %s/%s port: %w", pod.Namespace, pod.Name, err)
	}
	v := veth{Host: podLink(pod.Namespace, pod.Name), Netns: pod.Netns, NetnsExists: netnsExists, Ifname: ifname,
		MAC: pod.MAC, Bridge: brIntOf(c.st.layout(), node.Name), OVSNode: ovsNodeOf(c.st.layout(), node.Name), IfaceID: pod.LSP}
	for i, f := range node.Families {
		v.CIDRs = append(v.CIDRs, netip.PrefixFrom(pod.IPs[i], f.Subnet.Bits()).String())
		v.Routes = append(v.Routes, plans[f.Family].defaultRoute+" via "+f.RouterIP.String()+" dev "+ifname)
	}
	if err := plumb(ctx, c.p, []veth{v}, true); err != nil {
		return fmt.Errorf("pod %s/%s namespace: %w", pod.Namespace, pod.Name, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return nb.waitPortsUp(wctx, pod.LSP)
}

func (c *Cluster) markRunning(ctx context.Context, node NodeAddrs, pod *Pod) error {
	obj, err := c.cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.Now()
	var cidrs, gws []string
	var podIPs []corev1.PodIP
	var hostIPs []corev1.HostIP
	for i, f := range node.Families {
		cidrs = append(cidrs, netip.PrefixFrom(pod.IPs[i], f.Subnet.Bits()).String())
		gws = append(gws, f.RouterIP.String())
		podIPs = append(podIPs, corev1.PodIP{IP: pod.IPs[i].String()})
		hostIPs = append(hostIPs, corev1.HostIP{IP: f.NodeIP.String()})
	}
	networks, _ := json.Marshal(map[string]any{"default": map[string]any{
		"ip_addresses": cidrs, "mac_address": pod.MAC, "gateway_ips": gws}})
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations["k8s.ovn.org/pod-networks"] = string(networks)
	if obj, err = c.cs.CoreV1().Pods(pod.Namespace).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		return err
	}
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	obj.Status = corev1.PodStatus{
		Phase:     corev1.PodRunning,
		HostIP:    node.NodeIP.String(),
		HostIPs:   hostIPs,
		PodIP:     pod.IP.String(),
		PodIPs:    podIPs,
		StartTime: &now,
		Conditions: []corev1.PodCondition{cond(corev1.PodScheduled), cond(corev1.PodInitialized),
			cond(corev1.ContainersReady), cond(corev1.PodReady)},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "c", Ready: true, Image: obj.Spec.Containers[0].Image,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
	}
	_, err = c.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, obj, metav1.UpdateOptions{})
	return err
}

// DeletePod deletes the Pod object, the pod's network namespace (and every process in it), its OVS port and its
// logical switch port. Missing parts are skipped, so it also cleans up a half-created pod.
func (c *Cluster) DeletePod(ctx context.Context, namespace, name string) error {
	var errs []error
	grace := int64(0)
	err := c.cs.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	ns := PodNetnsName(namespace, name)
	if _, err := os.Stat("/run/netns/" + ns); err == nil {
		if err := deleteNetns(ctx, ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.DetachPod(ctx, namespace, name); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DetachPod undoes AttachPod but for the network namespace: the veth's OVS end, its OVS port and the pod's logical
// switch port. Missing parts are skipped (it also cleans up a half-wired pod).
func (c *Cluster) DetachPod(ctx context.Context, namespace, name string) error {
	var errs []error
	if l := podLink(namespace, name); linkExists(l) {
		if _, err := run(ctx, "ip", "link", "del", l); err != nil && linkExists(l) {
			errs = append(errs, err)
		}
	}
	if c.st.layout() == LayoutInterconnect {
		return errors.Join(append(errs, c.detachZonePod(ctx, namespace, name))...)
	}
	if _, err := vsctl(ctx, c.p, "--if-exists", "del-port", BrInt, podLink(namespace, name)); err != nil {
		errs = append(errs, err)
	}
	nb, err := c.nbConn(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if p, ok, err := nb.portByName(podLSP(namespace, name)); err != nil {
		errs = append(errs, err)
	} else if ok {
		node := p.ExternalIDs["node"]
		if err := nb.deletePort(ctx, node, p.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// detachZonePod is DetachPod in the interconnect layout: the logical switch port in whichever zone has it, and the
// veth's OVS end and OVS port in that zone's chassis (in every chassis when no zone has the port).
func (c *Cluster) detachZonePod(ctx context.Context, namespace, name string) error {
	var errs []error
	var chassis []string
	for _, n := range c.nodes {
		nb, err := c.nbConnFor(ctx, n.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p, ok, err := nb.portByName(podLSP(namespace, name)); err != nil {
			errs = append(errs, err)
		} else if ok {
			chassis = append(chassis, n.Name)
			if err := nb.deletePort(ctx, n.Name, p.Name); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(chassis) == 0 {
		for _, n := range c.nodes {
			chassis = append(chassis, n.Name)
		}
	}
	l := podLink(namespace, name)
	for _, node := range chassis {
		// Usually gone with the pod's namespace: an error counts only when the link is still there.
		if _, err := run(ctx, "ip", "-n", ChassisNetnsName(node), "link", "del", l); err != nil {
			if _, serr := run(ctx, "ip", "-n", ChassisNetnsName(node), "link", "show", l); serr == nil {
				errs = append(errs, err)
			}
		}
		if _, err := zoneVsctl(ctx, c.p, node, "--if-exists", "del-port", l); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lockFile takes an exclusive flock on path (created if needed) and returns its release.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil // closing the file releases the lock (opened close-on-exec: no child holds it)
}

// Exec runs argv inside the pod's network namespace and returns its combined output.
func (c *Cluster) Exec(ctx context.Context, namespace, name string, argv ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", PodNetnsName(namespace, name)},
		argv...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("exec in pod %s/%s %v: %w: %s", namespace, name, argv, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// Request connects from inside the pod to the echo server on the external host (proto "tcp" or "udp"), over the
// cluster's primary family, and returns the source address the echo server saw. timeout bounds the whole exchange.
func (c *Cluster) Request(ctx context.Context, namespace, name, proto string, timeout time.Duration) (netip.Addr, error) {
	return c.RequestFamily(ctx, namespace, name, Families(c.st.IPFamily)[0], proto, timeout)
}

// RequestFamily is Request over family 4 or 6 (to the external host's address of that family).
func (c *Cluster) RequestFamily(ctx context.Context, namespace, name string, family int, proto string,
	timeout time.Duration) (netip.Addr, error) {
	return RequestFrom(ctx, PodNetnsName(namespace, name), proto,
		netip.AddrPortFrom(ExternalHost(family), EchoPort).String(), timeout)
}

// RequestFrom dials address (an echo server) from inside network namespace netns and returns the source address it
// reports ("tcp-peer=IP" / "udp-peer=IP").
func RequestFrom(ctx context.Context, netns, proto, address string, timeout time.Duration) (netip.Addr, error) {
	if proto != "tcp" && proto != "udp" {
		return netip.Addr{}, fmt.Errorf("proto %q is neither tcp nor udp", proto)
	}
	deadline := time.Now().Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn, err := dialInNetns(netns, proto, address, time.Until(deadline))
	if err != nil {
		return netip.Addr{}, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	if proto == "udp" {
		if _, err := conn.Write([]byte("?\n")); err != nil {
			return netip.Addr{}, err
		}
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %s from %s: %w", proto, address, netns, err)
	}
	_, v, ok := strings.Cut(strings.TrimSpace(line), "-peer=")
	if !ok {
		return netip.Addr{}, fmt.Errorf("unexpected echo reply %q", line)
	}
	return netip.ParseAddr(v)
}

// dialInNetns creates the socket inside network namespace name (the socket stays there; I/O works from any thread).
func dialInNetns(name, network, address string, timeout time.Duration) (net.Conn, error) {
	var conn net.Conn
	if err := doInNetns(name, func() error {
		var err error
		conn, err = net.DialTimeout(network, address, timeout)
		return err
	}); err != nil {
		return nil, fmt.Errorf("dial %s %s from %s: %w", network, address, name, err)
	}
	return conn, nil
}

// DialFrom dials address from inside network namespace netns (a pod's, a node's or the external host's); the
// connection's socket stays in that namespace.
func DialFrom(netns, network, address string, timeout time.Duration) (net.Conn, error) {
	return dialInNetns(netns, network, address, timeout)
}

// ListenIn listens on address inside network namespace netns (e.g. ExternalNetns for a server on the external host).
func ListenIn(netns, network, address string) (net.Listener, error) {
	var ln net.Listener
	if err := doInNetns(netns, func() error {
		var err error
		ln, err = net.Listen(network, address)
		return err
	}); err != nil {
		return nil, fmt.Errorf("listen %s %s in %s: %w", network, address, netns, err)
	}
	return ln, nil
}

// doInNetns runs fn on an OS thread switched into network namespace name, then switches back. Sockets fn creates stay
// in that namespace.
func doInNetns(name string, fn func() error) error {
	target, err := os.Open("/run/netns/" + name)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", name, err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter network namespace %s: %w", name, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// This thread is stuck in the other namespace: keep it locked so that it exits with the goroutine.
		return errors.Join(fnErr, fmt.Errorf("return from network namespace %s: %w", name, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}
