package node

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
)

// A released egress IP is published as lingering with the end of its linger; its SNAT rules stay past that end
// while the master's egress-ips-rerouted still names it (a reroute the master left, e.g. because it died), and go
// once the master says it no longer reroutes it here.
func TestReleasedRulesStayWhileMasterReroutesHere(t *testing.T) {
	const linger = 300 * time.Millisecond
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1",
		Annotations: map[string]string{annotations.EgressIPsRerouted: `["172.18.0.50"]`}}}
	f := startLinger(t, GatewayModeLocal, linger, []runtime.Object{node, testPod("a", map[string]string{"app": "web"}, "10.244.1.3")},
		testEIP("eip1", "172.18.0.50"))
	waitFor(t, "eip1 programmed", func() (bool, string) {
		st, _ := f.host.last()
		return len(st.Addresses) == 1 && snatPods(st) == "10.244.1.3>172.18.0.50", snatPods(st)
	})
	ctx := context.Background()
	eip, _ := f.eips.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
	eip.Status.Items = nil
	if _, err := f.eips.K8sV1().EgressIPs().Update(ctx, eip, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	var until time.Time
	waitFor(t, "lingering published with its end", func() (bool, string) {
		n, _ := f.kube.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
		l, err := annotations.ParseLingering(n)
		until = l[netip.MustParseAddr("172.18.0.50")]
		return err == nil && !until.IsZero(), n.Annotations[annotations.EgressIPsLingeringUntil]
	})
	if d := until.Sub(released); d > linger+100*time.Millisecond || d < linger-100*time.Millisecond {
		t.Errorf("published end %v after the release, want about %v", d, linger)
	}
	waitFor(t, "lingering no longer listed after its end", func() (bool, string) {
		n, _ := f.kube.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
		_, has := n.Annotations[annotations.EgressIPsLingering]
		return !has && time.Now().After(until), n.Annotations[annotations.EgressIPsLingering]
	})
	fewSyncs(t, f, 3) // the node looked again after the end
	if st, _ := f.host.last(); snatPods(st) != "10.244.1.3>172.18.0.50" || len(st.Addresses) != 0 {
		t.Fatalf("past the linger, with the master still rerouting here: SNAT %q, addresses %v; want the rules kept, no address",
			snatPods(st), st.Addresses)
	}
	if _, err := f.kube.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+annotations.EgressIPsRerouted+`":"[]"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "SNAT rules gone once the master no longer reroutes here", func() (bool, string) {
		st, _ := f.host.last()
		return snatPods(st) == "", snatPods(st)
	})
}
