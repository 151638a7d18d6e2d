package integration

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	netv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/networking/v1beta1"
	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/consumer"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/provider"
)

// TestDirectConnections: consumer A and providers B and C all use 10.244.0.0/16, and every Configuration and
// Connection is written as Liqo writes it. A sees B as 10.70.0.0/16 and C as 10.71.0.0/16; B sees A as
// 10.80.0.0/16 and C as 10.72.0.0/16; C sees A as 10.90.0.0/16 and B as 10.73.0.0/16. Service demo/web (annotated
// liqo.io/use-direct-connections: "true") has endpoints on A (10.244.1.5), on B (10.244.2.4, seen in A as
// 10.70.2.4) and on C (10.244.3.7, seen in A as 10.71.3.7). Our consumer runs in A, our provider in B and C.
func TestDirectConnections(t *testing.T) {
	t0 := time.Now()
	var a, b, c *cluster
	var wg sync.WaitGroup
	for _, s := range []struct {
		p  **cluster
		id string
	}{{&a, "cluster-a"}, {&b, "cluster-b"}, {&c, "cluster-c"}} {
		wg.Add(1)
		go func() { defer wg.Done(); *s.p = startCluster(t, s.id) }()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("3 apiservers up in %v", time.Since(t0).Round(time.Millisecond))

	ctx := context.Background()
	for _, cl := range []*cluster{a, b, c} {
		cl.namespace(t, "demo")
	}
	a.createLiqo(t, liqoConfiguration("cluster-b", "10.244.0.0/16", "10.70.0.0/16", "10.60.0.0/16", "10.63.0.0/16"))
	a.createLiqo(t, liqoConfiguration("cluster-c", "10.244.0.0/16", "10.71.0.0/16", "10.60.0.0/16", "10.64.0.0/16"))
	b.createLiqo(t, liqoConfiguration("cluster-a", "10.244.0.0/16", "10.80.0.0/16", "10.60.0.0/16", "10.61.0.0/16"))
	b.createLiqo(t, liqoConfiguration("cluster-c", "10.244.0.0/16", "10.72.0.0/16", "10.60.0.0/16", "10.65.0.0/16"))
	b.createLiqo(t, liqoConnection("cluster-c", "Connected"))
	c.createLiqo(t, liqoConfiguration("cluster-a", "10.244.0.0/16", "10.90.0.0/16", "10.60.0.0/16", "10.62.0.0/16"))
	c.createLiqo(t, liqoConfiguration("cluster-b", "10.244.0.0/16", "10.73.0.0/16", "10.60.0.0/16", "10.66.0.0/16"))
	c.createLiqo(t, liqoConnection("cluster-b", "Connected"))
	a.node(t, "a-node1", nil)
	a.node(t, "vn-b", virtualNode("cluster-b"))
	a.node(t, "vn-c", virtualNode("cluster-c"))
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web",
			Annotations: map[string]string{directconn.UseDirectConnectionsAnnotation: "true"}},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}
	if _, err := a.kube.CoreV1().Services("demo").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{
			discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "test"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{endpoint("a-node1", "10.244.1.5"), endpoint("vn-b", "10.70.2.4"), endpoint("vn-c", "10.71.3.7")},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
	}
	if _, err := a.kube.DiscoveryV1().EndpointSlices("demo").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	runControllers(t, a, b, c)

	// Each provider's own pod is not in its shadow (its EndpointSlice controller serves it); A's pod is mapped
	// through the provider's Configuration for A, the other provider's pod directly.
	step := time.Now()
	b.waitSlice(t, "direct address for C's pod", "10.80.1.5", "10.72.3.7")
	c.waitSlice(t, "direct address for B's pod", "10.90.1.5", "10.73.2.4")
	t.Logf("initial convergence in %v", time.Since(step).Round(time.Millisecond))
	if s := b.getSlice(t); s.Annotations[directconn.DataAnnotation] != "" || metav1.GetControllerOf(s) == nil ||
		metav1.GetControllerOf(s).Kind != "ShadowEndpointSlice" || s.Labels[directconn.ShadowManagedByLabel] != directconn.ShadowManagedBy {
		t.Errorf("B's EndpointSlice: labels %v, annotations %v, owner %+v", s.Labels, s.Annotations, s.OwnerReferences)
	}
	b.logResource(t, "ShadowEndpointSlice web-1, as our consumer in cluster-a writes it", offv1beta1.ShadowEndpointSliceResource, "web-1")
	b.logResource(t, "EndpointSlice web-1, made by our provider", discoveryv1.SchemeGroupVersion.WithResource("endpointslices"), "web-1")
	checkShadowReadByLiqo(t, b, map[string][]string{"cluster-c": {"10.71.3.7"}})
	checkShadowReadByLiqo(t, c, map[string][]string{"cluster-b": {"10.70.2.4"}})

	step = time.Now()
	b.setConnection(t, "cluster-c", netv1beta1.ConnectionError)
	b.waitSlice(t, "through A while the connection is in Error", "10.80.1.5", "10.71.3.7")
	t.Logf("fallback to indirect %v after the Connection went to Error", time.Since(step).Round(time.Millisecond))
	b.waitEvent(t, "EndpointSlice", "web-1", directconn.ReasonDirectConnectionUnavailable, `connection to cluster cluster-c is down (status "Error")`)

	step = time.Now()
	b.setConnection(t, "cluster-c", netv1beta1.Connected)
	b.waitSlice(t, "direct address again", "10.80.1.5", "10.72.3.7")
	t.Logf("back to direct %v after the Connection went to Connected", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	cur, err := a.kube.CoreV1().Services("demo").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(cur.Annotations, directconn.UseDirectConnectionsAnnotation)
	if _, err := a.kube.CoreV1().Services("demo").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitSlice(t, "no direct address once the Service annotation is removed", "10.80.1.5", "10.71.3.7")
	c.waitSlice(t, "no direct address once the Service annotation is removed", "10.90.1.5", "10.70.2.4")
	t.Logf("remapping removed %v after the Service annotation was", time.Since(step).Round(time.Millisecond))
	sh, err := b.dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Get(ctx, "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, has := sh.GetAnnotations()[directconn.DataAnnotation]; has {
		t.Errorf("B's ShadowEndpointSlice still carries %s", directconn.DataAnnotation)
	}

	// The consumer's slice goes: the shadows and the providers' slices follow.
	if err := a.kube.DiscoveryV1().EndpointSlices("demo").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	b.waitSlice(t, "gone with the consumer's slice")
	c.waitSlice(t, "gone with the consumer's slice")
}

// liqoShadowView is the part of a ShadowEndpointSlice that Liqo's provider reads, in Liqo's shape.
type liqoShadowView struct {
	Metadata struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Template struct {
			AddressType string `json:"addressType"`
			Endpoints   []struct {
				Addresses  []string `json:"addresses"`
				NodeName   string   `json:"nodeName"`
				Conditions struct {
					Ready *bool `json:"ready"`
				} `json:"conditions"`
			} `json:"endpoints"`
		} `json:"template"`
	} `json:"spec"`
}

// checkShadowReadByLiqo reads demo/web-1, as stored in cluster p, the way Liqo's provider does: the origin label,
// and the data annotation decoded with a struct of Liqo's shape ({"clusterAddresses": {...}}); the listed
// addresses must be want, each present as such in the shadow's endpoints.
func checkShadowReadByLiqo(t *testing.T, p *cluster, want map[string][]string) {
	t.Helper()
	u, err := p.dyn.Resource(offv1beta1.ShadowEndpointSliceResource).Namespace("demo").Get(context.Background(), "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var sh liqoShadowView
	if err := json.Unmarshal(raw, &sh); err != nil {
		t.Fatal(err)
	}
	l := sh.Metadata.Labels
	if l["offloading.liqo.io/origin"] != "cluster-a" || l["offloading.liqo.io/destination"] != p.id ||
		l["endpointslice.kubernetes.io/managed-by"] != "endpointslice.reflection.liqo.io" {
		t.Errorf("%s: shadow labels %v are not Liqo's", p.id, l)
	}
	var data struct {
		ClusterAddresses map[string][]string `json:"clusterAddresses"`
	}
	if err := json.Unmarshal([]byte(sh.Metadata.Annotations["liqo.io/direct-connections-data"]), &data); err != nil {
		t.Fatalf("%s: Liqo's shape cannot decode the data %q: %v", p.id, sh.Metadata.Annotations["liqo.io/direct-connections-data"], err)
	}
	if !reflect.DeepEqual(data.ClusterAddresses, want) {
		t.Errorf("%s: clusterAddresses %v, want %v", p.id, data.ClusterAddresses, want)
	}
	inShadow := map[string]bool{}
	for _, e := range sh.Spec.Template.Endpoints {
		if e.NodeName != "cluster-a" {
			t.Errorf("%s: endpoint %v has nodeName %q, want the consumer's cluster ID", p.id, e.Addresses, e.NodeName)
		}
		for _, a := range e.Addresses {
			inShadow[a] = true
		}
	}
	for c, addrs := range data.ClusterAddresses {
		for _, a := range addrs {
			if !inShadow[a] {
				t.Errorf("%s: address %s listed for %s is not in the shadow's endpoints", p.id, a, c)
			}
		}
	}
}

// runControllers runs the consumer in A (reflecting to B and C) and the provider controllers in B and C until the
// test ends.
func runControllers(t *testing.T, a, b, c *cluster) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	run := func(name string, f func(context.Context, int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(ctx, 2); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}()
	}
	cons, err := consumer.New(consumer.Config{ClusterID: a.id, Kube: a.kube, Dynamic: a.dyn,
		Providers: []consumer.Provider{{ClusterID: b.id, Dynamic: b.dyn}, {ClusterID: c.id, Dynamic: c.dyn}}})
	if err != nil {
		t.Fatal(err)
	}
	run("consumer", cons.Run)
	for _, p := range []*cluster{b, c} {
		ctrl, err := provider.New(provider.Config{ClusterID: p.id, Kube: p.kube, Dynamic: p.dyn})
		if err != nil {
			t.Fatal(err)
		}
		run("provider "+p.id, ctrl.Run)
	}
}

func (c *cluster) getSlice(t *testing.T) *discoveryv1.EndpointSlice {
	t.Helper()
	s, err := c.kube.DiscoveryV1().EndpointSlices("demo").Get(context.Background(), "web-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("%s: EndpointSlice demo/web-1: %v", c.id, err)
	}
	return s
}

// waitSlice waits until EndpointSlice demo/web-1 has exactly addrs (none: until it is gone).
func (c *cluster) waitSlice(t *testing.T, what string, addrs ...string) {
	t.Helper()
	c.waitSliceNamed(t, "web-1", what, addrs...)
}

// waitSliceNamed waits until EndpointSlice demo/name has exactly addrs (none: until it is gone).
func (c *cluster) waitSliceNamed(t *testing.T, name, what string, addrs ...string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			s, err := c.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				got = nil
				return len(addrs) == 0, nil
			}
			if err != nil {
				return false, err
			}
			got = nil
			for _, e := range s.Endpoints {
				got = append(got, e.Addresses...)
			}
			return len(addrs) > 0 && reflect.DeepEqual(got, addrs), nil
		})
	if err != nil {
		t.Fatalf("%s: EndpointSlice demo/%s: want %s %v, have %v: %v", c.id, name, what, addrs, got, err)
	}
}

// waitEvent waits for a Warning Event on object kind demo/name with reason and a message containing msg.
func (c *cluster) waitEvent(t *testing.T, kind, name, reason, msg string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			evs, err := c.kube.CoreV1().Events("demo").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
				"involvedObject.kind": kind, "involvedObject.name": name}.String()})
			if err != nil {
				return false, err
			}
			seen = seen[:0]
			for _, e := range evs.Items {
				seen = append(seen, e.Type+" "+e.Reason+": "+e.Message)
				if e.Type == corev1.EventTypeWarning && e.Reason == reason && strings.Contains(e.Message, msg) {
					return true, nil
				}
			}
			return false, nil
		})
	if err != nil {
		t.Fatalf("%s: no Warning %s Event containing %q on %s demo/%s; seen %q", c.id, reason, msg, kind, name, seen)
	}
}
