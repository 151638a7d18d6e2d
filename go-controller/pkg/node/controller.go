package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/apiretry"
	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipscheme "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/scheme"
	eipinformers "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/informers/externalversions"
	eiplisters "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/listers/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/egressfacts"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

// syncKey is the only queue key: every sync recomputes the whole node state.
const syncKey = "node"

type controller struct {
	p     Params
	queue workqueue.TypedRateLimitingInterface[string]

	kubeFactory informers.SharedInformerFactory // namespaces, pods (local mode only)
	nodeFactory informers.SharedInformerFactory // own Node only
	eipFactory  eipinformers.SharedInformerFactory
	nodes       corelisters.NodeLister
	namespaces  corelisters.NamespaceLister // nil in shared mode
	pods        corelisters.PodLister       // nil in shared mode
	eips        eiplisters.EgressIPLister
	synced      []cache.InformerSynced

	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster

	// State of the single worker (never touched elsewhere).
	reported     map[string]string // problem key -> message already sent as an Event
	cleanedUp    bool              // shared mode: leftovers of ours removed once
	lastFactsErr string
	// own is read-your-writes for the own Node: our patches the informer has not
	// delivered yet (ownWrites). Shared with the Node informer's handler.
	own ownWrites
	// computed is the host state the last sync computed (before released state
	// was merged in); released holds what egress IPs that moved away left behind,
	// until when it stays (Params.ReleaseLinger).
	computed hostegress.State
	released map[netip.Addr]lingering
	// unserved holds, by pod IP, the rules of pods on other nodes that an egress IP
	// still held here stopped serving, until when they stay (keepUnserved).
	unserved map[netip.Addr]lingering
	// seeded: the first sync took over the linger the previous daemon run
	// published (seedReleased).
	seeded bool
	// announcedShared are the IPv6 egress IPs held in shared gateway mode that this
	// process has announced for its gateway router (announceShared).
	announcedShared map[netip.Addr]bool
	lastGWConfigErr string // the l3-gateway-config problem already sent as an Event
	lastReroutedErr string // the egress-ips-rerouted problem already sent as an Event
}

// lingering is the released state of one egress IP and when it goes.
type lingering struct {
	state hostegress.Released
	until time.Time
	held  bool // kept past until because the master still reroutes it here (logged once)
}

// lingeringUntil are the released egress IPs whose linger has not ended at now,
// with its end: what the node publishes (annotations.FormatLingering).
func (c *controller) lingeringUntil(now time.Time) map[netip.Addr]time.Time {
	out := map[netip.Addr]time.Time{}
	for ip, l := range c.released {
		if now.Before(l.until) {
			out[ip] = l.until
		}
	}
	return out
}

// ownNode is the own Node as freshest known: the cache, or our last patch's
// result while the cache is older (ownWrites.node).
func (c *controller) ownNode() (*corev1.Node, error) {
	cached, err := c.nodes.Get(c.p.NodeName)
	if err != nil {
		return nil, err
	}
	return c.own.node(cached), nil
}

// reroutedHere reads what the master (interconnect layout: this node's zone controller) says OVN reroutes to this node
// (annotations.EgressIPsRerouted). told is false when it has said nothing (no
// annotation, or no Node yet). An unparsable list is a Warning Event naming the
// node and annotation, and every released IP counts as rerouted (unknown is not
// "gone").
func (c *controller) reroutedHere() (map[netip.Addr]bool, bool) {
	node, err := c.ownNode()
	if err != nil {
		return nil, false
	}
	if _, ok := node.Annotations[annotations.EgressIPsRerouted]; !ok {
		return nil, false
	}
	ips, err := annotations.ParseIPList(node, annotations.EgressIPsRerouted)
	if err != nil {
		klog.ErrorS(err, "Cannot tell what the master reroutes here; keeping the rules of every released egress IP", "node", node.Name)
		if msg := err.Error(); msg != c.lastReroutedErr {
			c.lastReroutedErr = msg
			c.recorder.Eventf(nodeRef(node), corev1.EventTypeWarning, ReasonEgressFactsUnknown, "node %s: %v", node.Name, err)
		}
		all := map[netip.Addr]bool{}
		for ip := range c.released {
			all[ip] = true
		}
		return all, true
	}
	c.lastReroutedErr = ""
	return ips, true
}

func newController(p Params) (*controller, error) {
	c := &controller{
		p: p,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, p.ResyncInterval),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressip-node"}),
		reported: map[string]string{},
	}
	enqueue := func() { c.queue.Add(syncKey) }

	c.eipFactory = eipinformers.NewSharedInformerFactory(p.EgressIP, 0)
	eipInf := c.eipFactory.K8s().V1().EgressIPs()
	c.eips = eipInf.Lister()
	if _, err := eipInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { enqueue() },
		UpdateFunc: func(any, any) { enqueue() },
		DeleteFunc: func(any) { enqueue() },
	}); err != nil {
		return nil, fmt.Errorf("event handler on the EgressIP informer: %w", err)
	}

	c.nodeFactory = informers.NewSharedInformerFactoryWithOptions(p.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", p.NodeName).String()
		}))
	nodeInf := c.nodeFactory.Core().V1().Nodes()
	c.nodes = nodeInf.Lister()
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(n any) {
			c.own.delivered(nil, n)
			enqueue()
		},
		UpdateFunc: func(o, n any) {
			if !c.own.delivered(o, n) && nodeFactsChanged(o, n) {
				enqueue()
			}
		},
		DeleteFunc: func(any) { enqueue() },
	}); err != nil {
		return nil, fmt.Errorf("event handler on the Node informer: %w", err)
	}
	c.synced = []cache.InformerSynced{eipInf.Informer().HasSynced, nodeInf.Informer().HasSynced}

	if p.GatewayMode == gwmode.Local {
		c.kubeFactory = informers.NewSharedInformerFactoryWithOptions(p.Kube, 0,
			informers.WithTransform(selection.TrimPod))
		nsInf := c.kubeFactory.Core().V1().Namespaces()
		podInf := c.kubeFactory.Core().V1().Pods()
		c.namespaces, c.pods = nsInf.Lister(), podInf.Lister()
		if _, err := nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { enqueue() },
			UpdateFunc: func(o, n any) {
				if labelsChanged(o, n) {
					enqueue()
				}
			},
			DeleteFunc: func(any) { enqueue() },
		}); err != nil {
			return nil, fmt.Errorf("event handler on the Namespace informer: %w", err)
		}
		if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(any) { enqueue() },
			UpdateFunc: func(o, n any) {
				if selection.PodServingChanged(o, n) {
					enqueue()
				}
			},
			DeleteFunc: func(any) { enqueue() },
		}); err != nil {
			return nil, fmt.Errorf("event handler on the Pod informer: %w", err)
		}
		c.synced = append(c.synced, nsInf.Informer().HasSynced, podInf.Informer().HasSynced)
	}

	c.broadcaster = record.NewBroadcaster()
	// Events are about EgressIPs (known to eipscheme) and the Node (passed as an ObjectReference).
	c.recorder = c.broadcaster.NewRecorder(eipscheme.Scheme, corev1.EventSource{Component: "ovnkube-node", Host: p.NodeName})
	return c, nil
}

func (c *controller) run(ctx context.Context) error {
	defer c.queue.ShutDown()
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.p.Kube.CoreV1().Events("")})
	defer c.broadcaster.Shutdown()

	// The informers' lists and watches wait out an apiserver that refuses connections without client-go's
	// reflector backoff (apiretry).
	informing := apiretry.Informing(ctx)
	c.eipFactory.StartWithContext(informing)
	c.nodeFactory.StartWithContext(informing)
	if c.kubeFactory != nil {
		c.kubeFactory.StartWithContext(informing)
	}
	defer c.eipFactory.Shutdown()
	defer c.nodeFactory.Shutdown()
	if c.kubeFactory != nil {
		defer c.kubeFactory.Shutdown()
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("node %s: informer caches did not sync", c.p.NodeName)
	}
	klog.InfoS("Egress IP node controller started", "node", c.p.NodeName, "gatewayMode", c.p.GatewayMode,
		"resync", c.p.ResyncInterval)

	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		c.p.host.Watch(ctx, func() { c.queue.Add(syncKey) })
	}()
	c.queue.Add(syncKey)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.processNext(ctx) {
	}
	<-watchDone
	return nil
}

func (c *controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := time.Now()
	err := c.sync(ctx)
	if c.p.OnSync != nil {
		c.p.OnSync(err)
	}
	if err != nil {
		klog.ErrorS(err, "Egress IP node sync failed; retrying", "node", c.p.NodeName)
		c.queue.AddRateLimited(key)
	} else {
		c.queue.Forget(key)
		klog.V(4).InfoS("Egress IP node sync done", "duration", time.Since(start))
	}
	// The periodic resync: at most one pending, ResyncInterval after the last sync.
	c.queue.AddAfter(key, c.p.ResyncInterval)
	return true
}

// sync converges the host (local gateway mode) and then publishes the egress facts
// and which egress IPs are ready, in one Node patch.
func (c *controller) sync(ctx context.Context) error {
	eips, err := c.eips.List(labels.Everything())
	if err != nil {
		return err
	}
	snap, err := c.p.host.Snapshot()
	if err != nil {
		return fmt.Errorf("read host network state: %w", err)
	}
	var errs []error
	var ready map[netip.Addr]bool
	if c.p.GatewayMode == gwmode.Local {
		ready, err = c.syncHost(snap, eips)
		errs = append(errs, err)
	} else if !c.cleanedUp {
		// Shared gateway mode programs nothing; leftovers of ours (from an earlier
		// run in local mode) are removed once, best effort.
		if _, err := c.p.host.Apply(hostegress.State{}); err != nil {
			klog.ErrorS(err, "Removing leftover egress IP host state failed", "node", c.p.NodeName)
		}
		c.cleanedUp = true
	}
	if c.p.GatewayMode == gwmode.Shared {
		errs = append(errs, c.announceShared(snap, eips))
	}
	errs = append(errs, c.publish(ctx, snap, eips, ready))
	return errors.Join(errs...)
}

// publish patches the own Node, only when something changed: the egress facts
// (when the gateway interface is known) and, in local gateway mode, the egress IPs
// ready (annotations.EgressIPsReady; removed in shared gateway mode).
func (c *controller) publish(ctx context.Context, snap hostinfo.Snapshot, eips []*egressipv1.EgressIP, ready map[netip.Addr]bool) error {
	node, err := c.ownNode()
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s not found", c.p.NodeName)
	}
	if err != nil {
		return err
	}
	set := map[string]*string{}
	var factsErr error
	gw, err := egressfacts.GatewayLink(snap, c.p.GatewayInterface)
	if err != nil {
		if msg := err.Error(); msg != c.lastFactsErr {
			c.lastFactsErr = msg
			c.recorder.Eventf(nodeRef(node), corev1.EventTypeWarning, ReasonEgressFactsUnknown, "node %s: %v", node.Name, err)
		}
		factsErr = fmt.Errorf("node %s: egress facts: %w", node.Name, err)
	} else {
		c.lastFactsErr = ""
		facts := egressfacts.Compute(snap, gw, statusIPs(eips))
		maps.Copy(set, egressfacts.Changes(node.Annotations, facts))
	}
	if v, changed := egressfacts.ReadyChange(node.Annotations, ready, c.p.GatewayMode == gwmode.Local); changed {
		set[annotations.EgressIPsReady] = v
	}
	if c.p.GatewayMode == gwmode.Local {
		maps.Copy(set, lingeringChange(node.Annotations, c.lingeringUntil(time.Now())))
	}
	if id := c.p.DaemonID; id != "" && node.Annotations[annotations.EgressDaemonID] != id {
		set[annotations.EgressDaemonID] = &id // with this run's first ready list: a master compares it with the probe's
	}
	if len(set) == 0 {
		return factsErr
	}
	patch := egressfacts.MergePatch(set)
	updated, err := c.p.Kube.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return errors.Join(factsErr, fmt.Errorf("node %s: patch egress facts: %w", node.Name, err))
	}
	c.own.wrote(updated, set)
	klog.InfoS("Published egress facts", "node", node.Name, "gatewayInterface", gw.Name, "patch", string(patch))
	return factsErr
}

func (c *controller) syncHost(snap hostinfo.Snapshot, eips []*egressipv1.EgressIP) (map[netip.Addr]bool, error) {
	nsList, err := c.namespaces.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	namespaces := make(map[string]*corev1.Namespace, len(nsList))
	for _, ns := range nsList {
		namespaces[ns.Name] = ns
	}
	pods, err := c.pods.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	st, problems := hostegress.Compute(hostegress.Input{
		NodeName: c.p.NodeName, EgressIPs: eips, Namespaces: namespaces, Pods: pods, Host: snap,
	})
	c.report(eips, problems)
	now := time.Now()
	if !c.seeded {
		c.seedReleased(st, eips, namespaces, pods, snap, now)
		c.seeded = true
	}
	rerouted, told := c.reroutedHere()
	ready, err := c.p.host.Apply(c.withReleased(st, now, rerouted, told, podFacts{
		live: hostegress.LivePods(pods), local: hostegress.RunsOn(pods, c.p.NodeName),
		servedWith: hostegress.ServedWith(eips, namespaces, pods),
	}))
	if err != nil {
		return ready, fmt.Errorf("node %s: program egress IPs: %w", c.p.NodeName, err)
	}
	return ready, nil
}

// report logs every problem and sends an Event on the EgressIP the first time a
// given problem is seen (and again if it changes after having been resolved). An
// invalid selector is only logged: each Event comes from one component, and the
// master sends that one (selection.ReasonInvalidSelector).
func (c *controller) report(eips []*egressipv1.EgressIP, problems []hostegress.Problem) {
	byName := map[string]*egressipv1.EgressIP{}
	for _, e := range eips {
		byName[e.Name] = e
	}
	now := map[string]string{}
	for _, p := range problems {
		key := p.EgressIP + "/" + p.IP + "/" + p.Reason
		now[key] = p.Message
		klog.ErrorS(nil, p.Message, "egressIP", p.EgressIP, "field", "status.items", "reason", p.Reason)
		if c.reported[key] == p.Message || p.Reason == selection.ReasonInvalidSelector {
			continue
		}
		if eip := byName[p.EgressIP]; eip != nil {
			c.recorder.Event(eip, corev1.EventTypeWarning, p.Reason, p.Message)
		}
	}
	c.reported = now
}

func statusIPs(eips []*egressipv1.EgressIP) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, e := range eips {
		for _, it := range e.Status.Items {
			if ip, err := netip.ParseAddr(it.EgressIP); err == nil {
				out[ip.Unmap()] = true
			}
		}
	}
	return out
}

func nodeRef(n *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"}
}

// handler filters: they only decide whether to queue.

func nodeFactsChanged(o, n any) bool {
	on, ok1 := o.(*corev1.Node)
	nn, ok2 := n.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return !maps.Equal(on.Annotations, nn.Annotations)
}

func labelsChanged(o, n any) bool {
	om, ok1 := o.(metav1.Object)
	nm, ok2 := n.(metav1.Object)
	if !ok1 || !ok2 {
		return true
	}
	return !maps.Equal(om.GetLabels(), nm.GetLabels())
}

// seedReleased takes over, at this daemon run's first sync, what the previous run published about the node (its own
// Node's annotations, not written by this run yet): an egress IP it listed ready (EgressIPsReady) or lingering
// (EgressIPsLingering, with its end) that this node no longer holds is released now, as if this run had held it: its
// rules (as they would be for the pods it serves now) stay until the published end, or for Params.ReleaseLinger from
// now when it was listed ready, and while the master still reroutes it here. Without this a restart forgets the linger
// the node published: masters keep rerouting here until that end (or, reading the ready list the previous run wrote,
// until they see this run's), and this run would have deleted the rules at once.
func (c *controller) seedReleased(st hostegress.State, eips []*egressipv1.EgressIP, namespaces map[string]*corev1.Namespace,
	pods []*corev1.Pod, snap hostinfo.Snapshot, now time.Time) {
	if c.p.ReleaseLinger < 0 {
		return
	}
	node, err := c.ownNode()
	if err != nil {
		return
	}
	prev, errR := annotations.ParseEgressIPsReady(node)
	ends, errL := annotations.ParseLingering(node)
	if err := errors.Join(errR, errL); err != nil {
		klog.ErrorS(err, "Cannot read what the previous node daemon run published; no linger taken over", "node", node.Name)
	}
	until := map[netip.Addr]time.Time{}
	for ip := range prev {
		until[ip] = now.Add(c.p.ReleaseLinger)
	}
	for ip, t := range ends {
		if now.Before(t) {
			until[ip] = t
		}
	}
	as := heldAs(eips, c.p.NodeName, until, st)
	if len(as) == 0 {
		return
	}
	was, _ := hostegress.Compute(hostegress.Input{NodeName: c.p.NodeName, EgressIPs: as, Namespaces: namespaces, Pods: pods, Host: snap})
	if c.released == nil {
		c.released = map[netip.Addr]lingering{}
	}
	for ip, r := range hostegress.Release(was, st) {
		c.released[ip] = lingering{state: r, until: until[ip]}
		klog.InfoS("Egress IP released while this node daemon was down; keeping its SNAT rules while traffic may still be rerouted here",
			"node", c.p.NodeName, "ip", ip, "rules", len(r.SNAT), "until", until[ip].UTC().Format(time.RFC3339Nano))
	}
}

// heldAs returns copies of the EgressIPs owning the IPs of until that st does not hold, each with status items
// naming node for those IPs only: the state the node would have if it still held them. An IP no EgressIP's spec
// lists any more is left out (nothing reroutes to it).
func heldAs(eips []*egressipv1.EgressIP, node string, until map[netip.Addr]time.Time, st hostegress.State) []*egressipv1.EgressIP {
	var out []*egressipv1.EgressIP
	for _, e := range eips {
		var items []egressipv1.EgressIPStatusItem
		for _, s := range e.Spec.EgressIPs {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				continue
			}
			if _, listed := until[ip.Unmap()]; listed && !st.Holds(ip.Unmap()) {
				items = append(items, egressipv1.EgressIPStatusItem{Node: node, EgressIP: ip.Unmap().String()})
			}
		}
		if len(items) > 0 {
			c := e.DeepCopy()
			c.Status.Items = items
			out = append(out, c)
		}
	}
	return out
}

// podFacts are what withReleased asks about the pod objects of the rules it keeps.
type podFacts struct {
	live       func(selection.IPClaim) bool             // listed, not completed, owns its IPs (hostegress.LivePods)
	local      func(selection.IPClaim) bool             // runs on this node (hostegress.RunsOn)
	servedWith func(selection.IPClaim, netip.Addr) bool // an EgressIP listing that IP serves it (hostegress.ServedWith)
}

// releasedLive is live for the rules released egress IP ip left behind. A pod
// running here also needs an EgressIP listing ip to serve it still: when the IP
// moved away, the pod's traffic crosses this host, and must leave with ip, until
// the master reroutes it to the new holder; when the EgressIP was deleted, the IP
// taken out of its spec or the pod no longer selected, the pod's traffic keeps
// crossing this host after the master stopped serving it, and must not.
func (pf podFacts) releasedLive(ip netip.Addr) func(selection.IPClaim) bool {
	return func(c selection.IPClaim) bool {
		return pf.live(c) && (!pf.local(c) || pf.servedWith(c, ip))
	}
}

// withReleased records what egress IPs that were held here and are no longer held
// in st leave behind, forgets what is held again or has lingered for
// Params.ReleaseLinger, and returns st with the rest merged in (hostegress.Merge).
// While something lingers, a sync is queued for when it expires.
//
// A released IP's rules stay past that end while the master's list of what OVN
// reroutes here (annotations.EgressIPsRerouted; told: the master published one)
// still names it: a reroute the master has not removed yet, or could not (it was
// down), must not meet a node without SNAT rules. The end itself is published
// (lingeringUntil) and the master reroutes here no longer than that.
//
// The rules of pod objects that pf.live does not report (deleted, completed, or
// their IP a newer pod object's) are left out at once (hostegress.Released.Live):
// their IP may be a new pod's already; so are those of pods running here that no
// EgressIP listing the released IP serves any more (podFacts.releasedLive).
//
// A pod that an egress IP still held here stops serving keeps its rule for the
// same linger when it runs on another node, see keepUnserved.
func (c *controller) withReleased(st hostegress.State, now time.Time, rerouted map[netip.Addr]bool, told bool,
	pf podFacts) hostegress.State {
	if c.p.ReleaseLinger < 0 {
		return st
	}
	if c.released == nil {
		c.released = map[netip.Addr]lingering{}
	}
	for ip, r := range hostegress.Release(c.computed, st) {
		if _, ok := c.released[ip]; !ok {
			c.released[ip] = lingering{state: r, until: now.Add(c.p.ReleaseLinger)}
			klog.InfoS("Egress IP moved away; keeping its SNAT rules while traffic may still be rerouted here",
				"node", c.p.NodeName, "ip", ip, "rules", len(r.SNAT), "for", c.p.ReleaseLinger)
		}
	}
	unserved := hostegress.Unserved(c.computed, st)
	c.computed = st
	ips := make([]netip.Addr, 0, len(c.released))
	for ip := range c.released {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare) // Merge keeps the current pod object's claim on a pod IP, else the first: keep it stable
	var keep []hostegress.Released
	next := time.Duration(0)
	for _, ip := range ips {
		l := c.released[ip]
		if st.Holds(ip) {
			delete(c.released, ip)
			continue
		}
		if !now.Before(l.until) {
			if !told || !rerouted[ip] {
				delete(c.released, ip)
				continue
			}
			if !l.held {
				l.held = true
				c.released[ip] = l
				klog.InfoS("Egress IP linger ended but the master still reroutes it here; keeping its SNAT rules until it stops",
					"node", c.p.NodeName, "ip", ip, "annotation", annotations.EgressIPsRerouted)
			}
			keep = append(keep, l.state.Live(pf.releasedLive(ip)))
			continue
		}
		keep = append(keep, l.state.Live(pf.releasedLive(ip)))
		if d := l.until.Sub(now); next == 0 || d < next {
			next = d
		}
	}
	pods, podsNext := c.keepUnserved(unserved, st, now, pf)
	keep = append(keep, pods...)
	if podsNext > 0 && (next == 0 || podsNext < next) {
		next = podsNext
	}
	if next > 0 {
		c.queue.AddAfter(syncKey, next)
	}
	if len(keep) == 0 {
		return st
	}
	return hostegress.Merge(st, keep...)
}

// keepUnserved records the rules of the pods that egress IPs still held here
// stopped serving (hostegress.Unserved: the pod or its namespace relabelled, the
// selector edited), and returns those that still linger, with the time to the
// first end (0: none). Until the master has seen the change, OVN still reroutes
// such a pod's traffic here, and it must not leave with the node's own address:
// the rule of a pod on another node stays for Params.ReleaseLinger (past the
// reroute, no traffic of that pod reaches this node), unless st serves the pod IP
// again or live no longer reports its pod object. The rule of a pod running here
// goes at once: in local gateway mode its traffic always crosses this host, and
// would keep leaving with the egress IP after the master stopped serving it. The
// end is not published (annotations.EgressIPsLingeringUntil): it lists egress
// IPs, which the master makes next hops of the pods they serve, and these pods
// are no longer theirs.
func (c *controller) keepUnserved(unserved map[netip.Addr]hostegress.Released, st hostegress.State, now time.Time,
	pf podFacts) ([]hostegress.Released, time.Duration) {
	if c.unserved == nil {
		c.unserved = map[netip.Addr]lingering{}
	}
	for podIP, r := range unserved {
		owner, ok := r.Owners[podIP]
		if _, has := c.unserved[podIP]; has || !ok || pf.local(owner) || !pf.live(owner) {
			continue // a pod here, or gone: its rule goes at once
		}
		c.unserved[podIP] = lingering{state: r, until: now.Add(c.p.ReleaseLinger)}
		klog.InfoS("Pod no longer served by an egress IP held here; keeping its SNAT rule while its traffic may still be rerouted here",
			"node", c.p.NodeName, "pod", owner.Namespace+"/"+owner.Name, "podIP", podIP, "egressIP", r.SNAT[0].EgressIPAddr,
			"for", c.p.ReleaseLinger)
	}
	served := map[netip.Addr]bool{}
	for _, s := range st.SNAT {
		served[s.PodIP] = true
	}
	ips := slices.SortedFunc(maps.Keys(c.unserved), netip.Addr.Compare)
	var keep []hostegress.Released
	next := time.Duration(0)
	for _, ip := range ips {
		l := c.unserved[ip]
		r := l.state.Live(pf.live)
		if served[ip] || !now.Before(l.until) || len(r.SNAT) == 0 {
			delete(c.unserved, ip)
			continue
		}
		keep = append(keep, r)
		if d := l.until.Sub(now); next == 0 || d < next {
			next = d
		}
	}
	return keep, next
}

// announceShared: in shared gateway mode an egress IP this node holds is a NAT
// address of its gateway router. OVN announces the IPv4 ones (nat-addresses=router:
// gratuitous ARPs) but sends nothing for IPv6 ones, so after a move a neighbour on
// the external network would keep reaching the previous holder's MAC until its entry
// went stale. For each IPv6 egress IP the node newly holds (once per process, as in
// local mode), it sends the unsolicited neighbour advertisement (Override) out of its
// gateway interface naming the gateway router's MAC: the "mac-address" of
// k8s.ovn.org/l3-gateway-config, or, without that annotation, the gateway
// interface's own MAC (OVN-Kubernetes' gateway router shares the gateway bridge's).
// A failed announcement is retried by the next sync.
func (c *controller) announceShared(snap hostinfo.Snapshot, eips []*egressipv1.EgressIP) error {
	held := map[netip.Addr]bool{}
	for _, e := range eips {
		for _, it := range e.Status.Items {
			if it.Node != c.p.NodeName {
				continue
			}
			if ip, err := netip.ParseAddr(it.EgressIP); err == nil && ip.Is6() && !ip.Is4In6() {
				held[ip.WithZone("")] = true
			}
		}
	}
	if c.announcedShared == nil {
		c.announcedShared = map[netip.Addr]bool{}
	}
	for ip := range c.announcedShared {
		if !held[ip] { // gone: announced again if it comes back
			delete(c.announcedShared, ip)
		}
	}
	var todo []netip.Addr
	for ip := range held {
		if !c.announcedShared[ip] {
			todo = append(todo, ip)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	slices.SortFunc(todo, func(a, b netip.Addr) int { return a.Compare(b) })
	gw, err := egressfacts.GatewayLink(snap, c.p.GatewayInterface)
	if err != nil {
		return fmt.Errorf("node %s: cannot announce %v: %w", c.p.NodeName, todo, err)
	}
	node, err := c.ownNode()
	if err != nil {
		return fmt.Errorf("node %s: cannot announce %v: %w", c.p.NodeName, todo, err)
	}
	mac, ok, err := annotations.GatewayRouterMAC(node)
	if err != nil {
		if msg := err.Error(); msg != c.lastGWConfigErr {
			c.lastGWConfigErr = msg
			c.recorder.Eventf(nodeRef(node), corev1.EventTypeWarning, ReasonGatewayConfigInvalid,
				"node %s: metadata.annotations[%s]: %v; IPv6 egress IPs %v held here are not announced", node.Name,
				annotations.L3GatewayConfig, err, todo)
		}
		return fmt.Errorf("node %s: cannot announce %v: %w", c.p.NodeName, todo, err)
	}
	c.lastGWConfigErr = ""
	if !ok {
		mac = gw.MAC
	}
	var errs []error
	for _, ip := range todo {
		if err := c.p.host.AnnounceFor(gw.Name, ip, mac); err != nil {
			errs = append(errs, fmt.Errorf("node %s: announce %s: %w", c.p.NodeName, ip, err))
			continue
		}
		c.announcedShared[ip] = true
		klog.InfoS("Announced egress IP held by the gateway router (unsolicited neighbour advertisement)",
			"ip", ip, "mac", mac.String(), "link", gw.Name)
	}
	return errors.Join(errs...)
}

// lingeringChange is the patch of EgressIPsLingering and EgressIPsLingeringUntil
// for until (none: both removed), for what differs from current.
func lingeringChange(current map[string]string, until map[netip.Addr]time.Time) map[string]*string {
	out := map[string]*string{}
	if len(until) == 0 {
		for _, k := range []string{annotations.EgressIPsLingering, annotations.EgressIPsLingeringUntil} {
			if _, has := current[k]; has {
				out[k] = nil
			}
		}
		return out
	}
	list, ends := annotations.FormatLingering(until)
	for k, v := range map[string]string{annotations.EgressIPsLingering: list, annotations.EgressIPsLingeringUntil: ends} {
		if cur, has := current[k]; !has || cur != v {
			out[k] = &v
		}
	}
	return out
}
