// Package kube gives the direct-connections controllers typed access to the Liqo resources over client-go's
// dynamic client: informers whose caches hold typed objects (converted once, when they enter the cache), typed
// reads from those caches, and typed writes. It replaces a generated clientset for the Liqo kinds.
package kube

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	corev1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/core/v1beta1"
	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
)

// Scheme returns a new scheme with client-go's built-in types and the Liqo types.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, netv1beta1.AddToScheme, offv1beta1.AddToScheme, corev1beta1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("building scheme: %v", err)) // static registrations only: a programming error
		}
	}
	return s
}

// ListKinds maps the Liqo resources to their list kinds (what the dynamic fake client needs).
func ListKinds() map[schema.GroupVersionResource]string {
	return map[schema.GroupVersionResource]string{
		offv1beta1.ShadowEndpointSliceResource: "ShadowEndpointSliceList",
		netv1beta1.ConfigurationResource:       "ConfigurationList",
		netv1beta1.ConnectionResource:          "ConnectionList",
		corev1beta1.ForeignClusterResource:     "ForeignClusterList",
	}
}

// Object is a pointer to a typed API object.
type Object[T any] interface {
	*T
	runtime.Object
}

// NewInformer returns a shared informer on gvr (all namespaces when namespace is "", labels filtered by
// labelSelector when not empty) whose cache and handlers see *T, never unstructured objects. No resync.
func NewInformer[T any, P Object[T]](client dynamic.Interface, gvr schema.GroupVersionResource, namespace,
	labelSelector string, indexers cache.Indexers) (cache.SharedIndexInformer, error) {
	if indexers == nil {
		indexers = cache.Indexers{}
	}
	indexers[cache.NamespaceIndex] = cache.MetaNamespaceIndexFunc
	inf := dynamicinformer.NewFilteredDynamicInformer(client, gvr, namespace, 0, indexers,
		func(o *metav1.ListOptions) { o.LabelSelector = labelSelector }).Informer()
	err := inf.SetTransform(func(obj interface{}) (interface{}, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // already typed, or a tombstone
		}
		return FromUnstructured[T, P](u)
	})
	return inf, err
}

// FromUnstructured converts u to *T.
func FromUnstructured[T any, P Object[T]](u *unstructured.Unstructured) (P, error) {
	out := P(new(T))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return nil, fmt.Errorf("converting %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return out, nil
}

// ToUnstructured converts a typed object to unstructured, stamping apiVersion and kind.
func ToUnstructured(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// Get reads namespace/name from a typed informer's store; nil when absent.
func Get[T any](store cache.Store, namespace, name string) *T {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok, err := store.GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	t, _ := obj.(*T)
	return t
}

// List returns every object of a typed informer's store.
func List[T any](store cache.Store) []*T {
	items := store.List()
	out := make([]*T, 0, len(items))
	for _, o := range items {
		if t, ok := o.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// ByIndex returns the objects of a typed informer's indexer under index name and value.
func ByIndex[T any](indexer cache.Indexer, name, value string) []*T {
	items, err := indexer.ByIndex(name, value)
	if err != nil {
		return nil
	}
	out := make([]*T, 0, len(items))
	for _, o := range items {
		if t, ok := o.(*T); ok {
			out = append(out, t)
		}
	}
	return out
}

// Shadows writes ShadowEndpointSlices through a dynamic client.
type Shadows struct {
	Client dynamic.Interface
}

var shadowGVK = offv1beta1.SchemeGroupVersion.WithKind("ShadowEndpointSlice")

func (s Shadows) resource(ns string) dynamic.ResourceInterface {
	return s.Client.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace(ns)
}

// Create creates sh.
func (s Shadows) Create(ctx context.Context, sh *offv1beta1.ShadowEndpointSlice) error {
	u, err := ToUnstructured(sh, shadowGVK)
	if err != nil {
		return err
	}
	_, err = s.resource(sh.Namespace).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// Get reads namespace/name from the apiserver.
func (s Shadows) Get(ctx context.Context, namespace, name string) (*offv1beta1.ShadowEndpointSlice, error) {
	u, err := s.resource(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return FromUnstructured[offv1beta1.ShadowEndpointSlice](u)
}

// Update replaces sh (sh.ResourceVersion must be set).
func (s Shadows) Update(ctx context.Context, sh *offv1beta1.ShadowEndpointSlice) error {
	u, err := ToUnstructured(sh, shadowGVK)
	if err != nil {
		return err
	}
	_, err = s.resource(sh.Namespace).Update(ctx, u, metav1.UpdateOptions{})
	return err
}

// Delete deletes sh if it still has sh's UID.
func (s Shadows) Delete(ctx context.Context, sh *offv1beta1.ShadowEndpointSlice) error {
	return s.resource(sh.Namespace).Delete(ctx, sh.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: &sh.UID},
	})
}
