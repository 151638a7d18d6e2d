package main

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/apiretry"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/healthcheck"
)

// nodeTargets feeds the health checker with the egress-assignable nodes and
// their management addresses, from a Node informer restricted by label.
type nodeTargets struct {
	factory informers.SharedInformerFactory
	lister  listersv1.NodeLister
	synced  cache.InformerSynced
	// changes receives a value when some node's reachability changed (buffer of one: coalesced).
	changes chan struct{}
}

func newNodeTargets(kube kubernetes.Interface) *nodeTargets {
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = annotations.EgressAssignableLabel }))
	inf := f.Core().V1().Nodes()
	return &nodeTargets{factory: f, lister: inf.Lister(), synced: inf.Informer().HasSynced, changes: make(chan struct{}, 1)}
}

func (n *nodeTargets) run(ctx context.Context) error {
	n.factory.StartWithContext(apiretry.Informing(ctx))
	cache.WaitForCacheSync(ctx.Done(), n.synced)
	<-ctx.Done()
	n.factory.Shutdown()
	return nil
}

// targets lists the egress-assignable nodes with a parsable pod subnet, sorted by name.
func (n *nodeTargets) targets() []healthcheck.Target {
	if !n.synced() {
		return nil
	}
	nodes, err := n.lister.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list the Nodes to health-check")
		return nil
	}
	out := make([]healthcheck.Target, 0, len(nodes))
	for _, node := range nodes {
		if t, ok := targetFor(node); ok {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

func targetFor(node *corev1.Node) (healthcheck.Target, bool) {
	subnets, err := annotations.ParseNodeSubnets(node)
	if err != nil || len(subnets) == 0 {
		return healthcheck.Target{}, false
	}
	return healthcheck.Target{Node: node.Name, Addr: annotations.ManagementIP(subnets[0])}, true
}

func (n *nodeTargets) notify() {
	select {
	case n.changes <- struct{}{}:
	default: // a change is already pending: the master syncs everything at once
	}
}

// reachability adapts the health checker to master.Reachability and master.ReachabilityNotifier.
type reachability struct {
	checker *healthcheck.Checker
	changes chan struct{}
}

func (r *reachability) Reachable(node string) bool { return r.checker.Reachable(node) }

func (r *reachability) DaemonID(node string) string { return r.checker.DaemonID(node) }

func (r *reachability) Changes() <-chan struct{} { return r.changes }

// ReasonHealthCheckInconclusive is the reason of the Warning Event on a Node whose
// health probes failed while no egress node answered either: the master suspects
// itself and keeps the node's egress IPs where they are (healthcheck held).
const ReasonHealthCheckInconclusive = "EgressHealthCheckInconclusive"

// reportHold records the Event for a held node (the checker logs it too).
func reportHold(rec record.EventRecorder, node string, failed, probed int) {
	ref := &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
	rec.Eventf(ref, corev1.EventTypeWarning, ReasonHealthCheckInconclusive,
		"%d egress health probes of node %s failed in a row, but no egress node (%d probed) answered since: the master "+
			"suspects itself (held up on a loaded machine, or its own network), not the node, and keeps its egress IPs "+
			"in place until another node answers", failed, node, probed)
}
