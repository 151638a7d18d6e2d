package consumer

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

// TestConsumerLeavesUnchangedShadowsAlone runs the consumer against a real kube-apiserver (one cluster serving as
// consumer and as provider B) with EndpointSlices that the apiserver defaults (ports without name or protocol) and
// that carry most optional endpoint fields. Once each ShadowEndpointSlice exists, further syncs must send no write.
func TestConsumerLeavesUnchangedShadowsAlone(t *testing.T) {
	env := apiserver.Start(t)
	var writes apiserver.Writes
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	providerDyn, err := dynamic.NewForConfig(writes.Wrap(env.Config))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	for _, ns := range []string{"demo", "liqo-tenant-cluster-c"} {
		if _, err := kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []*corev1.Node{node("a-node1", ""), node("vn-b", "cluster-b"), node("vn-c", "cluster-c")} {
		if _, err := kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createConfiguration(ctx, t, dyn, configuration("cluster-c", "10.244.0.0/16", "10.71.0.0/16"))
	if _, err := kc.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web",
			Annotations: map[string]string{directconn.UseDirectConnectionsAnnotation: "true"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	full := discoveryv1.Endpoint{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("a-node1"),
		Hostname: ptr.To("web-0"), Zone: ptr.To("z1"),
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "demo", Name: "web-0", UID: "pod-uid"},
		Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}},
			ForNodes: []discoveryv1.ForNode{{Name: "a-node1"}}}}
	endpointSlices := map[string]*discoveryv1.EndpointSlice{
		// Ports without name and protocol; endpoints on the consumer, on B and on C (listed in the data).
		"defaulted-ports": {AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{full, {Addresses: []string{"10.70.2.4"}, NodeName: ptr.To("vn-b")},
				{Addresses: []string{"10.71.3.7"}, NodeName: ptr.To("vn-c")}},
			Ports: []discoveryv1.EndpointPort{{Port: ptr.To[int32](80)}, {Name: ptr.To("dns"), Port: ptr.To[int32](53),
				Protocol: ptr.To(corev1.ProtocolUDP)}}},
		"no-ports":     {AddressType: discoveryv1.AddressTypeIPv4, Endpoints: []discoveryv1.Endpoint{full}},
		"no-endpoints": {AddressType: discoveryv1.AddressTypeIPv6, Ports: []discoveryv1.EndpointPort{{Name: ptr.To("x")}}},
	}
	for name, s := range endpointSlices {
		s.Namespace, s.Name = "demo", name
		s.Labels = map[string]string{discoveryv1.LabelServiceName: "web"}
		if _, err := kc.DiscoveryV1().EndpointSlices("demo").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create EndpointSlice %s: %v", name, err)
		}
	}

	c, err := New(Config{ClusterID: "cluster-a", Kube: kc, Dynamic: dyn, Recorder: record.NewFakeRecorder(1000),
		Providers: []Provider{{ClusterID: "cluster-b", Dynamic: providerDyn}}, Namespaces: []string{"demo"}})
	if err != nil {
		t.Fatal(err)
	}
	informerCtx, stopInformers := context.WithCancel(ctx)
	defer func() { stopInformers(); c.factory.Shutdown() }()
	if err := c.startInformers(informerCtx); err != nil {
		t.Fatal(err)
	}
	for name := range endpointSlices {
		if err := c.sync(ctx, cache.ObjectName{Namespace: "demo", Name: name}); err != nil {
			t.Fatalf("first sync of %s: %v", name, err)
		}
	}
	created := map[string]*offv1beta1.ShadowEndpointSlice{}
	for name := range endpointSlices {
		u, err := dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("ShadowEndpointSlice %s after the first sync: %v", name, err)
		}
		if created[name], err = kube.FromUnstructured[offv1beta1.ShadowEndpointSlice](u); err != nil {
			t.Fatal(err)
		}
	}
	if got := created["defaulted-ports"]; got.Annotations[directconn.DataAnnotation] == "" ||
		len(got.Spec.Template.Ports) != 2 || got.Spec.Template.Ports[0].Protocol == nil {
		t.Fatalf("shadow defaulted-ports = %+v, want the data annotation and the defaulted ports", got)
	}
	// Wait until the consumer's cache of B's shadows holds what was created.
	shadows := c.providers[0].shadows.GetStore()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for name, s := range created {
			cached := kube.Get[offv1beta1.ShadowEndpointSlice](shadows, "demo", name)
			if cached == nil || cached.ResourceVersion != s.ResourceVersion {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the consumer's cache never caught up with the created ShadowEndpointSlices: %v", err)
	}
	if n := len(writes.Of("shadowendpointslices")); n != len(endpointSlices) {
		t.Errorf("first syncs sent %d ShadowEndpointSlice writes, want %d (one create each): %q",
			n, len(endpointSlices), writes.Of("shadowendpointslices"))
	}

	apiserver.ResyncsWriteNothing(t, &writes, "shadowendpointslices", 5, slices.Collect(maps.Keys(endpointSlices)), func(name string) error {
		return c.sync(ctx, cache.ObjectName{Namespace: "demo", Name: name})
	})
	for name, before := range created {
		u, err := dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u.GetResourceVersion() != before.ResourceVersion {
			t.Errorf("ShadowEndpointSlice %s: resourceVersion %s -> %s", name, before.ResourceVersion, u.GetResourceVersion())
		}
	}
}

// createConfiguration creates cfg with its status (which the status subresource ignores on create).
func createConfiguration(ctx context.Context, t *testing.T, dyn dynamic.Interface, cfg *netv1beta1.Configuration) {
	t.Helper()
	u, err := kube.ToUnstructured(cfg, netv1beta1.SchemeGroupVersion.WithKind("Configuration"))
	if err != nil {
		t.Fatal(err)
	}
	r := dyn.Resource(netv1beta1.ConfigurationResource).Namespace(cfg.Namespace)
	created, err := r.Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Configuration %s: %v", cfg.Name, err)
	}
	created.Object["status"] = u.Object["status"]
	if _, err := r.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status of Configuration %s: %v", cfg.Name, err)
	}
}
