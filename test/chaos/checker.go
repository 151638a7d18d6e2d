package chaos

// The independent checker: what status, NB and (local gateway mode) the nodes' host state must hold, derived from
// the documented semantics (docs/egressip.md: "Assignment", "OVN Northbound rows", "Host side, local gateway
// mode"; in the interconnect layout docs/interconnect.md: "Which process writes which row in which database",
// "Readiness and moves across zones"), reading the API objects, NB rows (every zone's NB in the interconnect
// layout), and each node's addresses and iptables rules (ip, iptables-save in the node's netns) directly. It calls
// nothing of the product.

import (
	"context"
	"encoding/json"
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
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// servedPodsSet is the documented address set of the served pods' IPv4 addresses (docs/egressip.md, "OVN Northbound
// rows"; in the interconnect layout each zone's holds its own served pods only, docs/interconnect.md).
const servedPodsSet = "egressip_served_pods_v4"

// verdict is one check's result.
type verdict struct {
	statusErrs []string // status items that break the assignment rules
	missing    []string // NB rows that must exist and do not
	stale      []string // NB rows of ours that must not exist (or exist twice)
	// sources: for each pod (namespace/name), the sources the echo server may see: the pod's EgressIP's assigned
	// IPs when it is served, else its node's own egress address.
	sources map[string][]netip.Addr
	// rows is how many EgressIP rows (reroutes, SNATs, served-pods addresses) the NB databases must hold.
	rows int
	// own are each pod's own sources in the state read (own.go); explain is what explain reads of that state
	// (desired.go). Both are set by a full check only.
	own     ownSources
	explain master.ExplainInput
}

func (v verdict) ok() bool { return len(v.statusErrs)+len(v.missing)+len(v.stale) == 0 }

func (v verdict) String() string {
	return fmt.Sprintf("status errors %d %v; missing rows %d %v; stale rows %d %v", len(v.statusErrs), v.statusErrs,
		len(v.missing), v.missing, len(v.stale), v.stale)
}

type checker struct {
	kube kubernetes.Interface
	eip  egressipclientset.Interface
	// nb are the NB clients by zone (monitors of Logical_Router, Logical_Router_Policy, NAT): "" the one NB of the
	// centralized layout (leader-only), or each node's zone NB in the interconnect layout.
	nb    map[string]client.Client
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

// check compares the cluster with what it must be now; statusOnly checks EgressIP status alone.
func (k *checker) check(ctx context.Context, statusOnly bool) (verdict, error) {
	v := verdict{sources: map[string][]netip.Addr{}}
	eips, nss, pods, err := k.listOwnInputs(ctx)
	if err != nil {
		return v, err
	}
	nodes, err := k.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return v, err
	}
	local := k.c.GatewayMode() == gwmode.Local
	ic := k.c.Layout() == cluster.LayoutInterconnect
	eligible := map[string]bool{}
	nexthop := map[string]string{} // shared: the gateway router's join IP; local: the management port IP
	transit := map[string]string{} // interconnect: the transit switch IP, other zones' next hop toward the node
	// held: a labelled node that is cut while no other labelled node is not. The master declares a silent node
	// unreachable only once another egress node answered since its failures began (docs/egressip.md, "A master that
	// hears no node suspects itself"); with no other egress node it keeps the node's IPs in place. Whether another
	// node it probed answered before a change of this round unlabelled it is a race the harness cannot see, so for
	// such a node both are right: its items kept, or moved away.
	held := map[string]bool{}
	witnesses := 0
	for _, n := range nodes.Items {
		if _, ok := n.Labels[annotations.EgressAssignableLabel]; ok && !k.isCut(n.Name) {
			witnesses++
		}
	}
	for _, n := range nodes.Items {
		_, labelled := n.Labels[annotations.EgressAssignableLabel]
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
			transit[n.Name] = a.TransitIP.String()
		}
	}
	nsLabels := map[string]map[string]string{}
	for _, ns := range nss {
		nsLabels[ns.Name] = ns.Labels
	}

	// Status: every IP of the spec placed on its own eligible node, as many as there are eligible nodes (the
	// harness never lets two EgressIPs ask for one IP, so no conflict rule applies).
	want := map[string]int{} // NB row line -> count wanted
	servedBy := map[string]*egressipv1.EgressIP{}
	for i := range eips {
		e := &eips[i]
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
		for _, p := range pods {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.Spec.HostNetwork ||
				!selects(e.Spec.NamespaceSelector, nsLabels[p.Namespace]) || !selects(e.Spec.PodSelector, p.Labels) {
				continue
			}
			key := p.Namespace + "/" + p.Name
			servedBy[key] = e
			if ic {
				want[fmt.Sprintf("zone %s: address set %s has %s", p.Spec.NodeName, servedPodsSet, p.Status.PodIP)]++
			} else {
				want[fmt.Sprintf("address set %s has %s", servedPodsSet, p.Status.PodIP)]++
			}
			if ic {
				wantZoneRows(want, e, &p, local, nexthop, transit)
				continue
			}
			var nh []string
			for _, it := range e.Status.Items {
				nh = append(nh, nexthop[it.Node])
			}
			sort.Strings(nh)
			want[fmt.Sprintf("reroute %s %s %v (%s)", key, p.Status.PodIP, nh, e.Name)]++
			if local {
				continue // no SNAT rows: the holders SNAT (checked on the hosts below)
			}
			for _, it := range e.Status.Items {
				want[fmt.Sprintf("snat GR_%s %s <- %s (%s)", it.Node, it.EgressIP, p.Status.PodIP, e.Name)]++
			}
		}
	}
	if statusOnly {
		return v, nil
	}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		if e := servedBy[key]; e != nil {
			for _, it := range e.Status.Items {
				v.sources[key] = append(v.sources[key], netip.MustParseAddr(it.EgressIP))
			}
		} else if src, err := k.c.EgressSource(p.Spec.NodeName); err == nil {
			v.sources[key] = []netip.Addr{src}
		}
	}

	v.own = k.ownFrom(eips, nss, pods)
	if v.explain, err = explainInput(ctx, k.c.GatewayMode(), k.nb, k.isCut, eips, nodes.Items, nss, pods); err != nil {
		return v, err
	}

	have := map[string]int{}
	for zone, nb := range k.nb {
		if err := k.nbRows(ctx, zone, nb, have); err != nil {
			return v, fmt.Errorf("zone %q NB: %w", zone, err)
		}
	}
	if ic {
		checkZoneAnnotations(eips, nodes.Items, k.isCut, &v)
		if err := desiredOpinion(v.explain, eips, &v); err != nil {
			return v, err
		}
	}
	for line, n := range want {
		v.rows += n
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
		if err := k.checkHosts(ctx, eips, nodes.Items, servedBy, pods, &v); err != nil {
			return v, err
		}
	}
	sort.Strings(v.missing)
	sort.Strings(v.stale)
	return v, nil
}

// ownFrom is ownOf for one read of the API, with this cluster's addresses: each node's egress source, and in the
// interconnect layout's shared gateway mode the holders' gateway router addresses (whyHolderGR).
func (k *checker) ownFrom(eips []egressipv1.EgressIP, nss []corev1.Namespace, pods []corev1.Pod) ownSources {
	var holderGR func(string) (netip.Addr, error)
	if k.c.Layout() == cluster.LayoutInterconnect && k.c.GatewayMode() == gwmode.Shared {
		holderGR = k.c.EgressSource // the gateway router's external IP in shared gateway mode
	}
	return ownOf(eips, nss, pods, k.c.EgressSource, holderGR)
}

// readOwn reads the API (EgressIPs, namespaces, pods) and returns every pod's own sources in it.
func (k *checker) readOwn(ctx context.Context) (ownSources, error) {
	eips, nss, pods, err := k.listOwnInputs(ctx)
	if err != nil {
		return nil, err
	}
	return k.ownFrom(eips, nss, pods), nil
}

// zoneDownSources are, for every pod on node, every node's gateway router addresses as whyZoneDown.
func (k *checker) zoneDownSources(ctx context.Context, node string) (ownSources, error) {
	pods, err := k.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, err
	}
	o := ownSources{}
	for _, p := range pods.Items {
		for _, n := range k.c.Nodes() {
			for _, fam := range k.c.Families() {
				if f, ok := n.Family(fam); ok {
					o.allow(p.Namespace+"/"+p.Name, f.GatewayIP, whyZoneDown)
				}
			}
		}
	}
	return o, nil
}

// listOwnInputs lists what the pods' own sources are read from: the EgressIPs, namespaces and pods of the API.
func (k *checker) listOwnInputs(ctx context.Context) ([]egressipv1.EgressIP, []corev1.Namespace, []corev1.Pod, error) {
	eips, err := k.eip.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	nss, err := k.kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	pods, err := k.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, nil, err
	}
	return eips.Items, nss.Items, pods.Items, nil
}

// wantZoneRows adds the rows pod p served by e must have in the interconnect layout (docs/interconnect.md, "Which
// process writes which row in which database"), with every holder ready (a quiet state): in the pod's zone, a
// reroute toward every holder, a holder of the pod's own zone through its local next hop (gateway router join IP,
// or management port IP in local gateway mode) and any other through its transit switch IP; in each other holder's
// zone, a reroute of the pod to that holder's local next hop; in shared gateway mode, in each holder's zone, the
// SNAT of the pod to the holder's egress IP on the holder's gateway router.
func wantZoneRows(want map[string]int, e *egressipv1.EgressIP, p *corev1.Pod, local bool, nexthop, transit map[string]string) {
	key := p.Namespace + "/" + p.Name
	var nh []string
	for _, it := range e.Status.Items {
		if it.Node == p.Spec.NodeName {
			nh = append(nh, nexthop[it.Node])
		} else {
			nh = append(nh, transit[it.Node])
			want[fmt.Sprintf("zone %s: reroute %s %s %v (%s)", it.Node, key, p.Status.PodIP, []string{nexthop[it.Node]}, e.Name)]++
		}
		if !local {
			want[fmt.Sprintf("zone %s: snat GR_%s %s <- %s (%s)", it.Node, it.Node, it.EgressIP, p.Status.PodIP, e.Name)]++
		}
	}
	sort.Strings(nh)
	want[fmt.Sprintf("zone %s: reroute %s %s %v (%s)", p.Spec.NodeName, key, p.Status.PodIP, nh, e.Name)]++
}

// checkZoneAnnotations checks, in a quiet state of the interconnect layout, what each node not cut off publishes
// about its zone (docs/interconnect.md, "Readiness and moves across zones"): in shared gateway mode
// egress-ips-snat-ready lists exactly the egress IPs the node holds (its zone committed their rows: SNATs in shared
// gateway mode, the reroutes to its management port in local gateway mode); no node lists an IP as lingering (the
// release linger is over).
func checkZoneAnnotations(eips []egressipv1.EgressIP, nodes []corev1.Node, isCut func(string) bool, v *verdict) {
	held := map[string][]string{}
	for _, e := range eips {
		for _, it := range e.Status.Items {
			held[it.Node] = append(held[it.Node], it.EgressIP)
		}
	}
	for _, n := range nodes {
		if isCut(n.Name) {
			continue // its zone cannot hear the apiserver: nothing says what it must publish
		}
		want := held[n.Name]
		for key, want := range map[string][]string{annotations.EgressIPsSNATReady: want, annotations.EgressIPsLingering: nil} {
			var have []string
			if a, ok := n.Annotations[key]; ok {
				if err := json.Unmarshal([]byte(a), &have); err != nil {
					v.statusErrs = append(v.statusErrs, fmt.Sprintf("node %s: %s %q does not parse: %v", n.Name, key, a, err))
					continue
				}
			}
			for _, ip := range want {
				if !slices.Contains(have, ip) {
					v.missing = append(v.missing, fmt.Sprintf("zone %s: %s %s", n.Name, key, ip))
				}
			}
			for _, ip := range have {
				if !slices.Contains(want, ip) {
					v.stale = append(v.stale, fmt.Sprintf("zone %s: %s %s", n.Name, key, ip))
				}
			}
		}
	}
}

// nbRows adds our EgressIP rows (external_ids owner-type=EgressIP) of one NB to out as lines: reroute policies on
// ovn_cluster_router and SNATs with the router that holds them; in the interconnect layout each line starts with
// "zone <node>: ".
func (k *checker) nbRows(ctx context.Context, zone string, nb client.Client, out map[string]int) error {
	var routers []nbdb.LogicalRouter
	var pols []nbdb.LogicalRouterPolicy
	var nats []nbdb.NAT
	var sets []nbdb.AddressSet
	for _, l := range []any{&routers, &pols, &nats, &sets} {
		if err := nb.List(ctx, l); err != nil {
			return err
		}
	}
	prefix := ""
	if zone != "" {
		prefix = "zone " + zone + ": "
	}
	for _, as := range sets {
		if as.Name == servedPodsSet {
			for _, a := range as.Addresses {
				out[fmt.Sprintf("%saddress set %s has %s", prefix, servedPodsSet, a)]++
			}
		}
	}
	parent := map[string]string{}
	for _, r := range routers {
		for _, u := range append(slices.Clone(r.Policies), r.Nat...) {
			parent[u] = r.Name
		}
	}
	for _, p := range pols {
		if p.ExternalIDs[nbstate.OwnerTypeKey] != nbstate.OwnerEgressIP || p.ExternalIDs[nbstate.RuleKey] != nbstate.RuleReroute {
			continue
		}
		nh := slices.Clone(p.Nexthops)
		sort.Strings(nh)
		ip := strings.TrimPrefix(p.Match, "ip4.src == ")
		if parent[p.UUID] != "ovn_cluster_router" || p.Action != "reroute" || p.Priority != 100 {
			ip = fmt.Sprintf("%s [bad row: router %q action %s priority %d]", ip, parent[p.UUID], p.Action, p.Priority)
		}
		out[fmt.Sprintf("%sreroute %s %s %v (%s)", prefix, p.ExternalIDs[nbstate.PodKey], ip, nh, p.ExternalIDs[nbstate.NameKey])]++
	}
	for _, n := range nats {
		if n.ExternalIDs[nbstate.OwnerTypeKey] != nbstate.OwnerEgressIP {
			continue
		}
		line := fmt.Sprintf("%ssnat %s %s <- %s (%s)", prefix, parent[n.UUID], n.ExternalIP, n.LogicalIP, n.ExternalIDs[nbstate.NameKey])
		if n.Type != "snat" || n.ExternalIDs[nbstate.RuleKey] != nbstate.RuleSNAT {
			line += fmt.Sprintf(" [bad row: type %s rule %s]", n.Type, n.ExternalIDs[nbstate.RuleKey])
		}
		out[line]++
	}
	return nil
}
