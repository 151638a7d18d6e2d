package integration

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	corev1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/core/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/provider"
)

// TestLiqoShadowsAtOurProvider runs our provider in B on ShadowEndpointSlices exactly as Liqo's virtual kubelet in
// consumer A writes them, beside Configurations, Connections and a ForeignCluster as Liqo writes them.
//
// B sees A's pods (10.244.0.0/16) as 10.80.0.0/16 and A's external CIDR 10.60.0.0/16 as 10.61.0.0/16; C (also
// 10.244.0.0/16, seen by A as 10.71.0.0/16) as 10.72.0.0/16; D (10.203.0.0/16, not remapped by A) as 10.74.0.0/16.
func TestLiqoShadowsAtOurProvider(t *testing.T) {
	b := startCluster(t, "cluster-b")
	b.namespace(t, "demo")
	b.createLiqo(t, liqoConfiguration("cluster-a", "10.244.0.0/16", "10.80.0.0/16", "10.60.0.0/16", "10.61.0.0/16"))
	b.createLiqo(t, liqoConfiguration("cluster-c", "10.244.0.0/16", "10.72.0.0/16", "10.60.0.0/16", "10.65.0.0/16"))
	b.createLiqo(t, liqoConfiguration("cluster-d", "10.203.0.0/16", "10.74.0.0/16", "10.60.0.0/16", "10.66.0.0/16"))
	b.createLiqo(t, liqoConnection("cluster-c", "Connected"))
	b.createLiqo(t, liqoConnection("cluster-d", "Connected"))
	b.createLiqo(t, liqoForeignCluster("cluster-a", "Established", "Established"))
	// An EndpointSlice of Kubernetes' own controller, with the name a shadow will have.
	taken := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "taken", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.2.9"}}},
	}
	ctx := context.Background()
	if _, err := b.kube.DiscoveryV1().EndpointSlices("demo").Create(ctx, taken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// plain: A does not remap D; the result is exactly what Liqo's provider makes of it (listed: D's
	// Configuration; A's pod: A's pod CIDR; an address in A's external CIDR: A's external CIDR; other: unchanged).
	b.createLiqo(t, liqoShadow("plain", "cluster-b", `{"clusterAddresses":{"cluster-d":["10.203.3.7"]}}`,
		"10.244.1.5", "10.203.3.7", "10.60.0.9", "192.0.2.10"))
	// overlap: A lists C's pod under its remapped view 10.71.3.7 (Liqo's known gap: its provider fails the slice).
	b.createLiqo(t, liqoShadow("overlap", "cluster-b", `{"clusterAddresses":{"cluster-c":["10.71.3.7"]}}`,
		"10.244.1.5", "10.71.3.7"))
	// bad: an unknown field, an entry that is not an address, a cluster ID with no Configuration, a real IP in no
	// CIDR of its cluster; each reported, the other addresses mapped.
	b.createLiqo(t, liqoShadow("bad", "cluster-b",
		`{"clusterAddresses":{"cluster-c":["10.71.3.7","bogus"],"cluster-x":["10.244.9.9"],"cluster-d":["10.99.9.9"]},`+
			`"realIPs":{"10.71.3.7":"10.244.3.7","10.99.9.9":"10.250.9.9"},"future":{"x":1}}`,
		"10.244.1.5", "10.71.3.7", "10.244.9.9", "10.99.9.9"))
	// malformed: the document does not parse; every address mapped through A.
	b.createLiqo(t, liqoShadow("malformed", "cluster-b", `{"clusterAddresses":{"cluster-c":["10.71.3.7"]`,
		"10.244.1.5", "10.71.3.7"))
	b.createLiqo(t, liqoShadow("taken", "cluster-b", "", "10.244.1.5"))
	// liqos: a shadow whose EndpointSlice Liqo's own ShadowEndpointSlice controller has already written.
	b.createLiqo(t, liqoShadow("liqos", "cluster-b", "", "10.244.1.5"))
	liqos := b.liqoWrittenSlice(t, "liqos", "10.80.1.99")

	ctrl, err := provider.New(provider.Config{ClusterID: "cluster-b", Kube: b.kube, Dynamic: b.dyn})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := ctrl.Run(runCtx, 2); err != nil {
			t.Errorf("provider: %v", err)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })

	b.waitSliceNamed(t, "plain", "Liqo's mapping", "10.80.1.5", "10.74.3.7", "10.61.0.9", "192.0.2.10")
	b.waitSliceNamed(t, "overlap", "C's pod at B's view of C", "10.80.1.5", "10.72.3.7")
	b.waitSliceNamed(t, "bad", "the usable parts mapped, the rest through A", "10.80.1.5", "10.72.3.7", "10.80.9.9", "10.99.9.9")
	b.waitSliceNamed(t, "malformed", "every address through A", "10.80.1.5", "10.71.3.7")

	b.logResource(t, "ShadowEndpointSlice overlap, as Liqo's virtual kubelet writes it", offv1beta1.ShadowEndpointSliceResource, "overlap")
	b.logResource(t, "EndpointSlice overlap, made by our provider", discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), "overlap")
	plain, err := b.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "plain", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{"kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": "endpointslice.reflection.liqo.io",
		"offloading.liqo.io/origin": "cluster-a", "offloading.liqo.io/destination": "cluster-b", "liqo.io/managed-by": "shadowendpointslice"}
	if !reflect.DeepEqual(plain.Labels, wantLabels) || len(plain.Annotations) != 0 {
		t.Errorf("plain: labels %v, annotations %v; want labels %v and no annotation", plain.Labels, plain.Annotations, wantLabels)
	}
	for _, e := range plain.Endpoints {
		if e.NodeName == nil || *e.NodeName != "cluster-a" || e.TargetRef == nil || e.TargetRef.Kind != "RemotePod" ||
			e.Conditions.Ready == nil || !*e.Conditions.Ready {
			t.Errorf("plain: endpoint %+v, want nodeName cluster-a, a RemotePod, ready", e)
		}
	}
	if ref := metav1.GetControllerOf(plain); ref == nil || ref.Kind != "ShadowEndpointSlice" || ref.Name != "plain" {
		t.Errorf("plain: controller %+v", ref)
	}

	b.waitEvent(t, "EndpointSlice", "bad", directconn.ReasonInvalidData, `unknown field "future" ignored`)
	b.waitEvent(t, "EndpointSlice", "bad", directconn.ReasonInvalidData, `clusterAddresses["cluster-c"][1] "bogus" is not an IP address`)
	b.waitEvent(t, "EndpointSlice", "bad", directconn.ReasonDirectConnectionUnavailable,
		`no Configuration for cluster cluster-x (clusterAddresses["cluster-x"]): mapped through consumer cluster cluster-a instead (addresses 10.244.9.9)`)
	b.waitEvent(t, "EndpointSlice", "bad", directconn.ReasonRemapFailed,
		`real IP 10.250.9.9 (realIPs["10.99.9.9"]) is in no spec.remote.cidr.pod [10.203.0.0/16] of Configuration liqo-tenant-cluster-d/cluster-d`)
	b.waitEvent(t, "EndpointSlice", "malformed", directconn.ReasonInvalidData, "not a JSON object")

	// Another controller's slice is left alone, and the shadow says why.
	b.waitEvent(t, "ShadowEndpointSlice", "taken", provider.ReasonEndpointSliceConflict,
		`EndpointSlice demo/taken is managed by another controller (endpointslice.kubernetes.io/managed-by="endpointslice-controller.k8s.io"`)
	if got, err := b.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "taken", metav1.GetOptions{}); err != nil ||
		got.ResourceVersion == "" || !reflect.DeepEqual(got.Endpoints[0].Addresses, []string{"10.244.2.9"}) || metav1.GetControllerOf(got) != nil {
		t.Errorf("the other controller's slice changed: %+v, %v", got, err)
	}

	// A slice Liqo's controller wrote is Liqo's: left alone, and the shadow says why.
	b.waitEvent(t, "ShadowEndpointSlice", "liqos", provider.ReasonEndpointSliceConflict,
		`controller Liqo's ShadowEndpointSlice controller (field manager shadow-endpointslice-controller)`)
	if got, err := b.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "liqos", metav1.GetOptions{}); err != nil || got.ResourceVersion != liqos.ResourceVersion {
		t.Errorf("the slice Liqo's controller wrote was changed: %+v, %v", got, err)
	}

	// The ForeignCluster of A reports its network down: every endpoint becomes not ready, as with Liqo.
	fc, err := b.dyn.Resource(corev1beta1.ForeignClusterResource).Get(ctx, "cluster-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conds := fc.Object["status"].(map[string]interface{})["modules"].(map[string]interface{})["networking"].(map[string]interface{})["conditions"].([]interface{})
	conds[0].(map[string]interface{})["status"] = "Error"
	if _, err := b.dyn.Resource(corev1beta1.ForeignClusterResource).UpdateStatus(ctx, fc, metav1.UpdateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := b.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "plain", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, e := range s.Endpoints {
			if !reflect.DeepEqual(e.Conditions.Ready, ptr.To(false)) {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("endpoints still ready after the ForeignCluster's network went down: %v", err)
	}
}

// liqoWrittenSlice creates EndpointSlice demo/name as Liqo's ShadowEndpointSlice controller does (its field
// manager, controlled by the shadow of that name, liqo.io/managed-by=shadowendpointslice) with one address.
func (c *cluster) liqoWrittenSlice(t *testing.T, name, addr string) *discoveryv1.EndpointSlice {
	t.Helper()
	ctx := context.Background()
	sh, err := c.dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: "web", "liqo.io/managed-by": "shadowendpointslice",
				"offloading.liqo.io/origin": "cluster-a"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "offloading.liqo.io/v1beta1", Kind: "ShadowEndpointSlice",
				Name: name, UID: sh.GetUID(), Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{addr}}},
	}
	created, err := c.kube.DiscoveryV1().EndpointSlices("demo").Create(ctx, s, metav1.CreateOptions{FieldManager: provider.LiqoFieldManager})
	if err != nil {
		t.Fatal(err)
	}
	return created
}
