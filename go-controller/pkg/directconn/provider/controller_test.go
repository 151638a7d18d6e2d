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

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
)

const data = `{"endpoints":[{"clusterID":"cluster-c","realIP":"10.244.3.7","consumerIP":"10.71.3.7","reflectedIP":"10.71.3.7"}]}`

func testShadow() *offv1beta1.ShadowEndpointSlice {
	return &offv1beta1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-1", UID: "shadow-uid",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "web"},
			Annotations: map[string]string{directconn.DataAnnotation: data}},
		Spec: offv1beta1.ShadowEndpointSliceSpec{Template: offv1beta1.EndpointSliceTemplate{
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.2.4"}}, {Addresses: []string{"10.71.3.7"}}},
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

func testConfiguration() *netv1beta1.Configuration {
	return &netv1beta1.Configuration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "liqo-tenant-c", Name: "c", Labels: map[string]string{directconn.RemoteClusterIDLabel: "cluster-c"}},
		Spec:       netv1beta1.ConfigurationSpec{Remote: netv1beta1.ClusterConfig{CIDR: netv1beta1.ClusterConfigCIDR{Pod: []netv1beta1.CIDR{"10.244.0.0/16"}}}},
		Status:     netv1beta1.ConfigurationStatus{Remote: &netv1beta1.ClusterConfig{CIDR: netv1beta1.ClusterConfigCIDR{Pod: []netv1beta1.CIDR{"10.72.0.0/16"}}}},
	}
}

type fixture struct {
	kube     *kubefake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	recorder *record.FakeRecorder
}

func start(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{
		kube:     kubefake.NewClientset(),
		dyn:      fakeDynamic(t, testShadow(), testConfiguration(), testConnection(netv1beta1.Connected)),
		recorder: record.NewFakeRecorder(100),
	}
	c, err := New(Config{ClusterID: "cluster-b", Kube: f.kube, Dynamic: f.dyn, Recorder: f.recorder})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx, 1) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
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
	s := f.waitAddresses(t, []string{"10.244.2.4", "10.72.3.7"})
	if _, has := s.Annotations[directconn.DataAnnotation]; has {
		t.Errorf("data annotation copied to the EndpointSlice: %v", s.Annotations)
	}
	if s.Labels[discoveryv1.LabelManagedBy] != directconn.ManagedBy || s.Labels[discoveryv1.LabelServiceName] != "web" {
		t.Errorf("labels = %v", s.Labels)
	}
	if ref := metav1.GetControllerOf(s); ref == nil || ref.UID != "shadow-uid" {
		t.Errorf("controller reference = %+v", ref)
	}

	f.setConnection(t, netv1beta1.ConnectionError)
	f.waitAddresses(t, []string{"10.244.2.4", "10.71.3.7"})
	f.waitEvent(t, `Warning DirectConnectionUnavailable connection to cluster cluster-c is down (status "Error")`)

	f.setConnection(t, netv1beta1.Connected)
	f.waitAddresses(t, []string{"10.244.2.4", "10.72.3.7"})

	// Someone edits our slice: repaired.
	s = f.waitAddresses(t, []string{"10.244.2.4", "10.72.3.7"}).DeepCopy()
	s.Endpoints[1].Addresses = []string{"10.1.1.1"}
	if _, err := f.kube.DiscoveryV1().EndpointSlices("demo").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitAddresses(t, []string{"10.244.2.4", "10.72.3.7"})

	// The shadow goes: so does the slice.
	if err := f.dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Delete(context.Background(), "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitAddresses(t, nil)
}

func TestProviderLeavesForeignSliceAlone(t *testing.T) {
	foreign := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{discoveryv1.LabelManagedBy: "someone-else"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}},
	}
	f := &fixture{
		kube:     kubefake.NewClientset(foreign),
		dyn:      fakeDynamic(t, testShadow()),
		recorder: record.NewFakeRecorder(100),
	}
	c, err := New(Config{ClusterID: "cluster-b", Kube: f.kube, Dynamic: f.dyn, Recorder: f.recorder})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer func() { cancel(); c.factory.Shutdown() }()
	if err := c.startInformers(ctx); err != nil {
		t.Fatal(err)
	}
	err = c.sync(ctx, cacheName("demo", "web-1"))
	if err == nil || !strings.Contains(err.Error(), "not managed by") {
		t.Fatalf("sync = %v, want an error saying the slice is not ours", err)
	}
	got, _ := f.kube.DiscoveryV1().EndpointSlices("demo").Get(context.Background(), "web-1", metav1.GetOptions{})
	if got.Endpoints[0].Addresses[0] != "192.0.2.1" {
		t.Fatalf("foreign slice changed: %+v", got)
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
