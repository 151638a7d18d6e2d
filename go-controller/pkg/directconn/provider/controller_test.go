package provider

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	corev1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/core/v1beta1"
	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
)

// The overlap case at B (see directconn's tests): A's pod 10.244.1.5 is 10.80.1.5 at B, C's pod 10.244.3.7 is
// 10.71.3.7 in A and 10.72.3.7 at B.
const data = `{"clusterAddresses":{"cluster-c":["10.71.3.7"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}`

func testShadow() *offv1beta1.ShadowEndpointSlice {
	ep := func(addr string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To("cluster-a"),
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	}
	return &offv1beta1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-1", UID: "shadow-uid",
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: directconn.ReflectionManagedBy,
				directconn.OriginClusterIDLabel: "cluster-a", directconn.DestinationClusterIDLabel: "cluster-b"},
			Annotations: map[string]string{directconn.DataAnnotation: data}},
		Spec: offv1beta1.ShadowEndpointSliceSpec{Template: offv1beta1.EndpointSliceTemplate{
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{ep("10.244.1.5"), ep("10.71.3.7")},
			Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}},
		}},
	}
}

func testConnection(v netv1beta1.ConnectionStatusValue) *netv1beta1.Connection {
	return &netv1beta1.Connection{
		TypeMeta:   metav1.TypeMeta{APIVersion: netv1beta1.SchemeGroupVersion.String(), Kind: "Connection"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "liqo-tenant-c", Name: "gw", Labels: map[string]string{directconn.RemoteClusterIDLabel: "cluster-c"}},
		Status:     netv1beta1.ConnectionStatus{Value: v},
	}
}

// testConfiguration is B's Configuration for cluster id: real pod CIDR 10.244.0.0/16 seen as view.
func testConfiguration(id, view string) *netv1beta1.Configuration {
	return &netv1beta1.Configuration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "liqo-tenant-" + id, Name: id, Labels: map[string]string{directconn.RemoteClusterIDLabel: id}},
		Spec:       netv1beta1.ConfigurationSpec{Remote: netv1beta1.ClusterConfig{CIDR: netv1beta1.ClusterConfigCIDR{Pod: []netv1beta1.CIDR{"10.244.0.0/16"}}}},
		Status:     netv1beta1.ConfigurationStatus{Remote: &netv1beta1.ClusterConfig{CIDR: netv1beta1.ClusterConfigCIDR{Pod: []netv1beta1.CIDR{netv1beta1.CIDR(view)}}}},
	}
}

type fixture struct {
	kube     *kubefake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	recorder *record.FakeRecorder
}

func start(t *testing.T) *fixture {
	t.Helper()
	return startWith(t, kubefake.NewClientset(), testShadow(), testConfiguration("cluster-a", "10.80.0.0/16"),
		testConfiguration("cluster-c", "10.72.0.0/16"), testConnection(netv1beta1.Connected))
}

// startWith runs the provider (cluster-b) on kc and a fake dynamic client holding objs.
func startWith(t *testing.T, kc *kubefake.Clientset, objs ...runtime.Object) *fixture {
	t.Helper()
	f, c := newProvider(t, kc, objs...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 1) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("controller stopped: %v", err)
		}
	})
	return f
}

// newProvider builds the provider (cluster-b) on kc and a fake dynamic client holding objs, recording its Events.
func newProvider(t *testing.T, kc *kubefake.Clientset, objs ...runtime.Object) (*fixture, *Controller) {
	t.Helper()
	f := &fixture{kube: kc, dyn: fakeDynamic(t, objs...), recorder: record.NewFakeRecorder(100)}
	c, err := New(Config{ClusterID: "cluster-b", Kube: f.kube, Dynamic: f.dyn, Recorder: f.recorder})
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

// informersOnly builds the provider (newProvider) and starts its informers only, no worker: the test calls sync
// itself. The returned context ends after 30 s; cleanup stops the informers.
func informersOnly(t *testing.T, kc *kubefake.Clientset, objs ...runtime.Object) (*fixture, *Controller, context.Context) {
	t.Helper()
	f, c := newProvider(t, kc, objs...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(func() { cancel(); c.factory.Shutdown() })
	if err := c.startInformers(ctx); err != nil {
		t.Fatal(err)
	}
	return f, c, ctx
}

// waitAddresses waits until EndpointSlice demo/web-1 has the given addresses (nil: until it is gone).
func (f *fixture) waitAddresses(t *testing.T, want []string) *discoveryv1.EndpointSlice {
	t.Helper()
	var last *discoveryv1.EndpointSlice
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(ctx context.Context) (bool, error) {
			s, err := f.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "web-1", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				last = nil
				return want == nil, nil
			}
			if err != nil {
				return false, err
			}
			last = s
			var got []string
			for _, e := range s.Endpoints {
				got = append(got, e.Addresses...)
			}
			return reflect.DeepEqual(got, want), nil
		})
	if err != nil {
		t.Fatalf("EndpointSlice demo/web-1: want addresses %v, last seen %+v: %v", want, last, err)
	}
	return last
}

func (f *fixture) setConnection(t *testing.T, v netv1beta1.ConnectionStatusValue) {
	t.Helper()
	u, err := kube.ToUnstructured(testConnection(v), netv1beta1.SchemeGroupVersion.WithKind("Connection"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.dyn.Resource(netv1beta1.ConnectionResource).Namespace("liqo-tenant-c").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) waitEvent(t *testing.T, substr string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-f.recorder.Events:
			if strings.Contains(e, substr) {
				return
			}
		case <-timeout:
			t.Fatalf("no Event containing %q", substr)
		}
	}
}

func TestProviderFollowsConnection(t *testing.T) {
	f := start(t)
	s := f.waitAddresses(t, []string{"10.80.1.5", "10.72.3.7"})
	if _, has := s.Annotations[directconn.DataAnnotation]; has {
		t.Errorf("data annotation copied to the EndpointSlice: %v", s.Annotations)
	}
	if s.Labels[directconn.ShadowManagedByLabel] != directconn.ShadowManagedBy || s.Labels[discoveryv1.LabelServiceName] != "web" ||
		s.Labels[discoveryv1.LabelManagedBy] != directconn.ReflectionManagedBy {
		t.Errorf("labels = %v", s.Labels)
	}
	if ref := metav1.GetControllerOf(s); ref == nil || ref.UID != "shadow-uid" {
		t.Errorf("controller reference = %+v", ref)
	}

	f.setConnection(t, netv1beta1.ConnectionError)
	f.waitAddresses(t, []string{"10.80.1.5", "10.71.3.7"})
	f.waitEvent(t, `Warning DirectConnectionUnavailable connection to cluster cluster-c is down (status "Error")`)

	f.setConnection(t, netv1beta1.Connected)
	f.waitAddresses(t, []string{"10.80.1.5", "10.72.3.7"})

	// Someone edits our slice: repaired.
	s = f.waitAddresses(t, []string{"10.80.1.5", "10.72.3.7"}).DeepCopy()
	s.Endpoints[1].Addresses = []string{"10.1.1.1"}
	if _, err := f.kube.DiscoveryV1().EndpointSlices("demo").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitAddresses(t, []string{"10.80.1.5", "10.72.3.7"})

	// The shadow goes: so does the slice.
	if err := f.dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitAddresses(t, nil)
}

// TestProviderAppliesLateConfiguration: the Configurations arrive after the shadow (Liqo's open #3328): the
// slice first carries the consumer's addresses, with Events, then the mapped ones, with no change to the shadow.
func TestProviderAppliesLateConfiguration(t *testing.T) {
	f := startWith(t, kubefake.NewClientset(), testShadow(), testConnection(netv1beta1.Connected))
	f.waitAddresses(t, []string{"10.244.1.5", "10.71.3.7"})
	f.waitEvent(t, "Warning DirectConnectionUnavailable no Configuration for cluster cluster-c")
	for _, cfg := range []*netv1beta1.Configuration{testConfiguration("cluster-a", "10.80.0.0/16"), testConfiguration("cluster-c", "10.72.0.0/16")} {
		u, err := kube.ToUnstructured(cfg, netv1beta1.SchemeGroupVersion.WithKind("Configuration"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.dyn.Resource(netv1beta1.ConfigurationResource).Namespace(cfg.Namespace).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitAddresses(t, []string{"10.80.1.5", "10.72.3.7"})
}

// TestProviderReadinessFollowsForeignCluster: where ForeignClusters are served, the origin's ForeignCluster
// decides the endpoints' Ready condition, and a change of its status re-syncs the slice.
func TestProviderReadinessFollowsForeignCluster(t *testing.T) {
	kc := kubefake.NewClientset()
	kc.Resources = []*metav1.APIResourceList{{GroupVersion: corev1beta1.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "foreignclusters", Kind: "ForeignCluster"}}}}
	fc := &corev1beta1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "cluster-a"}, Spec: corev1beta1.ForeignClusterSpec{ClusterID: "cluster-a"}}
	fc.Status.Modules.Networking = corev1beta1.Module{Enabled: true, Conditions: []corev1beta1.Condition{
		{Type: corev1beta1.NetworkConnectionStatusCondition, Status: "Error"}}}
	f := startWith(t, kc, testShadow(), testConfiguration("cluster-a", "10.80.0.0/16"),
		testConfiguration("cluster-c", "10.72.0.0/16"), testConnection(netv1beta1.Connected), fc)
	f.waitReady(t, []bool{false, false})

	fc.Status.Modules.Networking.Conditions[0].Status = corev1beta1.ConditionStatusEstablished
	u, err := kube.ToUnstructured(fc, corev1beta1.SchemeGroupVersion.WithKind("ForeignCluster"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.dyn.Resource(corev1beta1.ForeignClusterResource).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitReady(t, []bool{true, true})
}

func (f *fixture) waitReady(t *testing.T, want []bool) {
	t.Helper()
	var got []bool
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(ctx context.Context) (bool, error) {
			s, err := f.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "web-1", metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = nil
			for _, e := range s.Endpoints {
				got = append(got, e.Conditions.Ready != nil && *e.Conditions.Ready)
			}
			return reflect.DeepEqual(got, want), nil
		})
	if err != nil {
		t.Fatalf("EndpointSlice demo/web-1: ready %v, want %v", got, want)
	}
}

// TestProviderRefusesForeignSlice: an EndpointSlice of the shadow's name that another controller manages is left
// alone; the shadow gets a Warning Event and the sync is not retried (before: an error, retried forever). Once the
// other slice is gone, ours is created.
func TestProviderRefusesForeignSlice(t *testing.T) {
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{discoveryv1.LabelManagedBy: "someone-else"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}},
	}
	f, c, ctx := informersOnly(t, kubefake.NewClientset(foreign), testShadow())
	if err := c.sync(ctx, cacheName("demo", "web-1")); err != nil {
		t.Fatalf("sync = %v, want nil (reported, not retried)", err)
	}
	f.waitEvent(t, `Warning EndpointSliceConflict EndpointSlice demo/web-1 is managed by another controller (endpointslice.kubernetes.io/managed-by="someone-else", controller none)`)
	got, err := f.kube.DiscoveryV1().EndpointSlices("demo").Get(context.Background(), "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Endpoints[0].Addresses[0] != "192.0.2.1" || got.Labels[directconn.ShadowManagedByLabel] != "" {
		t.Fatalf("foreign slice changed: %+v", got)
	}
	for _, a := range f.kube.Actions() {
		if v := a.GetVerb(); a.GetResource().Resource == "endpointslices" && (v == "create" || v == "update" || v == "patch" || v == "delete") {
			t.Errorf("the provider wrote to the foreign slice: %s", a.GetVerb())
		}
	}

	// The other controller's slice goes: the shadow's slice is made.
	if err := f.kube.DiscoveryV1().EndpointSlices("demo").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := c.slices.EndpointSlices("demo").Get("web-1")
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, cacheName("demo", "web-1")); err != nil {
		t.Fatal(err)
	}
	if got, err := f.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "web-1", metav1.GetOptions{}); err != nil || !ownedByShadow(got) {
		t.Fatalf("after the foreign slice went: %+v, %v", got, err)
	}
}

// TestProviderReportsMissingOrigin: a shadow without offloading.liqo.io/origin gets a Warning Event, no slice,
// and no retry.
func TestProviderReportsMissingOrigin(t *testing.T) {
	sh := testShadow()
	delete(sh.Labels, directconn.OriginClusterIDLabel)
	f, c, ctx := informersOnly(t, kubefake.NewClientset(), sh)
	if err := c.sync(ctx, cacheName("demo", "web-1")); err != nil {
		t.Fatalf("sync = %v, want nil", err)
	}
	f.waitEvent(t, "Warning MissingOriginCluster ShadowEndpointSlice demo/web-1 has no label offloading.liqo.io/origin")
	if _, err := f.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "web-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("EndpointSlice written for a shadow without origin: %v", err)
	}
}

func cacheName(ns, name string) cache.ObjectName { return cache.ObjectName{Namespace: ns, Name: name} }

func fakeDynamic(t *testing.T, objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	t.Helper()
	d, err := kube.NewFakeDynamic(objs...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestProviderLeavesLiqosSlice: a slice that Liqo's ShadowEndpointSlice controller wrote (its field manager in
// managedFields), although controlled by the shadow of its name, is Liqo's: an Event, no write, no retry.
func TestProviderLeavesLiqosSlice(t *testing.T) {
	liqos := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-1",
			Labels: map[string]string{directconn.ShadowManagedByLabel: directconn.ShadowManagedBy},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: offv1beta1.SchemeGroupVersion.String(), Kind: "ShadowEndpointSlice",
				Name: "web-1", UID: "shadow-uid", Controller: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: LiqoFieldManager, Operation: metav1.ManagedFieldsOperationApply}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}},
	}
	f, c, ctx := informersOnly(t, kubefake.NewClientset(liqos), testShadow())
	if err := c.sync(ctx, cacheName("demo", "web-1")); err != nil {
		t.Fatalf("sync = %v, want nil", err)
	}
	f.waitEvent(t, "Warning EndpointSliceConflict EndpointSlice demo/web-1 is managed by another controller "+
		`(endpointslice.kubernetes.io/managed-by="", controller Liqo's ShadowEndpointSlice controller (field manager shadow-endpointslice-controller))`)
	for _, a := range f.kube.Actions() {
		if v := a.GetVerb(); a.GetResource().Resource == "endpointslices" && (v == "create" || v == "update" || v == "patch" || v == "delete") {
			t.Errorf("the provider wrote to Liqo's slice: %s", v)
		}
	}
	// The shadow goes: Liqo's slice is not ours to delete either.
	if err := f.dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return kube.Get[offv1beta1.ShadowEndpointSlice](c.shadows.GetStore(), "demo", "web-1") == nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.sync(ctx, cacheName("demo", "web-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "web-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("Liqo's slice was deleted: %v", err)
	}
}
