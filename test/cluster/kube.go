package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// Node annotations written by the harness (OVN-Kubernetes formats; DESIGN.md section 3).
const (
	annNodeSubnets = "k8s.ovn.org/node-subnets"
	annGRLRPAddr   = "k8s.ovn.org/node-gateway-router-lrp-ifaddr"
	annL3Gateway   = "k8s.ovn.org/l3-gateway-config"
	// upstream's interconnect facts (written in both layouts; see nodeObjectIn)
	annNodeID        = "k8s.ovn.org/node-id"
	annTransitIfAddr = "k8s.ovn.org/node-transit-switch-port-ifaddr"
	annChassisID     = "k8s.ovn.org/node-chassis-id"
	annEncapIPs      = "k8s.ovn.org/node-encap-ips"
)

func newClient(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	return kubernetes.NewForConfig(cfg)
}

// nodeObjectIn is nodeObject of a cluster of layout, with upstream's interconnect annotations: k8s.ovn.org/node-id,
// node-transit-switch-port-ifaddr (in both layouts: the centralized one has no transit switch, the facts are
// harmless), node-chassis-id and node-encap-ips (the chassis that hosts the node's gateway router and ports, and its
// Geneve endpoint: ChassisName(node) and 100.89.0.<id> in the interconnect layout, the one Chassis and its
// ovn-encap-ip 127.0.0.1 in the centralized one).
func nodeObjectIn(n NodeAddrs, layout string) *corev1.Node {
	obj := nodeObject(n)
	ts := map[string]string{}
	for _, f := range n.Families {
		ts[familyKey(f.Family)] = netip.PrefixFrom(f.TransitIP, plans[f.Family].transit.Bits()).String()
	}
	tsJSON, _ := json.Marshal(ts)
	chassis, encap := Chassis, "127.0.0.1"
	if layout == LayoutInterconnect {
		chassis, encap = ChassisName(n.Name), n.EncapIP.String()
	}
	encapJSON, _ := json.Marshal([]string{encap})
	obj.Annotations[annNodeID] = strconv.Itoa(n.ID)
	obj.Annotations[annTransitIfAddr] = string(tsJSON)
	obj.Annotations[annChassisID] = chassis
	obj.Annotations[annEncapIPs] = string(encapJSON)
	return obj
}

// nodeObject is the Node a harness node is registered as (without status; see nodeStatus).
func nodeObject(n NodeAddrs) *corev1.Node {
	var subnets, grIPs, nextHops []string
	lrpAddrs := map[string]string{}
	for _, f := range n.Families {
		subnets = append(subnets, f.Subnet.String())
		lrpAddrs[familyKey(f.Family)] = netip.PrefixFrom(f.JoinIP, plans[f.Family].join.Bits()).String()
		grIPs = append(grIPs, netip.PrefixFrom(f.GatewayIP, plans[f.Family].external.Bits()).String())
		nextHops = append(nextHops, plans[f.Family].extHost.String())
	}
	subnetsJSON, _ := json.Marshal(map[string][]string{"default": subnets})
	lrp, _ := json.Marshal(lrpAddrs)
	// OVN-Kubernetes' description of the node's gateway: here the gateway router's external port (its own MAC and
	// addresses on br-ex, see docs/local-cluster.md) and the external host as next hop.
	l3gw, _ := json.Marshal(map[string]any{"default": map[string]any{"mac-address": n.GatewayMAC,
		"interface-id": "breth0_" + n.Name, "ip-addresses": grIPs, "next-hops": nextHops}})
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: n.Name,
			Labels: map[string]string{
				"kubernetes.io/hostname": n.Name,
				"kubernetes.io/os":       "linux",
				HarnessKey:               "true",
			},
			Annotations: map[string]string{annNodeSubnets: string(subnetsJSON), annGRLRPAddr: string(lrp),
				annL3Gateway: string(l3gw)},
		},
	}
}

// familyKey is the key of family 4 or 6 in the {"ipv4":...,"ipv6":...} node annotations.
func familyKey(family int) string {
	if family == 4 {
		return "ipv4"
	}
	return "ipv6"
}

func nodeStatus(n NodeAddrs, now metav1.Time) corev1.NodeStatus {
	var addrs []corev1.NodeAddress
	for _, f := range n.Families {
		addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: f.NodeIP.String()})
	}
	addrs = append(addrs, corev1.NodeAddress{Type: corev1.NodeHostName, Address: n.Name})
	return corev1.NodeStatus{
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			Message: "ovn-egressip local cluster heartbeat", LastHeartbeatTime: now, LastTransitionTime: now,
		}},
		Addresses: addrs,
	}
}

// registerNodes creates (or updates) the Node objects with their annotations and, unless kubelets run (they write
// their node's status), a Ready status.
func registerNodes(ctx context.Context, cs kubernetes.Interface, nodes []NodeAddrs, kubelets bool, layout string) error {
	now := metav1.Now()
	for _, n := range nodes {
		obj := nodeObjectIn(n, layout)
		created, err := cs.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			created, err = cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		if kubelets {
			continue
		}
		created.Status = nodeStatus(n, now)
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
	}
	return nil
}

// setNodeReady sets the status of the node's Ready condition (the heartbeat keeps refreshing it as it is).
func setNodeReady(ctx context.Context, cs kubernetes.Interface, node string, ready bool) error {
	st, reason := corev1.ConditionTrue, "KubeletReady"
	if !ready {
		st, reason = corev1.ConditionFalse, "KubeletNotReady"
	}
	now := metav1.Now()
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
		Type: corev1.NodeReady, Status: st, Reason: reason, Message: "set by the ovn-egressip local cluster",
		LastHeartbeatTime: now, LastTransitionTime: now,
	}}}})
	_, err := cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// heartbeat refreshes lastHeartbeatTime of the Ready condition of every harness node, keeping its status.
func heartbeat(ctx context.Context, cs kubernetes.Interface) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: HarnessKey + "=true"})
	if err != nil {
		return err
	}
	now := metav1.Now()
	for _, n := range nodes.Items {
		patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
			"type": corev1.NodeReady, "lastHeartbeatTime": now,
		}}}})
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.StrategicMergePatchType, patch,
			metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("heartbeat %s: %w", n.Name, err)
		}
	}
	return nil
}

// ensureServiceAccount creates the namespace's "default" ServiceAccount when missing (no controller-manager runs, and
// the ServiceAccount admission plugin rejects pods without it).
func ensureServiceAccount(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	_, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err == nil || apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// RunAgent is the harness's stand-in for the kubelet and controller-manager: every interval it refreshes the Ready
// heartbeat of the harness nodes, and it creates the default ServiceAccount of every namespace. It returns when ctx
// ends. Errors are reported through logf and retried. interval 0: no heartbeat (kubelets report their nodes).
func RunAgent(ctx context.Context, kubeconfig string, interval time.Duration, logf func(string, ...any)) error {
	cs, err := newClient(kubeconfig)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactory(cs, 0)
	nsInformer := factory.Core().V1().Namespaces().Informer()
	_, err = nsInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		ns, ok := obj.(*corev1.Namespace)
		if !ok || ns.DeletionTimestamp != nil {
			return
		}
		if err := ensureServiceAccount(ctx, cs, ns.Name); err != nil && !apierrors.IsForbidden(err) {
			logf("service account for namespace %s: %v", ns.Name, err)
		}
	}})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if interval == 0 {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := heartbeat(ctx, cs); err != nil && ctx.Err() == nil {
			logf("%v", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
