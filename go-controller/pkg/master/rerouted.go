package master

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// reroutedTargets are, per node, the egress IPs whose served pods the planned rows
// reroute to that node's management port (centralized layout, local gateway mode):
// every IP the EgressIP keeps (kept: keptIPs, as the routes were computed with) in
// the family of a route whose next hops include the node; not an IP another
// EgressIP keeps. A node keeps the SNAT rules of a released IP while its list
// names it (annotations.EgressIPsRerouted).
func reroutedTargets(routes map[string]map[string]nbstate.Route, kept map[string][]netip.Addr, nodes map[string]nbstate.Node) map[string]map[netip.Addr]bool {
	byHop := map[string]string{}
	for name, n := range nodes {
		for _, ip := range n.ManagementIPs {
			byHop[ip.String()] = name
		}
	}
	out := map[string]map[netip.Addr]bool{}
	for name, byFam := range routes {
		for fam, r := range byFam {
			for _, hop := range r.Nexthops {
				node, ok := byHop[hop]
				if !ok {
					continue
				}
				for _, ip := range kept[name] {
					if nbstate.Family(ip) != fam {
						continue
					}
					if out[node] == nil {
						out[node] = map[netip.Addr]bool{}
					}
					out[node][ip] = true
				}
			}
		}
	}
	return out
}

// publishRerouted writes each node's EgressIPsRerouted where it differs from want.
// What this process last wrote is remembered (its own writes may not be in the
// informer cache yet); a node it has not written is read from its annotation, so a
// restarted master starts from what the nodes were told. widen keeps what was
// published (before a commit: nothing published is dropped until the rows that
// reroute there are gone). A node whose write fails keeps its old memory: the
// caller must not commit.
func (c *controller) publishRerouted(ctx context.Context, nodes []*corev1.Node, want map[string]map[netip.Addr]bool, widen bool) error {
	if c.rerouted == nil {
		c.rerouted = map[string]map[netip.Addr]bool{}
	}
	var errs []error
	present := map[string]bool{}
	for _, n := range nodes {
		present[n.Name] = true
		cur, known := c.rerouted[n.Name]
		if !known {
			var err error
			if cur, err = annotations.ParseIPList(n, annotations.EgressIPsRerouted); err != nil {
				klog.ErrorS(err, "Reading what this node was told is rerouted to it; rewriting it", "node", n.Name)
				cur = map[netip.Addr]bool{}
			}
		}
		next := map[netip.Addr]bool{}
		for ip := range want[n.Name] {
			next[ip] = true
		}
		if widen {
			for ip := range cur {
				next[ip] = true
			}
		}
		v := annotations.FormatEgressIPsReady(next)
		if known && annotations.FormatEgressIPsReady(cur) == v {
			continue
		}
		if !known && n.Annotations[annotations.EgressIPsRerouted] == v {
			c.rerouted[n.Name] = next
			continue
		}
		if len(next) == 0 && !known {
			if _, has := n.Annotations[annotations.EgressIPsRerouted]; !has {
				c.rerouted[n.Name] = next
				continue
			}
		}
		body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{annotations.EgressIPsRerouted: v}}})
		if _, err := c.s.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, body, metav1.PatchOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("node %s: publish %s: %w", n.Name, annotations.EgressIPsRerouted, err))
			continue
		}
		c.rerouted[n.Name] = next
		klog.V(2).InfoS("Published the egress IPs rerouted to node", "node", n.Name, "ips", v, "beforeCommit", widen)
	}
	for name := range c.rerouted {
		if !present[name] {
			delete(c.rerouted, name)
		}
	}
	return errors.Join(errs...)
}

// publishesRerouted: the centralized master in local gateway mode tells nodes what
// it reroutes to them.
func (c *controller) publishesRerouted() bool {
	return c.s.mode == gwmode.Local && !c.s.interconnect && !c.s.noNB
}
