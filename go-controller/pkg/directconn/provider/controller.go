// Package provider is the provider-side ShadowEndpointSlice controller of direct connections, a drop-in for
// Liqo's: it turns each ShadowEndpointSlice written by a consumer (Liqo's virtual kubelet or our consumer) into an
// EndpointSlice of the same namespace and name, with every address mapped as Liqo maps it and the addresses
// listed in liqo.io/direct-connections-data replaced by direct addresses while this cluster's Connection to the
// pod's cluster is Connected (directconn.BuildEndpointSlice). It watches ShadowEndpointSlices, EndpointSlices,
// Configurations, Connections and (when the CRD is served) ForeignClusters; a change of any of them re-syncs the
// slices it affects.
package provider

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	corev1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/core/v1beta1"
	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
)

// Warning Event reasons on a ShadowEndpointSlice that cannot be turned into an EndpointSlice. None is retried
// until the objects involved change.
const (
	// ReasonEndpointSliceRejected: the API server rejects the template as an EndpointSlice (the message carries
	// the API server's field errors).
	ReasonEndpointSliceRejected = "EndpointSliceRejected"
	// ReasonEndpointSliceConflict: an EndpointSlice of the same name exists that no ShadowEndpointSlice controls
	// (another controller's); it is left alone.
	ReasonEndpointSliceConflict = "EndpointSliceConflict"
	// ReasonNoOrigin: the shadow has no offloading.liqo.io/origin label, so its consumer is unknown.
	ReasonNoOrigin = "MissingOriginCluster"
)

// Component is the Event source and logger name.
const Component = "directconn-provider"

// Field managers (metadata.managedFields) of the EndpointSlices made from ShadowEndpointSlices.
const (
	// FieldManager is ours.
	FieldManager = "ovn-egressip-directconn"
	// LiqoFieldManager is Liqo's ShadowEndpointSlice controller's; a slice it has written is left to it.
	LiqoFieldManager = "shadow-endpointslice-controller"
)

// clusterIndex indexes ShadowEndpointSlices by their origin cluster ID and the cluster IDs listed in their data
// annotation: the clusters whose Configuration, Connection or ForeignCluster the slice depends on.
const clusterIndex = "directconn-cluster"

// Config is what New needs.
type Config struct {
	// ClusterID is this provider's cluster ID.
	ClusterID string
	// Kube is this cluster's client (EndpointSlices, Events).
	Kube kubernetes.Interface
	// Dynamic is this cluster's dynamic client (ShadowEndpointSlices, Configurations, Connections,
	// ForeignClusters).
	Dynamic dynamic.Interface
	// DenyDirectConnections drops the endpoints listed in the data instead of remapping them.
	DenyDirectConnections bool
	// Recorder receives the Events; nil builds one on Kube.
	Recorder record.EventRecorder
}

// Controller is the provider-side controller. Create it with New, start it with Run.
type Controller struct {
	clusterID string
	deny      bool
	kube      kubernetes.Interface
	recorder  record.EventRecorder
	stopRec   func()
	log       klog.Logger

	factory informers.SharedInformerFactory
	slices  discoverylisters.EndpointSliceLister
	shadows cache.SharedIndexInformer
	cfgs    cache.SharedIndexInformer
	conns   cache.SharedIndexInformer
	fcs     cache.SharedIndexInformer // nil when the ForeignCluster CRD is not served
	synced  []cache.InformerSynced

	queue workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

// New builds the controller and registers its event handlers; nothing runs until Run.
func New(cfg Config) (*Controller, error) {
	c := &Controller{
		clusterID: cfg.ClusterID,
		deny:      cfg.DenyDirectConnections,
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
	served, err := foreignClustersServed(cfg.Kube)
	if err != nil {
		return nil, err
	}
	if served {
		if c.fcs, err = kube.NewInformer[corev1beta1.ForeignCluster](cfg.Dynamic,
			corev1beta1.ForeignClusterResource, "", "", nil); err != nil {
			return nil, err
		}
	}
	// Every EndpointSlice, not only ours: a slice of another controller that holds a shadow's name is reported,
	// and the shadow is synced again when that slice goes.
	c.factory = informers.NewSharedInformerFactory(cfg.Kube, 0)
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
	if c.fcs != nil {
		handlers = append(handlers, struct {
			inf cache.SharedIndexInformer
			h   cache.ResourceEventHandler
		}{c.fcs, foreignClusterHandler(c.enqueueCluster)})
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
	for _, inf := range []cache.SharedIndexInformer{c.shadows, c.cfgs, c.conns, c.fcs} {
		if inf != nil {
			go inf.RunWithContext(ctx)
		}
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

// enqueueCluster queues every ShadowEndpointSlice that comes from cluster id or whose data lists it.
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

// foreignClusterHandler calls f with the spec.clusterID of ForeignClusters (old and new).
func foreignClusterHandler(f func(string)) cache.ResourceEventHandler {
	id := func(obj interface{}) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if fc, ok := obj.(*corev1beta1.ForeignCluster); ok && fc.Spec.ClusterID != "" {
			f(fc.Spec.ClusterID)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    id,
		UpdateFunc: func(o, n interface{}) { id(o); id(n) },
		DeleteFunc: id,
	}
}

// foreignClustersServed reports whether the apiserver serves ForeignClusters (Liqo is installed, or its CRD is).
// It is asked once, at start.
func foreignClustersServed(client kubernetes.Interface) (bool, error) {
	gv := corev1beta1.SchemeGroupVersion.String()
	list, err := client.Discovery().ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", gv, err)
	}
	for _, r := range list.APIResources {
		if r.Name == corev1beta1.ForeignClusterResource.Resource {
			return true, nil
		}
	}
	return false, nil
}

// listedClusters is the index function of clusterIndex.
func listedClusters(obj interface{}) ([]string, error) {
	s, ok := obj.(*offv1beta1.ShadowEndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	origin := s.Labels[directconn.OriginClusterIDLabel]
	if origin != "" {
		out = append(out, origin)
	}
	if raw, ok := s.Annotations[directconn.DataAnnotation]; ok {
		data, _ := directconn.ParseData(raw) // problems are reported by the sync
		for _, c := range data.Clusters() {
			if c != origin {
				out = append(out, c)
			}
		}
	}
	return out, nil
}
