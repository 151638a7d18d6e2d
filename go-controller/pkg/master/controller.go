package master

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipinformers "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/informers/externalversions"
	eiplisters "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/listers/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// nodeEventBatch is how long a sync caused by a Node event waits for more of them.
const nodeEventBatch = 20 * time.Millisecond

// syncKey is the one key of the workqueue: every event means "sync"; what changed
// is recorded beside it (dirty), so that a sync costs what changed.
const syncKey = "egressip"

// controller owns the informers' listers, the workqueue and the sync state.
type controller struct {
	s       settings
	nb      nbClient
	metrics *metrics

	eips       eiplisters.EgressIPLister
	nodes      corelisters.NodeLister
	namespaces corelisters.NamespaceLister
	pods       podStore
	synced     []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[string]

	mu           sync.Mutex
	lastStart    time.Time     // start of the last sync
	lastEnd      time.Time     // end of the last sync
	lastDuration time.Duration // how long the last sync took
	pendingSince time.Time     // first event not yet covered by a sync started after it

	dmu   sync.Mutex
	dirty dirty // what changed since the last sync started

	// Used by the sync goroutine only.
	serving     *serving
	mirror      *nbstate.Mirror // nil: the next sync is a full one
	foreignSets map[string]bool // address set names in NB that are not ours (last full sync)
	status      *statusMemory
	// committed are the status items of every EgressIP as of the last successful
	// NB commit (what is programmed).
	committed map[string][]egressipv1.EgressIPStatusItem
	reporter  *reporter
	doubts    *doubts           // node claims not believed (vet.go)
	reachable map[string]bool   // last verdict per labelled node (unreachable metric)
	lastNote  map[string]string // per node: why it cannot host egress IPs (logged on change)
	// lastSkipped describes the rows the last sync could not write (logged on change).
	lastSkipped string
	// rerouted is, per node, what this process last published as rerouted to it
	// (annotations.EgressIPsRerouted; publishRerouted).
	rerouted map[string]map[netip.Addr]bool
	// nodeParser and assignMemo spare syncs that change no node or EgressIP
	// parsing every node and assigning again.
	nodeParser *nodeParser
	assignMemo assignMemo
	// compiler keeps each EgressIP's compiled selectors until they change.
	compiler *selection.Compiler
	// zone is a zone controller's memory of its node's released egress IPs (zone.go).
	zone zoneMemory
	// narrow is the centralized local-gateway master's memory of its commits'
	// sequence numbers (reroutesApplied).
	narrow narrowMemory
	// waitingDataPlane: the zone holds back egress IPs until its chassis has
	// applied their rows (zoneMemory.applied). waitingNarrow: nodes keep what they
	// were told is rerouted to them until the chassis have applied the commit that
	// removed it (reroutesApplied). Read by the NB cache's handler.
	waitingDataPlane, waitingNarrow atomic.Bool
}

// newController wires informers (not started) to the queue.
func newController(s settings, nb nbClient, m *metrics, kubeInf informers.SharedInformerFactory,
	eipInf eipinformers.SharedInformerFactory) (*controller, error) {
	c := &controller{
		s:       s,
		nb:      nb,
		metrics: m,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 10*time.Second),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "egressip-master", MetricsProvider: m.queue}),
		status:    newStatusMemory(),
		serving:   newServing(),
		dirty:     newDirty(),
		reporter:  newReporter(s.Recorder),
		doubts:    newDoubts(),
		reachable: map[string]bool{},
		lastNote:  map[string]string{},
	}
	c.nodeParser = newNodeParser(factsLayout{mode: s.mode, interconnect: s.interconnect, joins: s.JoinSubnets, zone: s.Zone}, s.Reachability)
	c.compiler = selection.NewCompiler()
	eipInformer := eipInf.K8s().V1().EgressIPs()
	nodeInformer := kubeInf.Core().V1().Nodes()
	c.eips, c.nodes = eipInformer.Lister(), nodeInformer.Lister()
	handlers := []informerHandler{
		{eipInformer.Informer(), c.eipChanged, nil, 0},
		// Node changes come in bursts (a drain, a rollout, several nodes unlabelled
		// by one command) and each moves every egress IP of its node: one sync for
		// the burst moves them all in one transaction instead of one sync after the
		// other. A failed node is found by the health check, which is not delayed.
		{nodeInformer.Informer(), nodeChanged, nil, nodeEventBatch},
	}
	if s.Role != RoleClusterManager { // the cluster manager writes no rows: it reads no pod or namespace
		podHandlers, err := c.podInformers(kubeInf)
		if err != nil {
			return nil, err
		}
		handlers = append(handlers, podHandlers...)
	}
	for _, h := range handlers {
		changed, mark, batch := h.changed, h.mark, h.batch
		touch := func(obj any) {
			if mark != nil {
				key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
				if err != nil {
					utilruntime.HandleError(fmt.Errorf("egress IP master: object key: %w", err))
					c.requestFull()
				} else {
					mark(key)
				}
			}
			c.enqueueWithin(batch)
		}
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: touch,
			UpdateFunc: func(old, new any) {
				if changed(old, new) {
					touch(new)
				}
			},
			DeleteFunc: touch,
		}); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, h.inf.HasSynced)
	}
	return c, nil
}

// informerHandler is how one informer's events reach the queue.
type informerHandler struct {
	inf     cache.SharedIndexInformer
	changed func(old, new any) bool
	mark    func(key string) // records what changed (nil: read whole at every sync)
	batch   time.Duration    // how long the sync waits for more events of this kind
}

// podInformers wires the namespace and pod informers, which only planning NB rows
// reads: the cluster manager (no NB) neither caches pods nor syncs on their events.
func (c *controller) podInformers(kubeInf informers.SharedInformerFactory) ([]informerHandler, error) {
	nsInformer := kubeInf.Core().V1().Namespaces()
	podInformer := kubeInf.Core().V1().Pods()
	if err := podInformer.Informer().SetTransform(slimPod); err != nil {
		return nil, err
	}
	c.namespaces = nsInformer.Lister()
	c.pods = podStore{idx: podInformer.Informer().GetIndexer()}
	return []informerHandler{
		{nsInformer.Informer(), func(old, new any) bool {
			return !maps.Equal(old.(*corev1.Namespace).Labels, new.(*corev1.Namespace).Labels)
		}, c.markNamespace, 0},
		{podInformer.Informer(), podChanged, c.markPod, 0},
	}, nil
}

// eipChanged: every EgressIP update is an event except this master's own status write (statusMemory.ownWrite).
func (c *controller) eipChanged(old, new any) bool {
	o, ok1 := old.(*egressipv1.EgressIP)
	n, ok2 := new.(*egressipv1.EgressIP)
	if ok1 && ok2 && c.status.ownWrite(o, n) {
		c.metrics.ownWritesIgnored.Inc()
		return false
	}
	return true
}

// dirty is what informers reported changed since the last sync started: pods
// ("namespace/name") and namespaces whose selection must be decided again, or
// everything (full).
type dirty struct {
	pods, namespaces map[string]bool
	full             bool
}

func newDirty() dirty { return dirty{pods: map[string]bool{}, namespaces: map[string]bool{}} }

func (c *controller) markPod(key string) {
	c.dmu.Lock()
	c.dirty.pods[key] = true
	c.dmu.Unlock()
}

func (c *controller) markNamespace(key string) {
	c.dmu.Lock()
	c.dirty.namespaces[key] = true
	c.dmu.Unlock()
}

// requestFull makes the next sync a full one (select every pod, compare every row
// we own in NB). Safe from any goroutine.
func (c *controller) requestFull() {
	c.dmu.Lock()
	c.dirty.full = true
	c.dmu.Unlock()
}

// resync queues a full sync.
func (c *controller) resync() {
	c.requestFull()
	c.enqueue()
}

// takeDirty returns what changed and starts a new record. Events delivered after
// it are seen by the next sync (the informer's cache is updated before handlers run).
func (c *controller) takeDirty() dirty {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	d := c.dirty
	c.dirty = newDirty()
	return d
}

// enqueue asks for a sync. After a sync that took d, the next one starts no
// sooner than min(d, MinSyncInterval) after it ended: a storm of events is folded
// into few syncs and the master spends at most about half its time syncing, while
// an event after a cheap sync (or a quiet period) is handled at once. Safe from
// any goroutine.
func (c *controller) enqueue() { c.enqueueWithin(0) }

// enqueueWithin is enqueue, but the sync also waits until batch after the first
// event it will cover, so that a burst arriving within batch is one sync.
func (c *controller) enqueueWithin(batch time.Duration) {
	c.mu.Lock()
	now := time.Now()
	if c.pendingSince.IsZero() {
		c.pendingSince = now
	}
	delay := max(c.lastEnd.Add(min(c.lastDuration, c.s.MinSyncInterval)).Sub(now), c.pendingSince.Add(batch).Sub(now))
	c.mu.Unlock()
	if delay > 0 {
		c.queue.AddAfter(syncKey, delay)
		return
	}
	c.queue.Add(syncKey)
}

// endSync records the end of a sync (see enqueue).
func (c *controller) endSync() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastEnd = time.Now()
	c.lastDuration = c.lastEnd.Sub(c.lastStart)
}

// startSync marks the start of a sync and returns the time of the first event it covers.
func (c *controller) startSync() (start, trigger time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	start = time.Now()
	trigger = c.pendingSince
	if trigger.IsZero() {
		trigger = start
	}
	c.lastStart, c.pendingSince = start, time.Time{}
	return start, trigger
}

// run processes the queue until ctx is done.
func (c *controller) run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for c.processNext(ctx) {
	}
}

func (c *controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if c.s.beforeSync != nil {
		c.s.beforeSync()
	}
	err := c.sync(ctx)
	c.endSync()
	if c.s.afterSync != nil {
		c.s.afterSync(err)
	}
	if c.s.OnSync != nil {
		c.s.OnSync(err)
	}
	if err != nil {
		c.metrics.syncErrors.Inc()
		if ctx.Err() == nil {
			klog.ErrorS(err, "Egress IP sync failed; retrying", "retries", c.queue.NumRequeues(key))
			c.queue.AddRateLimited(key)
		}
		return true
	}
	c.queue.Forget(key)
	return true
}

// nodeChanged reports whether a node update can change anything we compute:
// labels, annotations, readiness, addresses. Heartbeats alone do not.
func nodeChanged(old, new any) bool {
	o, n := old.(*corev1.Node), new.(*corev1.Node)
	return !maps.Equal(o.Labels, n.Labels) || !maps.Equal(o.Annotations, n.Annotations) ||
		annotations.IsReady(o) != annotations.IsReady(n) ||
		!reflect.DeepEqual(o.Status.Addresses, n.Status.Addresses)
}
