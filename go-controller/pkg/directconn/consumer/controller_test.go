package consumer

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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

func node(name, cluster string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if cluster != "" {
		n.Labels = map[string]string{directconn.NodeTypeLabel: directconn.VirtualNodeType, directconn.RemoteClusterIDLabel: cluster}
	}
	return n
}

func configuration(id, real, view string) *netv1beta1.Configuration {
	c := &netv1beta1.Configuration{
		ObjectMeta: metav1.ObjectMeta{Namespace: "liqo-tenant-" + id, Name: id, Labels: map[string]string{directconn.RemoteClusterIDLabel: id}},
		Spec:       netv1beta1.ConfigurationSpec{Remote: netv1beta1.ClusterConfig{CIDR: netv1beta1.ClusterConfigCIDR{Pod: []netv1beta1.CIDR{netv1beta1.CIDR(real)}}}},
		Status:     netv1beta1.ConfigurationStatus{Remote: &netv1beta1.ClusterConfig{CIDR: netv1beta1.ClusterConfigCIDR{Pod: []netv1beta1.CIDR{netv1beta1.CIDR(view)}}}},
	}
	return c
}

func ep(nodeName, addr string) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{Addresses: []string{addr}, NodeName: ptr.To(nodeName)}
}

func slice(eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   eps,
	}
}

type fixture struct {
	kube     *kubefake.Clientset
	provider *dynamicfake.FakeDynamicClient
	recorder *record.FakeRecorder
	ctrl     *Controller
}

func newFixture(t *testing.T, providerObjs ...runtime.Object) *fixture {
	t.Helper()
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web",
		Annotations: map[string]string{directconn.UseDirectConnectionsAnnotation: "true"}}}
	f := &fixture{
		kube: kubefake.NewClientset(svc, node("a-node1", ""), node("vn-b", "cluster-b"), node("vn-c", "cluster-c"),
			slice(ep("a-node1", "10.244.1.5"), ep("vn-b", "10.70.2.4"), ep("vn-c", "10.71.3.7"))),
		provider: fakeDynamic(t, providerObjs...),
		recorder: record.NewFakeRecorder(100),
	}
	consumerDyn := fakeDynamic(t,
		configuration("cluster-b", "10.244.0.0/16", "10.70.0.0/16"),
		configuration("cluster-c", "10.244.0.0/16", "10.71.0.0/16"))
	c, err := New(Config{ClusterID: "cluster-a", Kube: f.kube, Dynamic: consumerDyn, Recorder: f.recorder,
		Providers: []Provider{{ClusterID: "cluster-b", Dynamic: f.provider}}, Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl = c
	return f
}

func (f *fixture) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.ctrl.Run(ctx, 2) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("controller stopped: %v", err)
		}
	})
}

func (f *fixture) getShadow(ctx context.Context) (*offv1beta1.ShadowEndpointSlice, error) {
	u, err := f.provider.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return kube.FromUnstructured[offv1beta1.ShadowEndpointSlice](u)
}

// waitShadow waits until the shadow at B satisfies ok (nil shadow: absent).
func (f *fixture) waitShadow(t *testing.T, what string, ok func(*offv1beta1.ShadowEndpointSlice) bool) *offv1beta1.ShadowEndpointSlice {
	t.Helper()
	var last *offv1beta1.ShadowEndpointSlice
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(ctx context.Context) (bool, error) {
			s, err := f.getShadow(ctx)
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
			last = s
			return ok(s), nil
		})
	if err != nil {
		t.Fatalf("shadow at B: want %s, last seen %+v: %v", what, last, err)
	}
	return last
}

func addrs(s *offv1beta1.ShadowEndpointSlice) []string {
	var out []string
	for _, e := range s.Spec.Template.Endpoints {
		out = append(out, e.Addresses...)
	}
	return out
}

func TestConsumerReflects(t *testing.T) {
	f := newFixture(t)
	f.run(t)
	ctx := context.Background()
	want := `{"clusterAddresses":{"cluster-c":["10.71.3.7"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}`
	s := f.waitShadow(t, "data annotation", func(s *offv1beta1.ShadowEndpointSlice) bool {
		return s != nil && s.Annotations[directconn.DataAnnotation] == want
	})
	// B's own pod is left out (B's EndpointSlice controller serves it), the others untranslated.
	if got := addrs(s); !reflect.DeepEqual(got, []string{"10.244.1.5", "10.71.3.7"}) {
		t.Errorf("shadow addresses = %v", got)
	}
	if s.Labels[directconn.OriginClusterIDLabel] != "cluster-a" || s.Labels[directconn.DestinationClusterIDLabel] != "cluster-b" ||
		s.Labels[discoveryv1.LabelManagedBy] != directconn.ReflectionManagedBy {
		t.Errorf("labels = %v", s.Labels)
	}

	// Opting out removes the annotation.
	svc, err := f.kube.CoreV1().Services("demo").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = nil
	if _, err := f.kube.CoreV1().Services("demo").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitShadow(t, "no data annotation", func(s *offv1beta1.ShadowEndpointSlice) bool {
		_, has := s.Annotations[directconn.DataAnnotation]
		return s != nil && !has
	})

	// A node that stops being virtual: its pod counts as the consumer's, and is reflected.
	n, err := f.kube.CoreV1().Nodes().Get(ctx, "vn-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = nil
	if _, err := f.kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitShadow(t, "B's pod reflected", func(s *offv1beta1.ShadowEndpointSlice) bool {
		return s != nil && reflect.DeepEqual(addrs(s), []string{"10.244.1.5", "10.70.2.4", "10.71.3.7"})
	})

	// The slice goes: so does the shadow.
	if err := f.kube.DiscoveryV1().EndpointSlices("demo").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitShadow(t, "absent", func(s *offv1beta1.ShadowEndpointSlice) bool { return s == nil })
}

func TestConsumerTooLargeLeavesPreviousShadow(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer func() { cancel(); f.ctrl.factory.Shutdown() }()
	if err := f.ctrl.startInformers(ctx); err != nil {
		t.Fatal(err)
	}
	key := cache.ObjectName{Namespace: "demo", Name: "web-1"}
	if err := f.ctrl.sync(ctx, key); err != nil {
		t.Fatal(err)
	}
	before, err := f.getShadow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 8000 endpoints on C: the data document (addresses and real IPs) is about 370 KB.
	var eps []discoveryv1.Endpoint
	for i := range 8000 {
		eps = append(eps, ep("vn-c", fmt.Sprintf("10.71.%d.%d", i/250, i%250+1)))
	}
	big := slice(eps...)
	if _, err := f.kube.DiscoveryV1().EndpointSlices("demo").Update(ctx, big, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		s, err := f.ctrl.slices.EndpointSlices("demo").Get("web-1")
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return len(s.Endpoints) == 8000, nil
	}); err != nil {
		t.Fatal("the informer never saw the large slice")
	}
	if err := f.ctrl.sync(ctx, key); err != nil {
		t.Fatalf("sync = %v; too large is reported, not retried", err)
	}
	after, err := f.getShadow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != before.ResourceVersion || !reflect.DeepEqual(addrs(after), addrs(before)) {
		t.Fatalf("previous shadow changed: %v -> %v", addrs(before), addrs(after))
	}
	select {
	case e := <-f.recorder.Events:
		if !strings.HasPrefix(e, "Warning "+directconn.ReasonAnnotationTooLarge+" ") || !strings.Contains(e, "left as it was") {
			t.Fatalf("event = %q", e)
		}
	default:
		t.Fatal("no Event")
	}
}

func fakeDynamic(t *testing.T, objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	t.Helper()
	d, err := kube.NewFakeDynamic(objs...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func legacyOrForeignShadow(labels map[string]string) *offv1beta1.ShadowEndpointSlice {
	return &offv1beta1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: labels,
			Annotations: map[string]string{directconn.DataAnnotation: `{"endpoints":[]}`}},
		Spec: offv1beta1.ShadowEndpointSliceSpec{Template: offv1beta1.EndpointSliceTemplate{AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}}}}},
	}
}

// TestConsumerAdoptsLegacyShadow: a shadow an earlier version wrote for this cluster (its own origin label, the old
// data format) is rewritten in Liqo's shape (before: every create failed with AlreadyExists, retried forever).
func TestConsumerAdoptsLegacyShadow(t *testing.T) {
	f := newFixture(t, legacyOrForeignShadow(map[string]string{legacyOriginLabel: "cluster-a"}))
	f.run(t)
	f.waitShadow(t, "Liqo's shape", func(s *offv1beta1.ShadowEndpointSlice) bool {
		return s != nil && s.Labels[directconn.OriginClusterIDLabel] == "cluster-a" &&
			s.Annotations[directconn.DataAnnotation] == `{"clusterAddresses":{"cluster-c":["10.71.3.7"]},"realIPs":{"10.71.3.7":"10.244.3.7"}}` &&
			reflect.DeepEqual(addrs(s), []string{"10.244.1.5", "10.71.3.7"})
	})
}

// TestConsumerLeavesOthersShadow: a shadow of the same name written by another consumer is left alone, with a
// Warning Event and no retry.
func TestConsumerLeavesOthersShadow(t *testing.T) {
	f := newFixture(t, legacyOrForeignShadow(map[string]string{directconn.OriginClusterIDLabel: "cluster-z"}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer func() { cancel(); f.ctrl.factory.Shutdown() }()
	if err := f.ctrl.startInformers(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.ctrl.sync(ctx, cache.ObjectName{Namespace: "demo", Name: "web-1"}); err != nil {
		t.Fatalf("sync = %v, want nil (reported, not retried)", err)
	}
	select {
	case e := <-f.recorder.Events:
		want := `Warning ShadowEndpointSliceConflict ShadowEndpointSlice demo/web-1 in cluster cluster-b exists and was not written by this consumer (offloading.liqo.io/origin="cluster-z"): left alone`
		if e != want {
			t.Fatalf("event %q, want %q", e, want)
		}
	default:
		t.Fatal("no Event")
	}
	s, err := f.getShadow(ctx)
	if err != nil || !reflect.DeepEqual(addrs(s), []string{"192.0.2.1"}) {
		t.Fatalf("the other consumer's shadow changed: %+v, %v", s, err)
	}
}
