// Package consumer is the consumer-side reflection of direct connections: for each EndpointSlice of a Service in
// the watched namespaces, it writes a ShadowEndpointSlice of the same namespace and name into every provider
// cluster, with the addresses as that provider sees them and, for Services annotated
// liqo.io/use-direct-connections: "true", the liqo.io/direct-connections-data annotation
// (directconn.BuildShadow). It stands in for Liqo's EndpointSlice reflector, which we do not have.
//
// The shadows are in the shape Liqo's virtual kubelet writes, so that a Liqo provider maps them too.
//
// It watches, in the consumer cluster, Services, EndpointSlices, Nodes (virtual-node labels) and Configurations,
// and in each provider the ShadowEndpointSlices it wrote (label offloading.liqo.io/origin = its cluster ID), so
// that edits and deletions by others are repaired and shadows of deleted slices are removed.
package consumer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
)

// Component is the Event source and logger name.
const Component = "directconn-consumer"

// ReasonShadowConflict is the Warning Event reason on a consumer EndpointSlice whose ShadowEndpointSlice name is
// taken, in a provider, by a shadow this consumer did not write.
const ReasonShadowConflict = "ShadowEndpointSliceConflict"

// legacyOriginLabel marked the shadows written by earlier versions of this controller (before it wrote Liqo's
// offloading.liqo.io/origin); such a shadow naming this cluster is adopted.
const legacyOriginLabel = "directconn.ovn-egressip.io/origin-cluster-id"

// Provider is one provider cluster the consumer reflects to.
type Provider struct {
	// ClusterID is the provider's cluster ID, as in the liqo.io/remote-cluster-id label of its virtual nodes and
	// of the consumer's Configuration for it.
	ClusterID string
	// Dynamic is a dynamic client for the provider's apiserver (ShadowEndpointSlices).
	Dynamic dynamic.Interface
}

// Config is what New needs.
type Config struct {
	// ClusterID is the consumer's cluster ID (written in directconn.OriginClusterIDLabel and as the endpoints'
	// nodeName).
	ClusterID string
	// Kube is the consumer cluster's client (Services, EndpointSlices, Nodes, Events).
	Kube kubernetes.Interface
	// Dynamic is the consumer cluster's dynamic client (Configurations).
	Dynamic dynamic.Interface
	// Providers are the clusters to reflect to.
	Providers []Provider
	// Namespaces limits reflection to these namespaces; empty means all. Namespace names are the same in the
	// consumer and in the providers.
	Namespaces []string
	// Recorder receives the Events; nil builds one on Kube.
	Recorder record.EventRecorder
}

type providerState struct {
	id      string
	shadows cache.SharedIndexInformer
	writer  kube.Shadows
}

// Controller is the consumer-side controller. Create it with New, start it with Run.
type Controller struct {
	clusterID  string
	namespaces map[string]bool
	recorder   record.EventRecorder
	stopRec    func()
	log        klog.Logger

	factory   informers.SharedInformerFactory
	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	nodes     corelisters.NodeLister
	cfgs      cache.SharedIndexInformer
	providers []providerState
	synced    []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// New builds the controller and registers its event handlers; nothing runs until Run.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		clusterID:  cfg.ClusterID,
		namespaces: map[string]bool{},
		recorder:   cfg.Recorder,
		log:        klog.Background().WithName(Component),
		factory:    informers.NewSharedInformerFactory(cfg.Kube, 0),
		queue:      kube.NewQueue(Component),
	}
	for _, ns := range cfg.Namespaces {
		c.namespaces[ns] = true
	}
	if c.recorder == nil {
		c.recorder, c.stopRec = kube.NewRecorder(cfg.Kube, Component)
	}
	svcInf := c.factory.Core().V1().Services()
	sliceInf := c.factory.Discovery().V1().EndpointSlices()
	nodeInf := c.factory.Core().V1().Nodes()
	c.services, c.slices, c.nodes = svcInf.Lister(), sliceInf.Lister(), nodeInf.Lister()
	var err error
	if c.cfgs, err = kube.NewInformer[netv1beta1.Configuration](cfg.Dynamic,
		netv1beta1.ConfigurationResource, "", directconn.RemoteClusterIDLabel, nil); err != nil {
		return nil, err
	}
	selector := directconn.OriginClusterIDLabel + "=" + cfg.ClusterID
	for _, p := range cfg.Providers {
		inf, err := kube.NewInformer[offv1beta1.ShadowEndpointSlice](p.Dynamic,
			offv1beta1.ShadowEndpointSliceResource, "", selector, nil)
		if err != nil {
			return nil, err
		}
		c.providers = append(c.providers, providerState{id: p.ClusterID, shadows: inf, writer: kube.Shadows{Client: p.Dynamic}})
	}

	all := func(interface{}) { c.enqueueAll() }
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{sliceInf.Informer(), updates(c.enqueueKey)},
		{svcInf.Informer(), updates(c.enqueueService)},
		{nodeInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: all, DeleteFunc: all,
			UpdateFunc: func(o, n interface{}) {
				if nodeClusterChanged(o, n) {
					c.enqueueAll()
				}
			}}},
		{c.cfgs, updates(all)},
	}
	for _, p := range c.providers {
		handlers = append(handlers, struct {
			inf cache.SharedIndexInformer
			h   cache.ResourceEventHandler
		}{p.shadows, updates(c.enqueueKey)})
	}
	for _, h := range handlers {
		reg, err := h.inf.AddEventHandler(h.h)
		if err != nil {
			return nil, err
		}
		c.synced = append(c.synced, reg.HasSynced)
	}
	return c, nil
}

// updates calls f on add, update (new object) and delete.
func updates(f func(interface{})) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, n interface{}) { f(n) }, DeleteFunc: f}
}

// Run starts the informers and workers and blocks until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if c.stopRec != nil {
		defer c.stopRec()
	}
	defer c.factory.Shutdown()
	if err := c.startInformers(ctx); err != nil {
		return err
	}
	c.log.Info("Started", "clusterID", c.clusterID, "providers", len(c.providers), "workers", workers)
	kube.RunWorkers(ctx, c.queue, workers, c.sync, c.log, "endpointSlice")
	return nil
}

// startInformers starts the informers (they stop with ctx) and waits until their caches are filled.
func (c *Controller) startInformers(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	go c.cfgs.RunWithContext(ctx)
	for _, p := range c.providers {
		go p.shadows.RunWithContext(ctx)
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("%s: caches did not sync", Component)
	}
	return nil
}

func (c *Controller) watched(ns string) bool { return len(c.namespaces) == 0 || c.namespaces[ns] }

func (c *Controller) enqueueKey(obj interface{}) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	if c.watched(key.Namespace) {
		c.queue.Add(key)
	}
}

// enqueueService queues the EndpointSlices of a Service.
func (c *Controller) enqueueService(obj interface{}) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil || !c.watched(key.Namespace) {
		return
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: key.Name})
	slices, err := c.slices.EndpointSlices(key.Namespace).List(sel)
	if err != nil {
		klog.ErrorS(err, "Cannot list the EndpointSlices of a Service", "service", key)
		return
	}
	for _, s := range slices {
		c.queue.Add(cache.ObjectName{Namespace: s.Namespace, Name: s.Name})
	}
}

// enqueueAll queues every EndpointSlice (a Node's or Configuration's change can affect any of them).
func (c *Controller) enqueueAll() {
	slices, err := c.slices.List(labels.Everything())
	if err != nil {
		klog.ErrorS(err, "Cannot list the EndpointSlices")
		return
	}
	for _, s := range slices {
		if c.watched(s.Namespace) {
			c.queue.Add(cache.ObjectName{Namespace: s.Namespace, Name: s.Name})
		}
	}
}

// nodeClusterChanged reports whether an update changed what VirtualNodeClusters reads (heartbeats do not).
func nodeClusterChanged(o, n interface{}) bool {
	on, ok1 := o.(*corev1.Node)
	nn, ok2 := n.(*corev1.Node)
	if !ok1 || !ok2 {
		return true
	}
	return on.Labels[directconn.NodeTypeLabel] != nn.Labels[directconn.NodeTypeLabel] ||
		on.Labels[directconn.RemoteClusterIDLabel] != nn.Labels[directconn.RemoteClusterIDLabel]
}
