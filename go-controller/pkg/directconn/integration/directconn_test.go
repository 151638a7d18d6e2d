package integration

import (
	"context"
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

// TestDirectConnections: consumer A and providers B and C all use 10.244.0.0/16. A sees B as 10.70.0.0/16 and C
// as 10.71.0.0/16; B sees C as 10.72.0.0/16; C sees B as 10.73.0.0/16. Service demo/web (annotated
// liqo.io/use-direct-connections: "true") has endpoints on A (10.244.1.5), on B (10.244.2.4, seen in A as
// 10.70.2.4) and on C (10.244.3.7, seen in A as 10.71.3.7).
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
	a.configuration(t, "cluster-b", "10.244.0.0/16", "10.70.0.0/16")
	a.configuration(t, "cluster-c", "10.244.0.0/16", "10.71.0.0/16")
	b.configuration(t, "cluster-c", "10.244.0.0/16", "10.72.0.0/16")
	b.connection(t, "cluster-c", netv1beta1.Connected)
	c.configuration(t, "cluster-b", "10.244.0.0/16", "10.73.0.0/16")
	c.connection(t, "cluster-b", netv1beta1.Connected)
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

	step := time.Now()
	b.waitSlice(t, "direct address for C's pod", "10.244.1.5", "10.244.2.4", "10.72.3.7")
	c.waitSlice(t, "direct address for B's pod", "10.244.1.5", "10.73.2.4", "10.244.3.7")
	t.Logf("initial convergence in %v", time.Since(step).Round(time.Millisecond))
	if s := b.getSlice(t); s.Annotations[directconn.DataAnnotation] != "" || metav1.GetControllerOf(s) == nil ||
		metav1.GetControllerOf(s).Kind != "ShadowEndpointSlice" {
		t.Errorf("B's EndpointSlice: annotations %v, owner %+v", s.Annotations, s.OwnerReferences)
	}

	step = time.Now()
	b.setConnection(t, "cluster-c", netv1beta1.ConnectionError)
	b.waitSlice(t, "indirect address while the connection is in Error", "10.244.1.5", "10.244.2.4", "10.71.3.7")
	t.Logf("fallback to indirect %v after the Connection went to Error", time.Since(step).Round(time.Millisecond))
	b.waitEvent(t, directconn.ReasonDirectConnectionUnavailable, `connection to cluster cluster-c is down (status "Error")`)

	step = time.Now()
	b.setConnection(t, "cluster-c", netv1beta1.Connected)
	b.waitSlice(t, "direct address again", "10.244.1.5", "10.244.2.4", "10.72.3.7")
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
	b.waitSlice(t, "no remapping once the Service annotation is removed", "10.244.1.5", "10.244.2.4", "10.71.3.7")
	c.waitSlice(t, "no remapping once the Service annotation is removed", "10.244.1.5", "10.70.2.4", "10.244.3.7")
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
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			s, err := c.kube.DiscoveryV1().EndpointSlices("demo").Get(ctx, "web-1", metav1.GetOptions{})
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
		t.Fatalf("%s: EndpointSlice demo/web-1: want %s %v, have %v: %v", c.id, what, addrs, got, err)
	}
}

// waitEvent waits for a Warning Event on EndpointSlice demo/web-1 with reason and a message containing msg.
func (c *cluster) waitEvent(t *testing.T, reason, msg string) {
	t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true,
		func(ctx context.Context) (bool, error) {
			evs, err := c.kube.CoreV1().Events("demo").List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
				"involvedObject.kind": "EndpointSlice", "involvedObject.name": "web-1"}.String()})
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
		t.Fatalf("%s: no Warning %s Event containing %q on EndpointSlice demo/web-1; seen %q", c.id, reason, msg, seen)
	}
}
