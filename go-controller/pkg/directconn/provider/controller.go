// Package provider is the provider-side ShadowEndpointSlice controller of direct connections: it turns each
// ShadowEndpointSlice written by a consumer into an EndpointSlice of the same namespace and name, with the
// addresses listed in liqo.io/direct-connections-data replaced by direct addresses while this cluster's Connection
// to the pod's cluster is Connected (directconn.BuildEndpointSlice). It watches ShadowEndpointSlices, its own
// EndpointSlices, Configurations and Connections; a change of any of them re-syncs the slices it affects.
package provider

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
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

// ReasonEndpointSliceRejected is the Warning Event reason on a ShadowEndpointSlice whose template the API
// server rejects as an EndpointSlice (the message carries the API server's field errors).
const ReasonEndpointSliceRejected = "EndpointSliceRejected"

// Component is the Event source and logger name.
const Component = "directconn-provider"

// clusterIndex indexes ShadowEndpointSlices by the cluster IDs listed in their data annotation.
const clusterIndex = "directconn-cluster"

// Config is what New needs.
type Config struct {
	// ClusterID is this provider's cluster ID.
	ClusterID string
	// Kube is this cluster's client (EndpointSlices, Events).
	Kube kubernetes.Interface
	// Dynamic is this cluster's dynamic client (ShadowEndpointSlices, Configurations, Connections).
	Dynamic dynamic.Interface
	// Recorder receives the Events; nil builds one on Kube.
	Recorder record.EventRecorder
}

// Controller is the provider-side controller. Create it with New, start it with Run.
type Controller struct {
	clusterID string
	kube      kubernetes.Interface
	recorder  record.EventRecorder
	stopRec   func()
	log       klog.Logger

	factory informers.SharedInformerFactory
	slices  discoverylisters.EndpointSliceLister
	shadows cache.SharedIndexInformer
	cfgs    cache.SharedIndexInformer
	conns   cache.SharedIndexInformer
	synced  []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// New builds the controller and registers its event handlers; nothing runs until Run.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		clusterID: cfg.ClusterID,
		kube:      cfg.Kube,
		recorder:  cfg.Recorder,
		log:       klog.Background().WithName(Component),
		queue:     kube.NewQueue(Component),
	}
	if c.recorder == nil {
		c.recorder, c.stopRec = kube.NewRecorder(cfg.Kube, Component)
	}
	var err error
	if c.shadows, err = kube.NewInformer[offv1beta1.ShadowEndpointSlice](cfg.Dynamic,
		offv1beta1.ShadowEndpointSliceResource, "", "", cache.Indexers{clusterIndex: listedClusters}); err != nil {
		return nil, err
	}
	if c.cfgs, err = kube.NewInformer[netv1beta1.Configuration](cfg.Dynamic,
		netv1beta1.ConfigurationResource, "", directconn.RemoteClusterIDLabel, nil); err != nil {
		return nil, err
	}
	if c.conns, err = kube.NewInformer[netv1beta1.Connection](cfg.Dynamic,
		netv1beta1.ConnectionResource, "", directconn.RemoteClusterIDLabel, nil); err != nil {
		return nil, err
	}
	c.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = discoveryv1.LabelManagedBy + "=" + directconn.ManagedBy
		}))
	sliceInf := c.factory.Discovery().V1().EndpointSlices()
	c.slices = sliceInf.Lister()

	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{c.shadows, cache.ResourceEventHandlerFuncs{AddFunc: c.enqueue, UpdateFunc: func(_, n interface{}) { c.enqueue(n) }, DeleteFunc: c.enqueue}},
		// Our EndpointSlices have the shadow's namespace and name: repair edits and deletions by others.
		{sliceInf.Informer(), cache.ResourceEventHandlerFuncs{AddFunc: c.enqueue, UpdateFunc: func(_, n interface{}) { c.enqueue(n) }, DeleteFunc: c.enqueue}},
		{c.cfgs, clusterHandler(c.enqueueCluster)},
		{c.conns, clusterHandler(c.enqueueCluster)},
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
	c.log.Info("Started", "clusterID", c.clusterID, "workers", workers)
	kube.RunWorkers(ctx, c.queue, workers, c.sync, c.log, "shadowEndpointSlice")
	return nil
}

// startInformers starts the informers (they stop with ctx) and waits until their caches are filled.
func (c *Controller) startInformers(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	for _, inf := range []cache.SharedIndexInformer{c.shadows, c.cfgs, c.conns} {
		go inf.RunWithContext(ctx)
	}
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("%s: caches did not sync", Component)
	}
	return nil
}

func (c *Controller) enqueue(obj interface{}) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// enqueueCluster queues every ShadowEndpointSlice whose data lists cluster id.
func (c *Controller) enqueueCluster(id string) {
	for _, s := range kube.ByIndex[offv1beta1.ShadowEndpointSlice](c.shadows.GetIndexer(), clusterIndex, id) {
		c.queue.Add(cache.ObjectName{Namespace: s.Namespace, Name: s.Name})
	}
}

// clusterHandler calls f with the liqo.io/remote-cluster-id of Configurations and Connections (old and new).
func clusterHandler(f func(string)) cache.ResourceEventHandler {
	label := func(obj interface{}) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if m, ok := obj.(interface{ GetLabels() map[string]string }); ok {
			if id := m.GetLabels()[directconn.RemoteClusterIDLabel]; id != "" {
				f(id)
			}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    label,
		UpdateFunc: func(o, n interface{}) { label(o); label(n) },
		DeleteFunc: label,
	}
}

// listedClusters is the index function of clusterIndex.
func listedClusters(obj interface{}) ([]string, error) {
	s, ok := obj.(*offv1beta1.ShadowEndpointSlice)
	if !ok {
		return nil, nil
	}
	raw, ok := s.Annotations[directconn.DataAnnotation]
	if !ok {
		return nil, nil
	}
	entries, err := directconn.DecodeData(raw)
	if err != nil {
		return nil, nil // reported by the sync
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range entries {
		if !seen[e.ClusterID] {
			seen[e.ClusterID] = true
			out = append(out, e.ClusterID)
		}
	}
	return out, nil
}
