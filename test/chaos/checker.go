package chaos

// The independent checker: what status, NB and (local gateway mode) the nodes' host state must hold, derived from
// the documented semantics (docs/egressip.md: "Assignment", "OVN Northbound rows", "Host side, local gateway
// mode"), reading the API objects, NB rows, and each node's addresses and iptables rules (ip, iptables-save in the
// node's netns) directly. It calls nothing of the product.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/ovn-org/libovsdb/client"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// assignableLabel is the documented node label (docs/egressip.md).
const assignableLabel = "k8s.ovn.org/egress-assignable"

// idKey is the documented external_ids key of our NB rows: k8s.ovn.org/<name> (owner-type, name, rule, pod, ...).
func idKey(name string) string { return "k8s.ovn.org/" + name }

// verdict is one check's result.
type verdict struct {
	statusErrs []string // status items that break the assignment rules
	missing    []string // NB rows that must exist and do not
	stale      []string // NB rows of ours that must not exist (or exist twice)
	// sources: for each pod (namespace/name), the sources the echo server may see: the pod's EgressIP's assigned
	// IPs when it is served, else its node's own egress address.
	sources map[string][]netip.Addr
}

func (v verdict) ok() bool { return len(v.statusErrs)+len(v.missing)+len(v.stale) == 0 }

func (v verdict) String() string {
	return fmt.Sprintf("status errors %d %v; missing rows %d %v; stale rows %d %v", len(v.statusErrs), v.statusErrs,
		len(v.missing), v.missing, len(v.stale), v.stale)
}

type checker struct {
	kube  kubernetes.Interface
	eip   egressipclientset.Interface
	nb    client.Client // leader-only, monitors Logical_Router, Logical_Router_Policy, NAT
	c     *cluster.Cluster
	isCut func(node string) bool
	// host reads a node's host state (local gateway mode); hostState by default.
	host func(ctx context.Context, node string) (hostState, error)
}

func selects(sel metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(&sel)
	return err == nil && s.Matches(labels.Set(l))
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// check compares the cluster with what it must be now.
func (k *checker) check(ctx context.Context) (verdict, error) {
	v := verdict{sources: map[string][]netip.Addr{}}
	eips, err := k.eip.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	nodes, err := k.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	nss, err := k.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	pods, err := k.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	local := k.c.GatewayMode() == cluster.GatewayLocal
	eligible := map[string]bool{}
	nexthop := map[string]string{} // shared: the gateway router's join IP; local: the management port IP
	// held: a labelled node that is cut while no other labelled node is not. The master declares a silent node
	// unreachable only once another egress node answered since its failures began (docs/egressip.md, "A master that
	// hears no node suspects itself"); with no other egress node it keeps the node's IPs in place. Whether another
	// node it probed answered before a change of this round unlabelled it is a race the harness cannot see, so for
	// such a node both are right: its items kept, or moved away.
	held := map[string]bool{}
	witnesses := 0
	for _, n := range nodes.Items {
		if _, ok := n.Labels[assignableLabel]; ok && !k.isCut(n.Name) {
			witnesses++
		}
	}
	for _, n := range nodes.Items {
		_, labelled := n.Labels[assignableLabel]
		if labelled && nodeReady(&n) && !k.isCut(n.Name) {
			eligible[n.Name] = true
		}
		if labelled && nodeReady(&n) && k.isCut(n.Name) && witnesses == 0 {
			held[n.Name] = true
		}
		if a, err := k.c.Node(n.Name); err == nil {
			nexthop[n.Name] = a.JoinIP.String()
			if local {
				nexthop[n.Name] = a.MgmtIP.String()
			}
		}
	}
	nsLabels := map[string]map[string]string{}
	for _, ns := range nss.Items {
		nsLabels[ns.Name] = ns.Labels
	}

	// Status: every IP of the spec placed on its own eligible node, as many as there are eligible nodes (the
	// harness never lets two EgressIPs ask for one IP, so no conflict rule applies).
	want := map[string]int{} // NB row line -> count wanted
	servedBy := map[string]*egressipv1.EgressIP{}
	for i := range eips.Items {
		e := &eips.Items[i]
		nodesUsed := map[string]bool{}
		for _, it := range e.Status.Items {
			switch {
			case !slices.Contains(e.Spec.EgressIPs, it.EgressIP):
				v.statusErrs = append(v.statusErrs, fmt.Sprintf("%s: %s@%s not in spec", e.Name, it.EgressIP, it.Node))
			case !eligible[it.Node] && !held[it.Node]:
				v.statusErrs = append(v.statusErrs, fmt.Sprintf("%s: %s@%s: node not eligible", e.Name, it.EgressIP, it.Node))
			case nodesUsed[it.Node]:
				v.statusErrs = append(v.statusErrs, fmt.Sprintf("%s: two IPs on %s", e.Name, it.Node))
			}
			nodesUsed[it.Node] = true
		}
		w := min(len(e.Spec.EgressIPs), len(eligible))
		if n := len(e.Status.Items); n != w && (len(held) == 0 || n != min(len(e.Spec.EgressIPs), len(eligible)+len(held))) {
			v.statusErrs = append(v.statusErrs, fmt.Sprintf("%s: %d status items, want %d", e.Name, n, w))
		}
		if len(e.Status.Items) == 0 {
			continue
		}
		var nh []string
		for _, it := range e.Status.Items {
			nh = append(nh, nexthop[it.Node])
		}
		sort.Strings(nh)
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.Spec.HostNetwork ||
				!selects(e.Spec.NamespaceSelector, nsLabels[p.Namespace]) || !selects(e.Spec.PodSelector, p.Labels) {
				continue
			}
			key := p.Namespace + "/" + p.Name
			servedBy[key] = e
			want[fmt.Sprintf("reroute %s %s %v (%s)", key, p.Status.PodIP, nh, e.Name)]++
			if local {
				continue // no SNAT rows: the holders SNAT (checked on the hosts below)
			}
			for _, it := range e.Status.Items {
				want[fmt.Sprintf("snat GR_%s %s <- %s (%s)", it.Node, it.EgressIP, p.Status.PodIP, e.Name)]++
			}
		}
	}
	for _, p := range pods.Items {
		key := p.Namespace + "/" + p.Name
		if e := servedBy[key]; e != nil {
			for _, it := range e.Status.Items {
				v.sources[key] = append(v.sources[key], netip.MustParseAddr(it.EgressIP))
			}
		} else if src, err := k.c.EgressSource(p.Spec.NodeName); err == nil {
			v.sources[key] = []netip.Addr{src}
		}
	}

	have, err := k.nbRows(ctx)
	if err != nil {
		return v, err
	}
	for line, n := range want {
		if have[line] < n {
			v.missing = append(v.missing, line)
		}
	}
	for line, n := range have {
		if n > want[line] {
			v.stale = append(v.stale, fmt.Sprintf("%s (x%d)", line, n))
		}
	}
	if local {
		if err := k.checkHosts(ctx, eips.Items, nodes.Items, servedBy, pods.Items, &v); err != nil {
			return v, err
		}
	}
	sort.Strings(v.missing)
	sort.Strings(v.stale)
	return v, nil
}

// nbRows reads our EgressIP rows (external_ids owner-type=EgressIP) as lines: reroute policies on
// ovn_cluster_router and SNATs with the router that holds them.
func (k *checker) nbRows(ctx context.Context) (map[string]int, error) {
	var routers []nbdb.LogicalRouter
	var pols []nbdb.LogicalRouterPolicy
	var nats []nbdb.NAT
	for _, l := range []any{&routers, &pols, &nats} {
		if err := k.nb.List(ctx, l); err != nil {
			return nil, err
		}
	}
	parent := map[string]string{}
	for _, r := range routers {
		for _, u := range append(slices.Clone(r.Policies), r.Nat...) {
			parent[u] = r.Name
		}
	}
	out := map[string]int{}
	for _, p := range pols {
		if p.ExternalIDs[idKey("owner-type")] != "EgressIP" || p.ExternalIDs[idKey("rule")] != "reroute" {
			continue
		}
		nh := slices.Clone(p.Nexthops)
		sort.Strings(nh)
		ip := strings.TrimPrefix(p.Match, "ip4.src == ")
		if parent[p.UUID] != "ovn_cluster_router" || p.Action != "reroute" || p.Priority != 100 {
			ip = fmt.Sprintf("%s [bad row: router %q action %s priority %d]", ip, parent[p.UUID], p.Action, p.Priority)
		}
		out[fmt.Sprintf("reroute %s %s %v (%s)", p.ExternalIDs[idKey("pod")], ip, nh, p.ExternalIDs[idKey("name")])]++
	}
	for _, n := range nats {
		if n.ExternalIDs[idKey("owner-type")] != "EgressIP" {
			continue
		}
		line := fmt.Sprintf("snat %s %s <- %s (%s)", parent[n.UUID], n.ExternalIP, n.LogicalIP, n.ExternalIDs[idKey("name")])
		if n.Type != "snat" || n.ExternalIDs[idKey("rule")] != "snat" {
			line += fmt.Sprintf(" [bad row: type %s rule %s]", n.Type, n.ExternalIDs[idKey("rule")])
		}
		out[line]++
	}
	return out, nil
}
