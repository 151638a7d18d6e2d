package provider

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	offv1beta1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/liqo/offloading/v1beta1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/directconn/kube"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

// TestProviderLeavesDefaultedSliceAlone runs the provider against a real kube-apiserver with ShadowEndpointSlices
// whose templates lack what the apiserver fills in or drops on EndpointSlices (port name and protocol, an
// endpoint's deprecatedTopology). Once each EndpointSlice exists, further syncs must send no write at all. (Before
// the fix, each resync sent a PUT per slice: a no-op for the apiserver when only port defaults differed, a stored
// write with a new generation when deprecatedTopology did, whose watch event made the running controller sync and
// write again, endlessly.)
func TestProviderLeavesDefaultedSliceAlone(t *testing.T) {
	e := newAPIEnv(t)
	ctx, kc, dyn, writes := e.ctx, e.kc, e.dyn, e.writes

	endpoints := []discoveryv1.Endpoint{
		{Addresses: []string{"10.244.2.4"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		{Addresses: []string{"10.244.2.5"}, DeprecatedTopology: map[string]string{corev1.LabelHostname: "b-node1"},
			Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}, ForNodes: []discoveryv1.ForNode{{Name: "b-node1"}}}},
	}
	// Each template's ports, and the ports the apiserver stores for them.
	tcp, udp := ptr.To(corev1.ProtocolTCP), ptr.To(corev1.ProtocolUDP)
	shadows := map[string]struct{ ports, stored []discoveryv1.EndpointPort }{
		"no-protocol": {[]discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](80)}},
			[]discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: tcp, Port: ptr.To[int32](80)}}},
		"no-name": {[]discoveryv1.EndpointPort{{Protocol: udp, Port: ptr.To[int32](53)}},
			[]discoveryv1.EndpointPort{{Name: ptr.To(""), Protocol: udp, Port: ptr.To[int32](53)}}},
		"neither": {[]discoveryv1.EndpointPort{{Port: ptr.To[int32](8080)}},
			[]discoveryv1.EndpointPort{{Name: ptr.To(""), Protocol: tcp, Port: ptr.To[int32](8080)}}},
		"no-port-number": {[]discoveryv1.EndpointPort{{Name: ptr.To("any")}},
			[]discoveryv1.EndpointPort{{Name: ptr.To("any"), Protocol: tcp}}},
	}
	for name, tt := range shadows {
		sh := &offv1beta1.ShadowEndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: name,
				Labels: map[string]string{discoveryv1.LabelServiceName: "web", directconn.OriginClusterIDLabel: "cluster-a"}},
			Spec: offv1beta1.ShadowEndpointSliceSpec{Template: offv1beta1.EndpointSliceTemplate{
				AddressType: discoveryv1.AddressTypeIPv4, Endpoints: endpoints, Ports: tt.ports}},
		}
		if err := (kube.Shadows{Client: dyn}).Create(ctx, sh); err != nil {
			t.Fatalf("create ShadowEndpointSlice %s: %v", name, err)
		}
	}

	c := e.start(t, record.NewFakeRecorder(1000))
	for name := range shadows {
		if err := c.sync(ctx, cacheName("demo", name)); err != nil {
			t.Fatalf("first sync of %s: %v", name, err)
		}
	}
	created := map[string]*discoveryv1.EndpointSlice{}
	for name := range shadows {
		s, err := kc.DiscoveryV1().EndpointSlices("demo").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("EndpointSlice %s after the first sync: %v", name, err)
		}
		created[name] = s
	}
	// Wait until the provider's cache holds what was created, so that the next syncs compare against it.
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for name, s := range created {
			cached, err := c.slices.EndpointSlices("demo").Get(name)
			if err != nil || cached.ResourceVersion != s.ResourceVersion {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the provider's cache never caught up with the created EndpointSlices: %v", err)
	}
	if n := len(writes.Of("endpointslices")); n != len(shadows) {
		t.Errorf("first syncs sent %d EndpointSlice writes, want %d (one create each): %q",
			n, len(shadows), writes.Of("endpointslices"))
	}

	apiserver.ResyncsWriteNothing(t, writes, "endpointslices", 5, slices.Collect(maps.Keys(shadows)), func(name string) error {
		return c.sync(ctx, cacheName("demo", name))
	})
	for name, before := range created {
		after, err := kc.DiscoveryV1().EndpointSlices("demo").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion || after.Generation != before.Generation {
			t.Errorf("EndpointSlice %s: resourceVersion %s -> %s, generation %d -> %d", name,
				before.ResourceVersion, after.ResourceVersion, before.Generation, after.Generation)
		}
		if !reflect.DeepEqual(after.Ports, shadows[name].stored) {
			t.Errorf("EndpointSlice %s: ports %s, want %s", name, toJSON(after.Ports), toJSON(shadows[name].stored))
		}
		wantEndpoints := []discoveryv1.Endpoint{endpoints[0], *endpoints[1].DeepCopy()}
		wantEndpoints[1].DeprecatedTopology = nil
		if after.Labels[directconn.ShadowManagedByLabel] != directconn.ShadowManagedBy ||
			!equality.Semantic.DeepEqual(after.Endpoints, wantEndpoints) {
			t.Errorf("EndpointSlice %s: labels %v, endpoints %s, want endpoints %s", name, after.Labels,
				toJSON(after.Endpoints), toJSON(wantEndpoints))
		}
	}
}

func toJSON(v interface{}) string {
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

// TestProviderReportsRejectedTemplate: a ShadowEndpointSlice whose template the API server rejects as an
// EndpointSlice (no addressType) gets a Warning Event naming the field, and is not retried while it is unchanged
// (before: a create every rate-limited retry, forever, with only a log line).
func TestProviderReportsRejectedTemplate(t *testing.T) {
	e := newAPIEnv(t)
	ctx, kc, dyn := e.ctx, e.kc, e.dyn
	sh := &offv1beta1.ShadowEndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "bad", Labels: map[string]string{discoveryv1.LabelServiceName: "web",
			directconn.OriginClusterIDLabel: "cluster-a"}},
		Spec: offv1beta1.ShadowEndpointSliceSpec{Template: offv1beta1.EndpointSliceTemplate{
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.244.2.4"}}}}},
	}
	if err := (kube.Shadows{Client: dyn}).Create(ctx, sh); err != nil {
		t.Fatalf("create ShadowEndpointSlice: %v", err)
	}
	recorder := record.NewFakeRecorder(100)
	c := e.start(t, recorder)
	for i := 0; i < 3; i++ {
		if err := c.sync(ctx, cacheName("demo", "bad")); err != nil {
			t.Fatalf("sync %d returned %v; a rejected template is reported, not retried", i, err)
		}
	}
	select {
	case ev := <-recorder.Events:
		if !strings.Contains(ev, "Warning "+ReasonEndpointSliceRejected) || !strings.Contains(ev, "addressType") {
			t.Fatalf("event %q, want a Warning %s naming addressType", ev, ReasonEndpointSliceRejected)
		}
	default:
		t.Fatal("no Event for a rejected template")
	}
	if _, err := kc.DiscoveryV1().EndpointSlices("demo").Get(ctx, "bad", metav1.GetOptions{}); err == nil {
		t.Fatal("an EndpointSlice exists for an invalid template")
	}
}

// apiEnv is a real kube-apiserver with the namespace "demo", a typed client whose writes are recorded, and a
// dynamic client (ShadowEndpointSlices). ctx ends with the test (2 minutes at most).
type apiEnv struct {
	ctx    context.Context
	kc     kubernetes.Interface
	dyn    dynamic.Interface
	writes *apiserver.Writes
}

func newAPIEnv(t *testing.T) *apiEnv {
	t.Helper()
	env := apiserver.Start(t)
	e := &apiEnv{writes: &apiserver.Writes{}}
	var err error
	if e.kc, err = kubernetes.NewForConfig(e.writes.Wrap(env.Config)); err != nil {
		t.Fatal(err)
	}
	if e.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e.ctx = ctx
	if _, err := e.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// start builds the provider (cluster-b) on e with recorder and starts its informers (not its workers: tests call
// sync); they stop at cleanup, before the context ends (stopping them after it hangs).
func (e *apiEnv) start(t *testing.T, recorder record.EventRecorder) *Controller {
	t.Helper()
	c, err := New(Config{ClusterID: "cluster-b", Kube: e.kc, Dynamic: e.dyn, Recorder: recorder})
	if err != nil {
		t.Fatal(err)
	}
	informerCtx, stopInformers := context.WithCancel(e.ctx)
	t.Cleanup(func() { stopInformers(); c.factory.Shutdown() })
	if err := c.startInformers(informerCtx); err != nil {
		t.Fatal(err)
	}
	return c
}
