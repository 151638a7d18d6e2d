package node

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostinfo"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

var mp = netip.MustParsePrefix

// fakeHost is a host with a fixed Snapshot that records every Apply. Apply
// reports every address of the state as ready except those in notReady.
type fakeHost struct {
	mu        sync.Mutex
	snap      hostinfo.Snapshot
	applied   []hostegress.State
	notify    func()
	notReady  map[netip.Addr]bool
	announced []string // AnnounceFor calls: "link ip mac"
	snaps     int      // Snapshot calls: one per sync
}

// syncs returns the number of syncs so far (each reads one Snapshot).
func (f *fakeHost) syncs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.snaps
}

func (f *fakeHost) AnnounceFor(ifName string, ip netip.Addr, mac net.HardwareAddr) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.announced = append(f.announced, ifName+" "+ip.String()+" "+mac.String())
	return nil
}

func (f *fakeHost) announcements() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.announced...)
}

func (f *fakeHost) Snapshot() (hostinfo.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.snaps++
	return f.snap, nil
}

func (f *fakeHost) Apply(st hostegress.State) (map[netip.Addr]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied = append(f.applied, st)
	ready := map[netip.Addr]bool{}
	var err error
	for _, a := range st.Addresses {
		if f.notReady[a.IP] {
			err = fmt.Errorf("fake: %s not programmed", a.IP)
			continue
		}
		ready[a.IP] = true
	}
	return ready, err
}

func (f *fakeHost) setNotReady(ips ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notReady = map[netip.Addr]bool{}
	for _, ip := range ips {
		f.notReady[netip.MustParseAddr(ip)] = true
	}
}

func (f *fakeHost) Watch(ctx context.Context, notify func()) {
	f.mu.Lock()
	f.notify = notify
	f.mu.Unlock()
	<-ctx.Done()
}

func (f *fakeHost) last() (hostegress.State, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.applied) == 0 {
		return hostegress.State{}, 0
	}
	return f.applied[len(f.applied)-1], len(f.applied)
}

func (f *fakeHost) setSnapshot(s hostinfo.Snapshot) {
	f.mu.Lock()
	f.snap = s
	n := f.notify
	f.mu.Unlock()
	if n != nil {
		n()
	}
}

func hostSnap() hostinfo.Snapshot {
	return hostinfo.Snapshot{
		Links: []hostinfo.Link{{Index: 2, Name: "eth0", Up: true, Addrs: []hostinfo.Addr{
			{Prefix: mp("172.18.0.10/16")}, {Prefix: mp("172.18.0.50/32"), Ours: true}}}},
		Routes: []hostinfo.Route{{Dst: mp("0.0.0.0/0"), Gw: netip.MustParseAddr("172.18.0.100"), LinkIndex: 2}},
	}
}

func testPod(name string, labels map[string]string, ip string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: name, Labels: labels},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
}

func testEIP(name, ip string) *egressipv1.EgressIP {
	return &egressipv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: egressipv1.EgressIPSpec{EgressIPs: []string{ip},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}},
		Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{{Node: "node1", EgressIP: ip}}},
	}
}

type fixture struct {
	kube  *kubefake.Clientset
	eips  *eipfake.Clientset
	host  *fakeHost
	stop  func()
	errCh chan error
}

// getNode reads Node name from the fixture's API server; an error fails the test.
func (f *fixture) getNode(t *testing.T, name string) *corev1.Node {
	t.Helper()
	return mustGet(t, f.kube.CoreV1().Nodes().Get, name)
}

// getEIP reads EgressIP name from the fixture's API server; an error fails the test.
func (f *fixture) getEIP(t *testing.T, name string) *egressipv1.EgressIP {
	t.Helper()
	return mustGet(t, f.eips.K8sV1().EgressIPs().Get, name)
}

// mustGet calls a clientset's Get for name; an error fails the test.
func mustGet[T any](t *testing.T, get func(context.Context, string, metav1.GetOptions) (T, error), name string) T {
	t.Helper()
	obj, err := get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func start(t *testing.T, mode gwmode.Mode, kubeObjs []runtime.Object, eips ...runtime.Object) *fixture {
	t.Helper()
	return startWith(t, mode, nil, kubeObjs, eips...)
}

// startLinger is start with Params.ReleaseLinger set (start turns it off).
func startLinger(t *testing.T, mode gwmode.Mode, linger time.Duration, kubeObjs []runtime.Object, eips ...runtime.Object) *fixture {
	t.Helper()
	return startFull(t, mode, nil, linger, kubeObjs, eips...)
}

// startWith is start with a hook that may add reactors to the Kubernetes fake
// before the controller runs.
func startWith(t *testing.T, mode gwmode.Mode, setup func(*kubefake.Clientset), kubeObjs []runtime.Object, eips ...runtime.Object) *fixture {
	t.Helper()
	return startFull(t, mode, setup, -1, kubeObjs, eips...)
}

// testDaemonID is the fixture daemon's identity (Params.DaemonID).
const testDaemonID = "daemon-1"

func startFull(t *testing.T, mode gwmode.Mode, setup func(*kubefake.Clientset), linger time.Duration, kubeObjs []runtime.Object, eips ...runtime.Object) *fixture {
	t.Helper()
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}},
	}
	hasNode := false
	for _, o := range kubeObjs {
		if n, ok := o.(*corev1.Node); ok && n.Name == "node1" {
			hasNode = true
		}
	}
	if !hasNode { // kubeObjs may bring its own node1
		objs = append(objs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}})
	}
	f := &fixture{
		kube:  newKube(t, append(objs, kubeObjs...)...),
		eips:  eipfake.NewSimpleClientset(eips...),
		host:  &fakeHost{snap: hostSnap()},
		errCh: make(chan error, 1),
	}
	if setup != nil {
		setup(f.kube)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		f.errCh <- Run(ctx, Params{Kube: f.kube, EgressIP: f.eips, NodeName: "node1", GatewayMode: mode,
			ResyncInterval: 50 * time.Millisecond, ReleaseLinger: linger, DaemonID: testDaemonID, host: f.host})
	}()
	f.stop = func() {
		cancel()
		select {
		case err := <-f.errCh:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Run did not return")
		}
	}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			f.stop()
		}
	})
	return f
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	waitfor.True(t, 5*time.Second, 10*time.Millisecond, what, cond)
}

// syncsRan waits until n more syncs have run to their end: each sync reads one snapshot and the syncs run one at a
// time, so the (n+1)-th snapshot from now means n complete syncs.
func syncsRan(t *testing.T, f *fixture, n int) {
	t.Helper()
	before := f.host.syncs()
	waitFor(t, fmt.Sprintf("%d more syncs", n), func() (bool, string) {
		k := f.host.syncs() - before
		return k > n, fmt.Sprintf("%d syncs began", k)
	})
}

func snatPods(st hostegress.State) string {
	var s []string
	for _, r := range st.SNAT {
		s = append(s, r.PodIP.String()+">"+r.EgressIPAddr.String())
	}
	return strings.Join(s, ",")
}

func countActions(c *kubefake.Clientset, verb, resource string) int {
	n := 0
	for _, a := range c.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func TestLocalModeFollowsPodsNamespacesAndEgressIPs(t *testing.T) {
	web := map[string]string{"app": "web"}
	f := start(t, gwmode.Local, []runtime.Object{testPod("a", web, "10.244.1.3")}, testEIP("eip1", "172.18.0.50"))
	ctx := context.Background()
	f.waitHost(t, "first pod served", 1, "10.244.1.3>172.18.0.50")

	if _, err := f.kube.CoreV1().Pods("prod").Create(ctx, testPod("b", web, "10.244.2.3"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitHost(t, "new pod served", -1, "10.244.1.3>172.18.0.50,10.244.2.3>172.18.0.50")
	if err := f.kube.CoreV1().Pods("prod").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitHost(t, "deleted pod unserved", -1, "10.244.2.3>172.18.0.50")
	ns, err := f.kube.CoreV1().Namespaces().Get(ctx, "prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels = map[string]string{"env": "dev"}
	if _, err := f.kube.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "namespace relabelled out", func() (bool, string) {
		st, _ := f.host.last()
		return len(st.SNAT) == 0 && len(st.Addresses) == 1, snatPods(st)
	})
	if err := f.eips.K8sV1().EgressIPs().Delete(ctx, "eip1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "EgressIP deleted: empty host state", func() (bool, string) {
		st, _ := f.host.last()
		return st.Empty(), snatPods(st)
	})
}

func TestFactsPatchedOnlyOnChange(t *testing.T) {
	f := start(t, gwmode.Local, nil, testEIP("eip1", "172.18.0.50"))
	waitFor(t, "facts published", func() (bool, string) {
		n := f.getNode(t, "node1")
		return n.Annotations[annotations.PrimaryIfAddr] == `{"ipv4":"172.18.0.10/16"}` &&
			n.Annotations[annotations.HostCIDRs] == `["172.18.0.10/16"]`, n.Annotations[annotations.HostCIDRs]
	})
	// Several resyncs (50 ms) later, still one patch.
	_, before := f.host.last()
	waitFor(t, "a few resyncs", func() (bool, string) { _, n := f.host.last(); return n >= before+4, "" })
	if n := countActions(f.kube, "patch", "nodes"); n != 1 {
		t.Fatalf("%d node patches, want 1", n)
	}
	// An address change (netlink event) updates host-cidrs.
	s := hostSnap()
	s.Links[0].Addrs = append(s.Links[0].Addrs, hostinfo.Addr{Prefix: mp("172.18.0.11/16"), Secondary: true})
	f.host.setSnapshot(s)
	waitFor(t, "host-cidrs updated", func() (bool, string) {
		n := f.getNode(t, "node1")
		return n.Annotations[annotations.HostCIDRs] == `["172.18.0.10/16","172.18.0.11/16"]`, n.Annotations[annotations.HostCIDRs]
	})
	if n := countActions(f.kube, "patch", "nodes"); n != 2 {
		t.Fatalf("%d node patches, want 2", n)
	}
}

// eventsOn lists the Events about the object named name.
func eventsOn(t *testing.T, f *fixture, name string) []corev1.Event {
	t.Helper()
	evs, err := f.kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	return out
}

func TestProblemsBecomeOneEvent(t *testing.T) {
	f := start(t, gwmode.Local, nil, testEIP("bad", "10.99.0.1"))
	waitFor(t, "event on the EgressIP", func() (bool, string) { return len(eventsOn(t, f, "bad")) > 0, "none" })
	_, before := f.host.last()
	waitFor(t, "several more syncs", func() (bool, string) { _, n := f.host.last(); return n >= before+4, "" })
	syncsRan(t, f, 2) // the event sink delivers what the earlier syncs recorded while two more run
	evs := eventsOn(t, f, "bad")
	if len(evs) != 1 || evs[0].Count != 1 || evs[0].Reason != "EgressIPNotHostable" || !strings.Contains(evs[0].Message, "10.99.0.1") {
		t.Fatalf("want one EgressIPNotHostable event with count 1, got %+v", evs)
	}
}

// TestInvalidSelectorIsTheMastersEvent: a holder of an EgressIP whose podSelector does not compile holds its IP and
// SNATs no pod, but sends no InvalidSelector Event: the master sends that one. The node's Events of the same sync
// (EgressIPNotHostable on "bad", recorded after those of "a-sel") reach the API, so one of "a-sel" would have too.
func TestInvalidSelectorIsTheMastersEvent(t *testing.T) {
	sel := testEIP("a-sel", "172.18.0.50")
	sel.Spec.PodSelector = metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}
	f := start(t, gwmode.Local, []runtime.Object{testPod("a", nil, "10.244.1.3")}, sel, testEIP("bad", "10.99.0.1"))
	waitFor(t, "a-sel's address held, no pod SNATed", func() (bool, string) {
		st, _ := f.host.last()
		return len(st.Addresses) == 1 && st.Addresses[0].EgressIP == "a-sel" && len(st.SNAT) == 0, snatPods(st)
	})
	waitFor(t, "the Event on bad", func() (bool, string) { return len(eventsOn(t, f, "bad")) > 0, "none" })
	syncsRan(t, f, 2)
	if evs := eventsOn(t, f, "a-sel"); len(evs) != 0 {
		t.Fatalf("the node sent %d Events on a-sel, the first %s from %s: %s", len(evs), evs[0].Reason, evs[0].Source.Component, evs[0].Message)
	}
}

func TestSharedModeProgramsNothing(t *testing.T) {
	f := start(t, gwmode.Shared, []runtime.Object{testPod("a", nil, "10.244.1.3")}, testEIP("eip1", "172.18.0.50"))
	waitFor(t, "facts published", func() (bool, string) {
		n := f.getNode(t, "node1")
		_, ok := n.Annotations[annotations.PrimaryIfAddr]
		return ok, ""
	})
	syncsRan(t, f, 4) // several resyncs
	f.host.mu.Lock()
	applied := append([]hostegress.State(nil), f.host.applied...)
	f.host.mu.Unlock()
	if len(applied) != 1 || !applied[0].Empty() {
		t.Fatalf("shared mode applied %d states (%+v); want exactly one empty cleanup", len(applied), applied)
	}
	for _, a := range f.kube.Actions() {
		if r := a.GetResource().Resource; r == "pods" || r == "namespaces" {
			t.Fatalf("shared mode watches %s: %v", r, a)
		}
	}
}

// In shared gateway mode OVN announces the gateway router's IPv4 NAT addresses but
// not its IPv6 ones: the node announces each IPv6 egress IP it newly holds (once),
// naming the gateway router's MAC from k8s.ovn.org/l3-gateway-config, and again
// after the IP left and came back. IPv4 egress IPs and other nodes' IPs are not
// announced.
func TestSharedModeAnnouncesIPv6EgressIPsForTheGatewayRouter(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{
		annotations.L3GatewayConfig: `{"default":{"mode":"shared","mac-address":"0a:58:ac:12:00:15","ip-addresses":["172.18.0.21/16"]}}`}}}
	v6 := testEIP("eip6", "fc00::50")
	v6.Spec.EgressIPs = append(v6.Spec.EgressIPs, "fc00::51", "172.18.0.50")
	v6.Status.Items = append(v6.Status.Items, egressipv1.EgressIPStatusItem{Node: "node2", EgressIP: "fc00::51"},
		egressipv1.EgressIPStatusItem{Node: "node1", EgressIP: "172.18.0.50"})
	f := start(t, gwmode.Shared, []runtime.Object{node}, v6)
	want := []string{"eth0 fc00::50 0a:58:ac:12:00:15"}
	waitFor(t, "fc00::50 announced", func() (bool, string) {
		got := f.host.announcements()
		return slices.Equal(got, want), strings.Join(got, "; ")
	})
	// Resyncs (every 50 ms) do not announce it again.
	n := f.host.syncs()
	waitFor(t, "three more syncs", func() (bool, string) { return f.host.syncs() >= n+3, "" })
	if got := f.host.announcements(); !slices.Equal(got, want) {
		t.Fatalf("announcements after resyncs: %v, want only %v", got, want)
	}
	// It moves away, then back: announced again.
	ctx := context.Background()
	e := f.getEIP(t, "eip6")
	items := e.Status.Items
	e.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "node3", EgressIP: "fc00::50"}}
	if _, err := f.eips.K8sV1().EgressIPs().UpdateStatus(ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n = f.host.syncs()
	waitFor(t, "three more syncs", func() (bool, string) { return f.host.syncs() >= n+3, "" })
	e = f.getEIP(t, "eip6")
	e.Status.Items = items
	if _, err := f.eips.K8sV1().EgressIPs().UpdateStatus(ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fc00::50 announced again after coming back", func() (bool, string) {
		got := f.host.announcements()
		return len(got) == 2 && got[1] == want[0], strings.Join(got, "; ")
	})
}

// Without k8s.ovn.org/l3-gateway-config the gateway router is taken to share the
// gateway interface's MAC (OVN-Kubernetes' breth0); an unparsable one is an error
// (nothing announced), never a guess.
func TestSharedModeAnnouncementMAC(t *testing.T) {
	snap := hostSnap()
	snap.Links[0].MAC = net.HardwareAddr{0x02, 0, 0xac, 0x12, 0, 0x11}
	f := start(t, gwmode.Shared, nil, testEIP("eip6", "fc00::50"))
	f.host.setSnapshot(snap)
	waitFor(t, "announced with the gateway interface's MAC", func() (bool, string) {
		got := f.host.announcements()
		return len(got) > 0 && got[len(got)-1] == "eth0 fc00::50 02:00:ac:12:00:11", strings.Join(got, "; ")
	})

	bad := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{
		annotations.L3GatewayConfig: `{"default":{"mac-address":"not-a-mac"}}`}}}
	g := start(t, gwmode.Shared, []runtime.Object{bad}, testEIP("eip6", "fc00::50"))
	// Each sync tries to announce before it publishes the facts.
	waitFor(t, "facts published", func() (bool, string) {
		n := g.getNode(t, "node1")
		_, ok := n.Annotations[annotations.PrimaryIfAddr]
		return ok, ""
	})
	if got := g.host.announcements(); len(got) != 0 {
		t.Fatalf("announced %v with an unparsable l3-gateway-config", got)
	}
	waitFor(t, "a Warning Event naming the node and the annotation", func() (bool, string) {
		evs, err := g.kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "node1" && e.Reason == "GatewayConfigInvalid" &&
				strings.Contains(e.Message, annotations.L3GatewayConfig) && strings.Contains(e.Message, "fc00::50") {
				return true, ""
			}
			seen = append(seen, e.Reason+": "+e.Message)
		}
		return false, strings.Join(seen, "; ")
	})
}

func TestMissingGatewayIsReportedAndHostStillProgrammed(t *testing.T) {
	f := start(t, gwmode.Local, []runtime.Object{testPod("a", nil, "10.244.1.3")}, testEIP("eip1", "172.18.0.50"))
	s := hostSnap()
	s.Routes = nil
	f.host.setSnapshot(s)
	waitFor(t, "event on the Node", func() (bool, string) {
		evs, err := f.kube.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Node" && e.Reason == "EgressFactsUnknown" {
				return true, ""
			}
		}
		return false, "no EgressFactsUnknown event"
	})
	st, _ := f.host.last()
	if len(st.SNAT) != 1 {
		t.Fatalf("host not programmed while facts fail: %+v", st)
	}
}

func TestParamsValidation(t *testing.T) {
	kube, eips := kubefake.NewClientset(), eipfake.NewSimpleClientset()
	for _, p := range []Params{
		{EgressIP: eips, NodeName: "n", GatewayMode: gwmode.Local},
		{Kube: kube, EgressIP: eips, GatewayMode: gwmode.Local},
		{Kube: kube, EgressIP: eips, NodeName: "n", GatewayMode: "gateway"},
		{Kube: kube, EgressIP: eips, NodeName: "n", GatewayMode: gwmode.Shared, ResyncInterval: -time.Second},
	} {
		if err := Run(context.Background(), p); err == nil {
			t.Errorf("Run(%+v) accepted", p)
		}
	}
}
