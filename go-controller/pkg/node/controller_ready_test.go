package node

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

func readyValue(t *testing.T, f *fixture) (string, bool) {
	t.Helper()
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v, ok := n.Annotations[annotations.EgressIPsReady]
	return v, ok
}

func waitReady(t *testing.T, f *fixture, want string) {
	t.Helper()
	waitFor(t, "egress-ips-ready = "+want, func() (bool, string) {
		v, ok := readyValue(t, f)
		return ok && v == want, v
	})
}

// fewSyncs waits until the controller has applied the host state n more times.
func fewSyncs(t *testing.T, f *fixture, n int) {
	t.Helper()
	_, before := f.host.last()
	waitFor(t, "more syncs", func() (bool, string) { _, k := f.host.last(); return k >= before+n, "" })
}

func TestReadyAnnotationFollowsProgrammedEgressIPs(t *testing.T) {
	web := map[string]string{"app": "web"}
	f := start(t, gwmode.Local, []runtime.Object{testPod("a", web, "10.244.1.3")}, testEIP("eip1", "172.18.0.50"))
	ctx := context.Background()

	// Held and programmed: listed, in the same patch as the egress facts.
	waitReady(t, f, `["172.18.0.50"]`)
	n := f.getNode(t, "node1")
	if _, ok := n.Annotations[annotations.PrimaryIfAddr]; !ok {
		t.Fatalf("facts not published with readiness: %v", n.Annotations)
	}
	if got := n.Annotations[annotations.EgressDaemonID]; got != testDaemonID {
		t.Fatalf("%s = %q with the first ready list, want the daemon's identity %q", annotations.EgressDaemonID, got, testDaemonID)
	}
	fewSyncs(t, f, 4)
	if k := countActions(f.kube, "patch", "nodes"); k != 1 {
		t.Fatalf("%d node patches, want 1 (facts and readiness together, then nothing)", k)
	}

	// A second egress IP whose programming fails: held but not listed.
	f.host.setNotReady("172.18.0.60")
	if _, err := f.eips.K8sV1().EgressIPs().Create(ctx, testEIP("eip2", "172.18.0.60"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "eip2 applied", func() (bool, string) {
		st, _ := f.host.last()
		return len(st.Addresses) == 2, snatPods(st)
	})
	fewSyncs(t, f, 3)
	if v, _ := readyValue(t, f); v != `["172.18.0.50"]` {
		t.Fatalf("egress-ips-ready = %s while 172.18.0.60 is not programmed", v)
	}
	// Programming succeeds: listed (sorted).
	f.host.setNotReady()
	waitReady(t, f, `["172.18.0.50","172.18.0.60"]`)

	// The IP moves to another node: removed at once.
	eip := f.getEIP(t, "eip1")
	eip.Status.Items[0].Node = "node2"
	if _, err := f.eips.K8sV1().EgressIPs().Update(ctx, eip, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, f, `["172.18.0.60"]`)
	// The last one goes: an empty list, not a missing annotation.
	if err := f.eips.K8sV1().EgressIPs().Delete(ctx, "eip2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, f, `[]`)
	fewSyncs(t, f, 4)
	if k := countActions(f.kube, "patch", "nodes"); k != 4 {
		t.Fatalf("%d node patches, want 4 (one per change of value)", k)
	}
}

func TestReadyAnnotationKeepsEquivalentValue(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{
		annotations.PrimaryIfAddr:  `{"ipv4":"172.18.0.10/16"}`,
		annotations.HostCIDRs:      `["172.18.0.10/16"]`,
		annotations.EgressIPsReady: `[ "::ffff:172.18.0.50" ]`, // same set, other spelling
		annotations.EgressDaemonID: testDaemonID,
	}}}
	f := start(t, gwmode.Local, []runtime.Object{node}, testEIP("eip1", "172.18.0.50"))
	waitFor(t, "host programmed", func() (bool, string) { st, _ := f.host.last(); return len(st.Addresses) == 1, "" })
	fewSyncs(t, f, 4)
	if k := countActions(f.kube, "patch", "nodes"); k != 0 {
		t.Fatalf("%d node patches for an unchanged value, want 0", k)
	}
}

func TestSharedModeRemovesReadyAnnotation(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{
		annotations.EgressIPsReady: `["172.18.0.50"]`, // left by an earlier run in local mode
	}}}
	f := start(t, gwmode.Shared, []runtime.Object{node, testPod("a", nil, "10.244.1.3")}, testEIP("eip1", "172.18.0.50"))
	waitFor(t, "readiness removed, facts published", func() (bool, string) {
		n := f.getNode(t, "node1")
		_, ready := n.Annotations[annotations.EgressIPsReady]
		_, facts := n.Annotations[annotations.PrimaryIfAddr]
		return !ready && facts, ""
	})
	syncsRan(t, f, 4) // several resyncs
	if v, ok := readyValue(t, f); ok {
		t.Fatalf("shared mode wrote egress-ips-ready = %s", v)
	}
	if k := countActions(f.kube, "patch", "nodes"); k != 1 {
		t.Fatalf("%d node patches, want 1", k)
	}
}

// The node informer can lag behind the controller's own patch (seen in CI: the
// same egress-ips-ready value patched twice). A Node watch that never delivers
// makes the lag permanent: the controller must still patch a value only once.
func TestNoRepeatedPatchWhileNodeCacheLags(t *testing.T) {
	stalled := watch.NewFake()
	t.Cleanup(stalled.Stop)
	lagging := func(kube *kubefake.Clientset) {
		kube.PrependWatchReactor("nodes", func(k8stesting.Action) (bool, watch.Interface, error) {
			return true, stalled, nil
		})
	}
	f := startWith(t, gwmode.Local, lagging, []runtime.Object{testPod("a", map[string]string{"app": "web"}, "10.244.1.3")},
		testEIP("eip1", "172.18.0.50"))
	waitReady(t, f, `["172.18.0.50"]`)
	fewSyncs(t, f, 5)
	if k := countActions(f.kube, "patch", "nodes"); k != 1 {
		t.Fatalf("%d node patches while the cache lags, want 1", k)
	}
	// A real change after that is still published, against the patched value.
	if err := f.eips.K8sV1().EgressIPs().Delete(context.Background(), "eip1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(t, f, `[]`)
	fewSyncs(t, f, 5)
	if k := countActions(f.kube, "patch", "nodes"); k != 2 {
		t.Fatalf("%d node patches while the cache lags, want 2", k)
	}
}

// When an egress IP moves to another node, its address goes at once but its SNAT
// rules stay for Params.ReleaseLinger: OVN keeps rerouting the served pods here
// until the master has seen the new holder ready, and that traffic must leave
// with the egress IP, not the node's address (seen in e2e: 6 requests with the
// node's address on a planned move in local gateway mode). Then they go.
func TestMovedEgressIPLingersThenGoes(t *testing.T) {
	const linger = 600 * time.Millisecond
	f := startLinger(t, gwmode.Local, linger, []runtime.Object{testPod("a", map[string]string{"app": "web"}, "10.244.1.3")},
		testEIP("eip1", "172.18.0.50"))
	f.waitHost(t, "eip1 programmed", 1, "10.244.1.3>172.18.0.50")
	ctx := context.Background()
	eip := f.getEIP(t, "eip1")
	eip.Status.Items[0].Node = "node2"
	if _, err := f.eips.K8sV1().EgressIPs().Update(ctx, eip, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	moved := time.Now()
	waitFor(t, "address removed", func() (bool, string) {
		st, _ := f.host.last()
		return len(st.Addresses) == 0, snatPods(st)
	})
	if st, _ := f.host.last(); snatPods(st) != "10.244.1.3>172.18.0.50" && time.Since(moved) < linger {
		t.Fatalf("SNAT rules gone with the address (%q); they must stay for %v", snatPods(st), linger)
	}
	f.waitHost(t, "SNAT rules gone after the linger", -1, "")
	if d := time.Since(moved); d < linger {
		t.Fatalf("SNAT rules went after %v, before the %v linger", d, linger)
	}
	// The IP comes back during a later move: held normally again, nothing lingers twice.
	eip = f.getEIP(t, "eip1")
	eip.Status.Items[0].Node = "node1"
	if _, err := f.eips.K8sV1().EgressIPs().Update(ctx, eip, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitHost(t, "eip1 programmed again", 1, "10.244.1.3>172.18.0.50")
}
