package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/node/hostegress"
)

// Issue 26: a pod that an egress IP held by this node stops serving, while the master has not removed its reroute
// yet, must not leave with the node's own address.

// webEIP is eip1 (172.18.0.50, held by node1) serving the pods labelled app=web of namespace prod.
func webEIP() *egressipv1.EgressIP {
	e := testEIP("eip1", "172.18.0.50")
	e.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	return e
}

// podOn is testPod (app=web) scheduled on node.
func podOn(name, node, ip string) *corev1.Pod {
	p := testPod(name, map[string]string{"app": "web"}, ip)
	p.Spec.NodeName = node
	return p
}

// unserve relabels pods out of eip1's selector and then creates pod "c" (served, on node2); it returns the first
// host state applied with c's rule: the pod informer delivers in order, so the sync that first saw c saw the
// relabels too.
func unserve(t *testing.T, f *fixture, names ...string) hostegress.State {
	t.Helper()
	ctx := context.Background()
	for _, name := range names {
		p, err := f.kube.CoreV1().Pods("prod").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Labels = map[string]string{"app": "other"}
		if _, err := f.kube.CoreV1().Pods("prod").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.kube.CoreV1().Pods("prod").Create(ctx, podOn("c", "node2", "10.244.2.9"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var first hostegress.State
	waitFor(t, "a state with the new pod c's rule", func() (bool, string) {
		f.host.mu.Lock()
		defer f.host.mu.Unlock()
		i := slices.IndexFunc(f.host.applied, func(st hostegress.State) bool {
			return strings.Contains(snatPods(st), "10.244.2.9>")
		})
		if i < 0 {
			return false, "none yet"
		}
		first = f.host.applied[i]
		return true, ""
	})
	return first
}

// A pod on another node that stops being served by an egress IP held here keeps its SNAT rule for the release
// linger (OVN reroutes its traffic here until the master removes the reroute), and loses it at the linger's end.
func TestUnservedRemotePodRuleLingers(t *testing.T) {
	const linger = 3 * time.Second
	f := startLinger(t, gwmode.Local, linger, []runtime.Object{podOn("a", "node2", "10.244.2.3")}, webEIP())
	f.waitHost(t, "eip1 programmed", 1, "10.244.2.3>172.18.0.50")
	relabelled := time.Now()
	if got := snatPods(unserve(t, f, "a")); got != "10.244.2.3>172.18.0.50,10.244.2.9>172.18.0.50" {
		t.Fatalf("first sync after pod a was relabelled out: SNAT %q, want a's rule kept (the master may still reroute it here)", got)
	}
	f.waitHost(t, "a's rule gone at the linger's end", -1, "10.244.2.9>172.18.0.50")
	if d := time.Since(relabelled); d < linger {
		t.Fatalf("a's rule gone %v after the relabel, want not before the linger %v", d, linger)
	}
}

// A pod running on the holder itself loses its rule at once: in local gateway mode its traffic crosses this host
// whether rerouted or not, and a kept rule would send it out with the egress IP after the master stopped serving it.
func TestUnservedLocalPodRuleGoesAtOnce(t *testing.T) {
	f := startLinger(t, gwmode.Local, time.Hour,
		[]runtime.Object{podOn("a", "node1", "10.244.1.3"), podOn("b", "node2", "10.244.2.3")}, webEIP())
	f.waitHost(t, "eip1 programmed", -1, "10.244.1.3>172.18.0.50,10.244.2.3>172.18.0.50")
	if got := snatPods(unserve(t, f, "a", "b")); got != "10.244.2.3>172.18.0.50,10.244.2.9>172.18.0.50" {
		t.Fatalf("first sync after pods a (node1) and b (node2) were relabelled out: SNAT %q, want b's rule kept, a's gone", got)
	}
}

// The rule of a pod object that is deleted goes at once, whether it was kept for an unserved pod or the pod was
// served when deleted: the pod sends nothing more and its IP may be a new pod's already.
func TestUnservedPodRuleGoesWithThePod(t *testing.T) {
	f := startLinger(t, gwmode.Local, time.Hour,
		[]runtime.Object{podOn("a", "node2", "10.244.2.3"), podOn("d", "node2", "10.244.2.4")}, webEIP())
	f.waitHost(t, "eip1 programmed", -1, "10.244.2.3>172.18.0.50,10.244.2.4>172.18.0.50")
	if got := snatPods(unserve(t, f, "a")); got != "10.244.2.3>172.18.0.50,10.244.2.4>172.18.0.50,10.244.2.9>172.18.0.50" {
		t.Fatalf("first sync after pod a was relabelled out: SNAT %q, want a's rule kept", got)
	}
	ctx := context.Background()
	for _, name := range []string{"a", "d"} {
		if err := f.kube.CoreV1().Pods("prod").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitHost(t, "the deleted pods' rules gone within the linger (a's kept one, d's served one)", -1, "10.244.2.9>172.18.0.50")
}

// A released egress IP's rule for a pod running on this node stays while an EgressIP listing the IP still serves the
// pod (the IP moved: the pod's traffic crosses this host until the master reroutes it to the new holder), and goes at
// once when none does (the EgressIP deleted): the pod's traffic keeps crossing this host after the master stopped
// serving it. A pod on another node keeps its rule for the linger in both cases.
func TestReleasedRuleOfLocalPod(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(ctx context.Context, f *fixture) error
		want    string
	}{
		{name: "moved", want: "10.244.1.3>172.18.0.50,10.244.2.3>172.18.0.50",
			release: func(ctx context.Context, f *fixture) error {
				eip, err := f.eips.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
				if err != nil {
					return err
				}
				eip.Status.Items[0].Node = "node2"
				_, err = f.eips.K8sV1().EgressIPs().Update(ctx, eip, metav1.UpdateOptions{})
				return err
			}},
		{name: "deleted", want: "10.244.2.3>172.18.0.50",
			release: func(ctx context.Context, f *fixture) error {
				return f.eips.K8sV1().EgressIPs().Delete(ctx, "eip1", metav1.DeleteOptions{})
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startLinger(t, gwmode.Local, time.Hour,
				[]runtime.Object{podOn("a", "node1", "10.244.1.3"), podOn("b", "node2", "10.244.2.3")}, webEIP())
			f.waitHost(t, "eip1 programmed", 1, "10.244.1.3>172.18.0.50,10.244.2.3>172.18.0.50")
			if err := tc.release(context.Background(), f); err != nil {
				t.Fatal(err)
			}
			var first hostegress.State
			waitFor(t, "a state without the address", func() (bool, string) {
				f.host.mu.Lock()
				defer f.host.mu.Unlock()
				i := slices.IndexFunc(f.host.applied, func(st hostegress.State) bool { return len(st.Addresses) == 0 })
				if i < 0 {
					return false, "none yet"
				}
				first = f.host.applied[i]
				return true, ""
			})
			if got := snatPods(first); got != tc.want {
				t.Fatalf("first sync after the release: SNAT %q, want %q", got, tc.want)
			}
		})
	}
}
