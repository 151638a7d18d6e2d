package scale

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// slot is where a pod goes: its node and its IP in that node's subnet.
type slot struct {
	node cluster.NodeAddrs
	ip   netip.Addr
}

// podsPerNode is how many pod IPs a node subnet has (cluster.PodIP: .3 to .253).
const podsPerNode = 251

// freshSlot returns the next never-used pod address, nodes round robin; false
// when every node subnet is full.
func (h *harness) freshSlot() (slot, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.nextSlot
	i := id % len(h.nodes)
	node := h.nodes[i]
	if id/len(h.nodes) >= podsPerNode-h.fromTop[i] {
		return slot{}, false // the rest of this subnet went to freshSlotOn
	}
	ip, ok := cluster.PodIP(node.Subnet, id/len(h.nodes))
	if !ok {
		return slot{}, false
	}
	h.nextSlot++
	return slot{node: node, ip: ip}, true
}

// freshSlotOn returns a never-used pod address on the node of index i (0-based),
// taken from the top of its subnet down; false when the subnet is full.
func (h *harness) freshSlotOn(i int) (slot, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fromTop == nil {
		h.fromTop = map[int]int{}
	}
	k := podsPerNode - 1 - h.fromTop[i]
	used := 0 // the addresses freshSlot gave node i: indexes 0..used-1
	if h.nextSlot > i {
		used = (h.nextSlot-1-i)/len(h.nodes) + 1
	}
	if k < used {
		return slot{}, false
	}
	ip, ok := cluster.PodIP(h.nodes[i].Subnet, k)
	if !ok {
		return slot{}, false
	}
	h.fromTop[i]++
	return slot{node: h.nodes[i], ip: ip}, true
}

// slotOf returns the slot of a pod IP of the layout (10.244.<node index>.x).
func (h *harness) slotOf(ip netip.Addr) slot {
	return slot{node: h.nodes[int(ip.As4()[2])-1], ip: ip}
}

func (h *harness) podName() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nextName++
	return fmt.Sprintf("pod-%05d", h.nextName-1)
}

// createPod creates a running pod in ns at s: the Pod (no IP yet), then, once the
// tracker expects it, its status with the IP. It returns the pod's key, when the
// status update returned (the pod has its IP) and how long it took.
func (h *harness) createPod(ctx context.Context, ns string, s slot) (key string, ipSet time.Time, write time.Duration, err error) {
	name := h.podName()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "scale"}},
		Spec: corev1.PodSpec{NodeName: s.node.Name, Containers: []corev1.Container{{Name: "c", Image: "scale.invalid/pause"}},
			TerminationGracePeriodSeconds: new(int64)},
	}
	created, err := h.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return "", time.Time{}, 0, fmt.Errorf("create pod %s/%s: %w", ns, name, err)
	}
	key = ns + "/" + name
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: s.ip.String(), PodIPs: []corev1.PodIP{{IP: s.ip.String()}}}
	// Expected before the write: rows that arrive before the response are not missed.
	before := time.Now()
	h.tr.expectPod(key, s.ip, before)
	if _, err := h.kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return "", time.Time{}, 0, fmt.Errorf("pod %s status: %w", key, err)
	}
	ipSet = time.Now()
	return key, ipSet, ipSet.Sub(before), nil
}

// deletePod deletes pod key (grace period 0); the tracker stops expecting it first.
func (h *harness) deletePod(ctx context.Context, key string) error {
	h.tr.forgetPod(key, time.Now())
	ns, name, _ := strings.Cut(key, "/")
	if err := h.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		return fmt.Errorf("delete pod %s: %w", key, err)
	}
	return nil
}

// poke changes a label of one served pod that no EgressIP selects on: an event
// every master must look at and that changes nothing.
func (h *harness) poke(ctx context.Context) error {
	h.mu.Lock()
	h.pokes++
	n := h.pokes
	h.mu.Unlock()
	ns, name, _ := strings.Cut(h.probe, "/")
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"scale.ovn-egressip/touch":"%d"}}}`, n))
	if _, err := h.kube.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("poke pod %s: %w", h.probe, err)
	}
	return nil
}

// layout creates the nodes, namespaces and pods (each pod with a fresh slot).
func (h *harness) layout(ctx context.Context) {
	h.parallel(len(h.nodes), func(i int) error {
		n := cluster.SimulatedNode(h.nodes[i], true)
		if h.nodeHook != nil {
			h.nodeHook(n, i)
		}
		st := n.Status
		created, err := h.kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		created.Status = st
		if _, err = h.kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
		return nil
	})
	h.parallel(h.cfg.Namespaces, func(i int) error {
		_, err := h.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespaceName(i)}}, metav1.CreateOptions{})
		return err
	})
	h.parallel(h.cfg.Namespaces*h.cfg.PodsPerNamespace, func(i int) error {
		s, ok := h.freshSlot()
		if !ok {
			return fmt.Errorf("node subnets full")
		}
		_, _, _, err := h.createPod(ctx, namespaceName(i%h.cfg.Namespaces), s)
		return err
	})
	pods, _ := h.tr.expected()
	keys := sortedKeys(pods)
	h.probe = keys[len(keys)-1]
}

// churnVictims returns the first n pods by key, never the probe.
func (h *harness) churnVictims(n int) []string {
	pods, _ := h.tr.expected()
	var out []string
	for _, k := range sortedKeys(pods) {
		if k != h.probe && len(out) < n {
			out = append(out, k)
		}
	}
	return out
}

// replace deletes pod key and creates a pod in its namespace at a fresh slot; when
// every node subnet is full (50,000 pods on 200 nodes), the new pod takes the old
// one's IP in the next namespace instead, so that its rows still change.
func (h *harness) replace(ctx context.Context, key string) error {
	old, ok := h.tr.podIP(key)
	if !ok {
		return fmt.Errorf("pod %s: not expected", key)
	}
	if err := h.deletePod(ctx, key); err != nil {
		return err
	}
	ns, _, _ := strings.Cut(key, "/")
	s, fresh := h.freshSlot()
	if !fresh {
		s = h.slotOf(old)
		var i int
		if _, err := fmt.Sscanf(ns, "scale-%d", &i); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
		ns = namespaceName((i + 1) % h.cfg.Namespaces)
	}
	_, _, _, err := h.createPod(ctx, ns, s)
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// parallel runs f(0..n-1), 32 at a time; any error is fatal.
func (h *harness) parallel(n int, f func(i int) error) {
	h.t.Helper()
	var g errgroup.Group
	g.SetLimit(32)
	for i := 0; i < n; i++ {
		g.Go(func() error { return f(i) })
	}
	if err := g.Wait(); err != nil {
		h.t.Fatal(err)
	}
}
