package selection

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// fullPod is a pod as the API returns it: more than serving reads.
func fullPod() *corev1.Pod {
	deleted := metav1.NewTime(time.Unix(2000, 0))
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "web1", Namespace: "prod", UID: "u1", ResourceVersion: "42", Generation: 3,
			Labels:            map[string]string{"app": "web"},
			Annotations:       map[string]string{"k8s.ovn.org/pod-networks": "{}"},
			CreationTimestamp: metav1.NewTime(time.Unix(1000, 0)), DeletionTimestamp: &deleted,
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web"}},
			Finalizers:      []string{"f"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node1", HostNetwork: false, ServiceAccountName: "default",
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.244.1.3", PodIPs: []corev1.PodIP{{IP: "10.244.1.3"}, {IP: "fd00:10:244:1::3"}},
			HostIP:     "172.18.0.11",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

func TestTrimPod(t *testing.T) {
	in := fullPod()
	got, err := TrimPod(in)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Pod{
		TypeMeta: in.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: "web1", Namespace: "prod", UID: "u1", ResourceVersion: "42",
			Labels: in.Labels, CreationTimestamp: in.CreationTimestamp, DeletionTimestamp: in.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: "node1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.3", PodIPs: in.Status.PodIPs},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("TrimPod =\n%+v\nwant\n%+v", got, want)
	}
	// What serving reads is the same before and after.
	if v, w := servingView(got.(*corev1.Pod)), servingView(in); !reflect.DeepEqual(v, w) {
		t.Fatalf("serving reads %+v of the trimmed pod, %+v of the pod", v, w)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "prod/web1", Obj: in}
	if got, err := TrimPod(tomb); err != nil || !reflect.DeepEqual(got, tomb) {
		t.Fatalf("TrimPod(tombstone) = %v, %v; want it unchanged", got, err)
	}
}

// view is what serving reads of a pod (besides its namespace and name, its key).
type view struct {
	Labels   map[string]string
	Servable bool
	IPs      []netip.Addr
	Node     string
	Claim    IPClaim
}

func servingView(p *corev1.Pod) view {
	lbl := p.Labels
	if len(lbl) == 0 {
		lbl = nil // selectors see no labels either way
	}
	return view{Labels: lbl, Servable: PodServable(p), IPs: PodIPs(p), Node: p.Spec.NodeName, Claim: ClaimOf(p)}
}

func trim(t *testing.T, p *corev1.Pod) any {
	t.Helper()
	out, err := TrimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPodServingChanged(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(p *corev1.Pod)
		want bool
	}{
		{"nothing", func(*corev1.Pod) {}, false},
		{"a label added", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "web", "tier": "1"} }, true},
		{"a label changed", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "db"} }, true},
		{"labels gone", func(p *corev1.Pod) { p.Labels = nil }, true},
		{"host network", func(p *corev1.Pod) { p.Spec.HostNetwork = true }, true},
		{"node name", func(p *corev1.Pod) { p.Spec.NodeName = "node2" }, true},
		{"phase", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
		{"podIP", func(p *corev1.Pod) { p.Status.PodIP = "10.244.1.4" }, true},
		{"an IP more", func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "10.244.1.9"}) }, true},
		{"an IP changed", func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.3"}, {IP: "fd00:10:244:1::4"}} }, true},
		{"IPs gone", func(p *corev1.Pod) { p.Status.PodIPs = nil }, true},
		{"created (the object was replaced)", func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(time.Unix(1001, 0)) }, true},
		{"same IPs, new slice", func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.3"}, {IP: "fd00:10:244:1::3"}} }, false},
		{"resourceVersion", func(p *corev1.Pod) { p.ResourceVersion = "43" }, false},
		{"annotations", func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }, false},
		{"conditions", func(p *corev1.Pod) { p.Status.Conditions = nil }, false},
		{"host IP", func(p *corev1.Pod) { p.Status.HostIP = "172.18.0.12" }, false},
		{"deletion timestamp", func(p *corev1.Pod) { p.DeletionTimestamp = nil }, false},
		{"containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := fullPod()
			nw := fullPod()
			tc.edit(nw)
			if got := PodServingChanged(old, nw); got != tc.want {
				t.Fatalf("PodServingChanged = %v, want %v", got, tc.want)
			}
			// The trimmed objects (what the handlers get) give the same answer.
			if got := PodServingChanged(trim(t, old), trim(t, nw)); got != tc.want {
				t.Fatalf("PodServingChanged of the trimmed pods = %v, want %v", got, tc.want)
			}
			// No change serving would see goes unnoticed.
			if !tc.want && !reflect.DeepEqual(servingView(old), servingView(nw)) {
				t.Fatalf("serving reads %+v, then %+v, but the change is ignored", servingView(old), servingView(nw))
			}
		})
	}
	a, b := fullPod(), fullPod()
	a.Labels, b.Labels = nil, map[string]string{}
	if PodServingChanged(a, b) {
		t.Fatal("no labels to an empty label map must not count as a change (selectors see the same)")
	}
	if !PodServingChanged(fullPod(), cache.DeletedFinalStateUnknown{Key: "prod/web1"}) {
		t.Fatal("an update whose objects are not both pods must count as a change")
	}
}
