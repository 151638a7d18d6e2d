package node

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
)

// versionedTracker gives every object it stores a new resourceVersion, increasing, as an apiserver does; the fake's
// own tracker stores objects as written, without one. The node's read-your-writes rule orders versions.
type versionedTracker struct {
	k8stesting.ObjectTracker
	mu   sync.Mutex
	last int64
}

func (v *versionedTracker) version(obj runtime.Object) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	v.mu.Lock()
	v.last++
	m.SetResourceVersion(strconv.FormatInt(v.last, 10))
	v.mu.Unlock()
	return nil
}

func (v *versionedTracker) Add(obj runtime.Object) error {
	obj = obj.DeepCopyObject()
	if err := v.version(obj); err != nil {
		return err
	}
	return v.ObjectTracker.Add(obj)
}

func (v *versionedTracker) Create(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.CreateOptions) error {
	if err := v.version(obj); err != nil {
		return err
	}
	return v.ObjectTracker.Create(gvr, obj, ns, opts...)
}

func (v *versionedTracker) Update(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.UpdateOptions) error {
	if err := v.version(obj); err != nil {
		return err
	}
	return v.ObjectTracker.Update(gvr, obj, ns, opts...)
}

// Patch versions obj in place: the fake's patch reaction returns it.
func (v *versionedTracker) Patch(gvr schema.GroupVersionResource, obj runtime.Object, ns string, opts ...metav1.PatchOptions) error {
	if err := v.version(obj); err != nil {
		return err
	}
	return v.ObjectTracker.Patch(gvr, obj, ns, opts...)
}

// newKube is the Kubernetes fake whose objects carry resourceVersions (versionedTracker).
func newKube(t *testing.T, objs ...runtime.Object) *kubefake.Clientset {
	t.Helper()
	kube := kubefake.NewClientset()
	v := &versionedTracker{ObjectTracker: kube.Tracker()}
	kube.PrependReactor("*", "*", k8stesting.ObjectReaction(v))
	for _, o := range objs {
		if err := v.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return kube
}

// heldNodeWatch makes the Node informer lag: every Node watch event waits until release lets one through.
type heldNodeWatch struct {
	release chan struct{}
}

func holdNodeWatch(kube *kubefake.Clientset) *heldNodeWatch {
	h := &heldNodeWatch{release: make(chan struct{})}
	kube.PrependWatchReactor("nodes", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		inner, err := kube.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		return true, h.wrap(inner), nil
	})
	return h
}

// next lets one held event through.
func (h *heldNodeWatch) next(t *testing.T) {
	t.Helper()
	select {
	case h.release <- struct{}{}:
	case <-time.After(5 * time.Second):
		t.Fatal("no Node watch event to let through")
	}
}

func (h *heldNodeWatch) wrap(inner watch.Interface) watch.Interface {
	out := make(chan watch.Event)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(out)
		for ev := range inner.ResultChan() {
			select {
			case <-h.release:
			case <-done:
				return
			}
			select {
			case out <- ev:
			case <-done:
				return
			}
		}
	}()
	return &heldWatch{out: out, stop: func() { once.Do(func() { close(done); inner.Stop() }) }}
}

type heldWatch struct {
	out  chan watch.Event
	stop func()
}

func (w *heldWatch) Stop()                          { w.stop() }
func (w *heldWatch) ResultChan() <-chan watch.Event { return w.out }

// syncedController is the node controller with its informers running and no worker: the test calls sync itself.
func syncedController(t *testing.T, kube *kubefake.Clientset, host *fakeHost, eips ...runtime.Object) *controller {
	t.Helper()
	c, err := newController(Params{Kube: kube, EgressIP: eipfake.NewSimpleClientset(eips...), NodeName: "node1",
		GatewayMode: gwmode.Local, ResyncInterval: time.Minute, ReleaseLinger: -1, DaemonID: testDaemonID, host: host})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	for _, f := range []interface{ Start(<-chan struct{}) }{c.eipFactory, c.nodeFactory, c.kubeFactory} {
		f.Start(ctx.Done())
	}
	t.Cleanup(func() {
		cancel()
		c.queue.ShutDown()
		c.eipFactory.Shutdown()
		c.nodeFactory.Shutdown()
		c.kubeFactory.Shutdown()
		c.broadcaster.Shutdown()
	})
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		t.Fatal("informer caches did not sync")
	}
	return c
}

// nodePatches are the bodies of the Node patches sent so far.
func nodePatches(kube *kubefake.Clientset) []string {
	var out []string
	for _, a := range kube.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

func syncOnce(t *testing.T, c *controller) {
	t.Helper()
	if err := c.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// cachedAt waits until the Node informer's cache holds the version rv.
func cachedAt(t *testing.T, c *controller, rv string) {
	t.Helper()
	waitFor(t, "node1 cached at "+rv, func() (bool, string) {
		n, err := c.nodes.Get("node1")
		if err != nil {
			return false, err.Error()
		}
		return n.ResourceVersion == rv, n.ResourceVersion
	})
}

func nodeVersion(t *testing.T, kube *kubefake.Clientset) string {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.ResourceVersion
}

func wantPatches(t *testing.T, kube *kubefake.Clientset, when string, want int) {
	t.Helper()
	got := nodePatches(kube)
	if len(got) != want {
		t.Fatalf("%s: %d node patches, want %d: %q", when, len(got), want, got)
	}
}

// Two own patches before the Node informer delivers the first (the flake "5 node patches, want 4"): when it delivers
// the first, the daemon's Node is still the second patch's result, and nothing is patched again.
func TestTwoPatchesBeforeTheInformerDeliversTheFirst(t *testing.T) {
	kube := newKube(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, testPod("a", map[string]string{"app": "web"}, "10.244.1.3"))
	held := holdNodeWatch(kube)
	host := &fakeHost{snap: hostSnap()}
	c := syncedController(t, kube, host, testEIP("eip1", "172.18.0.50"))

	syncOnce(t, c) // facts, daemon id, egress-ips-ready
	first := nodeVersion(t, kube)
	snap := hostSnap()
	snap.Links[0].Addrs = append(snap.Links[0].Addrs, hostinfo.Addr{Prefix: mp("10.0.0.10/24")})
	host.setSnapshot(snap)
	syncOnce(t, c) // host-cidrs with the new address, from the first patch's result
	second := nodeVersion(t, kube)
	wantPatches(t, kube, "two changes", 2)

	held.next(t)
	cachedAt(t, c, first)
	syncOnce(t, c)
	syncOnce(t, c)
	wantPatches(t, kube, "the informer delivered the first patch only", 2)

	held.next(t)
	cachedAt(t, c, second)
	syncOnce(t, c)
	wantPatches(t, kube, "the informer caught up", 2)
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n.Annotations[annotations.HostCIDRs], `["10.0.0.10/24","172.18.0.10/16"]`; got != want {
		t.Fatalf("%s = %s, want %s", annotations.HostCIDRs, got, want)
	}
}

// Another writer's change lands before the daemon's patch and reaches the informer first (the master writing
// egress-ips-rerouted while the daemon publishes readiness): that cached version is older than the patch's result,
// so the daemon's Node stays the result, and nothing is patched again.
func TestOtherWriteBeforeOwnPatchIsOlder(t *testing.T) {
	kube := newKube(t, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, testPod("a", map[string]string{"app": "web"}, "10.244.1.3"))
	held := holdNodeWatch(kube)
	host := &fakeHost{snap: hostSnap()}
	c := syncedController(t, kube, host, testEIP("eip1", "172.18.0.50"))

	if _, err := kube.CoreV1().Nodes().Patch(context.Background(), "node1", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+annotations.EgressIPsRerouted+`":"[]"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	other := nodeVersion(t, kube)
	syncOnce(t, c) // facts, daemon id, egress-ips-ready, computed from the version before the other write
	own := nodeVersion(t, kube)
	wantPatches(t, kube, "the other write and ours", 2)

	held.next(t)
	cachedAt(t, c, other)
	syncOnce(t, c)
	wantPatches(t, kube, "the informer delivered the other write only", 2)

	held.next(t)
	cachedAt(t, c, own)
	syncOnce(t, c)
	wantPatches(t, kube, "the informer caught up", 2)
}

// The daemon's Node is the newer, by resourceVersion, of the cache and its last patch's result.
func TestOwnNodeIsTheNewerVersion(t *testing.T) {
	node := func(rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", ResourceVersion: rv}}
	}
	var w ownWrites
	if got := w.node(node("11")); got.ResourceVersion != "11" {
		t.Fatalf("no patch: read %q, want the cache", got.ResourceVersion)
	}
	w.wrote(node("12"), nil)
	w.wrote(node("13"), nil) // before the informer delivered 12
	for _, tc := range []struct{ cached, want string }{
		{"11", "13"}, // before both patches
		{"12", "13"}, // the first patch's result, or another writer's version before the second
		{"9", "13"},  // parsed as a number, not compared as text
		{"13", "13"}, // caught up
		{"14", "14"}, // past it
		{"11", "11"}, // once caught up, the result is forgotten (a re-created Node starts lower only in a test)
	} {
		if got := w.node(node(tc.cached)); got.ResourceVersion != tc.want {
			t.Errorf("cache at %s: read %q, want %q", tc.cached, got.ResourceVersion, tc.want)
		}
	}
	var u ownWrites
	u.wrote(node("12"), nil)
	if got := u.node(node("")); got.ResourceVersion != "" {
		t.Errorf("unversioned cache: read %q, want the cache (versions that cannot be ordered)", got.ResourceVersion)
	}
	u.wrote(node("12"), nil)
	u.wrote(node(""), nil)
	if got := u.node(node("11")); got.ResourceVersion != "11" || len(u.pending) != 0 {
		t.Errorf("after an unversioned result: read %q with %d patches remembered, want the cache and none",
			got.ResourceVersion, len(u.pending))
	}
}

// The Node informer's delivery of only the daemon's own patches is not an event: one patch, or several delivered in
// one update (a relist); another writer's version, or ours with another change, is. What is delivered is forgotten.
func TestOwnPatchesAreNoEvent(t *testing.T) {
	v := func(s string) *string { return &s }
	node := func(rv string, ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", ResourceVersion: rv, Annotations: ann}}
	}
	ready, linger := annotations.EgressIPsReady, annotations.EgressIPsLingering
	base := node("11", map[string]string{linger: `["172.18.0.60"]`, "other": "x"})
	first := node("12", map[string]string{ready: `[]`, "other": "x"})
	second := node("13", map[string]string{ready: `["172.18.0.50"]`, "other": "x"})
	patched := func() *ownWrites {
		w := &ownWrites{}
		w.wrote(first, map[string]*string{ready: v(`[]`), linger: nil})
		w.wrote(second, map[string]*string{ready: v(`["172.18.0.50"]`)})
		return w
	}
	for _, tc := range []struct {
		name   string
		steps  [][2]*corev1.Node // o, n delivered in turn
		own    []bool
		remain int
	}{
		{"each patch in turn", [][2]*corev1.Node{{base, first}, {first, second}}, []bool{true, true}, 0},
		{"both in one update", [][2]*corev1.Node{{base, second}}, []bool{true}, 0},
		{"the first only", [][2]*corev1.Node{{base, first}}, []bool{true}, 1},
		{"another version", [][2]*corev1.Node{{base, node("14", second.Annotations)}}, []bool{false}, 0},
		{"a patch and another change", [][2]*corev1.Node{{base, node("12", map[string]string{ready: `[]`, "other": "y"})}},
			[]bool{false}, 1},
		{"no resourceVersion", [][2]*corev1.Node{{base, node("", first.Annotations)}}, []bool{false}, 2},
		{"an add", [][2]*corev1.Node{{nil, second}}, []bool{false}, 0},
	} {
		w := patched()
		for i, st := range tc.steps {
			var o any
			if st[0] != nil {
				o = st[0]
			}
			if got := w.delivered(o, st[1]); got != tc.own[i] {
				t.Errorf("%s, delivery %d: own = %v, want %v", tc.name, i+1, got, tc.own[i])
			}
		}
		if len(w.pending) != tc.remain {
			t.Errorf("%s: %d patches remembered, want %d", tc.name, len(w.pending), tc.remain)
		}
	}
	// Another writer's version lands before the patch: it is an event, the patch's result after it is not.
	w := &ownWrites{}
	other := node("12", map[string]string{linger: `["172.18.0.60"]`, "other": "y"})
	w.wrote(node("13", map[string]string{ready: `[]`, "other": "y"}), map[string]*string{ready: v(`[]`), linger: nil})
	if w.delivered(base, other) {
		t.Error("another writer's version: own = true, want false")
	}
	if !w.delivered(other, node("13", map[string]string{ready: `[]`, "other": "y"})) {
		t.Error("the patch's result after another writer's version: own = false, want true")
	}
}
