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

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
)

// A released egress IP is published as lingering with the end of its linger; its SNAT rules stay past that end
// while the master's egress-ips-rerouted still names it (a reroute the master left, e.g. because it died), and go
// once the master says it no longer reroutes it here.
func TestReleasedRulesStayWhileMasterReroutesHere(t *testing.T) {
	const linger = 300 * time.Millisecond
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1",
		Annotations: map[string]string{annotations.EgressIPsRerouted: `["172.18.0.50"]`}}}
	f := startLinger(t, gwmode.Local, linger, []runtime.Object{node, testPod("a", map[string]string{"app": "web"}, "10.244.1.3")},
		testEIP("eip1", "172.18.0.50"))
	f.waitHost(t, "eip1 programmed", 1, "10.244.1.3>172.18.0.50")
	ctx := context.Background()
	eip := f.getEIP(t, "eip1")
	eip.Status.Items = nil
	if _, err := f.eips.K8sV1().EgressIPs().Update(ctx, eip, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	var until time.Time
	waitFor(t, "lingering published with its end", func() (bool, string) {
		n := f.getNode(t, "node1")
		l, err := annotations.ParseLingering(n)
		until = l[netip.MustParseAddr("172.18.0.50")]
		return err == nil && !until.IsZero(), n.Annotations[annotations.EgressIPsLingeringUntil]
	})
	// The end is the linger from when the daemon saw the release: not before the release plus the linger, and late
	// only by how long the daemon took to see it (generous: a loaded machine).
	if d := until.Sub(released); d > linger+2*time.Second || d < linger-100*time.Millisecond {
		t.Errorf("published end %v after the release, want the linger %v (plus the time to see the release)", d, linger)
	}
	waitFor(t, "lingering no longer listed after its end", func() (bool, string) {
		n := f.getNode(t, "node1")
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
	f.waitHost(t, "SNAT rules gone once the master no longer reroutes here", -1, "")
}

// A node daemon restarted while its egress IP moved away: the previous run's published facts (the IP listed ready,
// another listed lingering with an end) are what masters reroute by, so the new run keeps both IPs' SNAT rules (no
// address) until the published end, or a linger from now for the one listed ready, and publishes that end.
func TestRestartedDaemonKeepsPublishedLinger(t *testing.T) {
	const linger = 400 * time.Millisecond
	prevEnd := time.Now().Add(time.Hour) // the previous run's published end for .60
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{
		annotations.EgressIPsReady:          `["172.18.0.50"]`,
		annotations.EgressIPsLingering:      `["172.18.0.60"]`,
		annotations.EgressIPsLingeringUntil: `{"172.18.0.60":"` + prevEnd.UTC().Format(time.RFC3339Nano) + `"}`,
		annotations.EgressIPsRerouted:       `[]`,
	}}}
	web := map[string]string{"app": "web"}
	moved := func(name, ip, app string) *egressipv1.EgressIP {
		e := testEIP(name, ip)
		e.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
		e.Status.Items[0].Node = "node2" // moved away while this node's daemon was down
		return e
	}
	started := time.Now()
	f := startLinger(t, gwmode.Local, linger,
		[]runtime.Object{node, testPod("a", web, "10.244.1.3"), testPod("b", map[string]string{"app": "db"}, "10.244.1.4")},
		moved("eip1", "172.18.0.50", "web"), moved("eip2", "172.18.0.60", "db"))
	var st hostegress.State
	waitFor(t, "both released IPs' rules kept", func() (bool, string) {
		st, _ = f.host.last()
		return snatPods(st) == "10.244.1.3>172.18.0.50,10.244.1.4>172.18.0.60", snatPods(st)
	})
	if len(st.Addresses) != 0 {
		t.Fatalf("addresses %v: a released IP's address must not be held", st.Addresses)
	}
	var l map[netip.Addr]time.Time
	waitFor(t, "both published as lingering", func() (bool, string) {
		n := f.getNode(t, "node1")
		var err error
		l, err = annotations.ParseLingering(n)
		return err == nil && len(l) == 2, n.Annotations[annotations.EgressIPsLingeringUntil]
	})
	if got := l[netip.MustParseAddr("172.18.0.60")]; !got.Equal(prevEnd) {
		t.Errorf(".60 lingers until %v, want the end the previous run published, %v", got, prevEnd)
	}
	if d := l[netip.MustParseAddr("172.18.0.50")].Sub(started); d < linger || d > linger+2*time.Second {
		t.Errorf(".50 (listed ready by the previous run) lingers %v after the start, want about %v", d, linger)
	}
	f.waitHost(t, ".50's rules gone after its linger, .60's kept", -1, "10.244.1.4>172.18.0.60")
}

// A released egress IP's SNAT rule for a pod object that is then deleted goes at once, not at the end of the linger:
// the deleted pod sends nothing more, and its IP may be given to a new pod object that another EgressIP serves
// before this node has seen that one. OVN reroutes the new pod here (that other EgressIP's holder or lingering node)
// as soon as the master has seen it; meanwhile its traffic must not leave with the deleted pod's egress IP (issue 26
// case c: the e2e TestLingerReusedPodIP saw a new pod's first request leave with it).
func TestReleasedRuleOfDeletedPodGoes(t *testing.T) {
	web := map[string]string{"app": "web"}
	f := startLinger(t, gwmode.Local, time.Hour,
		[]runtime.Object{testPod("a", web, "10.244.1.3"), testPod("b", web, "10.244.1.4")}, testEIP("eip1", "172.18.0.50"))
	f.waitHost(t, "eip1 programmed", 1, "10.244.1.3>172.18.0.50,10.244.1.4>172.18.0.50")
	ctx := context.Background()
	eip := f.getEIP(t, "eip1")
	eip.Status.Items = nil
	if _, err := f.eips.K8sV1().EgressIPs().Update(ctx, eip, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitHost(t, "released: the rules linger without the address", 0, "10.244.1.3>172.18.0.50,10.244.1.4>172.18.0.50")
	if err := f.kube.CoreV1().Pods("prod").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitHost(t, "the deleted pod's rule gone within the linger, the other pod's kept", -1, "10.244.1.4>172.18.0.50")
}
