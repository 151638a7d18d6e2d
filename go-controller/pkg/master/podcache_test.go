package master

import (
	"reflect"
	"testing"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	eipfake "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned/fake"
	eipinformers "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/informers/externalversions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

func fullPod(ns, name, node, ip string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("u-" + name), ResourceVersion: "7",
			Labels: map[string]string{"app": name}, Annotations: map[string]string{"big": "dropped"},
			CreationTimestamp: metav1.Unix(100, 0), Finalizers: []string{"dropped"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "dropped"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}},
	}
}

// TestCachedPod: the pod informer keeps a cachedPod of the fields the master
// reads, less than half a *corev1.Pod's size before any field is set, and every
// reader (the podStore behind planning, podChanged) sees those fields as before.
func TestCachedPod(t *testing.T) {
	if got, pod := unsafe.Sizeof(cachedPod{}), unsafe.Sizeof(corev1.Pod{}); got > 512 || got*2 > pod {
		t.Errorf("cachedPod is %d bytes, a corev1.Pod %d: want at most 512 and less than half", got, pod)
	}
	p := fullPod("ns1", "a", "node1", "10.128.0.5")
	obj, err := slimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	cp, ok := obj.(*cachedPod)
	if !ok {
		t.Fatalf("slimPod returned a %T", obj)
	}
	want := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns1", Name: "a", UID: p.UID, ResourceVersion: "7", Labels: p.Labels,
			CreationTimestamp: p.CreationTimestamp},
		Spec:   corev1.PodSpec{NodeName: "node1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.128.0.5", PodIPs: p.Status.PodIPs},
	}
	if got := asPod(cp); !reflect.DeepEqual(got, want) {
		t.Errorf("the pod view:\n got %+v\nwant %+v", got, want)
	}
	cpy := cp.DeepCopyObject().(*cachedPod)
	cpy.Labels["app"], cpy.PodIPs[0].IP = "changed", "changed"
	if cp.Labels["app"] != "a" || cp.PodIPs[0].IP != "10.128.0.5" {
		t.Errorf("DeepCopyObject shares labels or IPs: %+v", cp)
	}

	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for _, p := range []*corev1.Pod{p, fullPod("ns1", "b", "node2", "10.128.1.5"), fullPod("ns2", "c", "node2", "10.128.1.6")} {
		obj, err := slimPod(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	lc := listerCache{pods: podStore{idx: idx}}
	got, err := lc.Pod("ns1", "a")
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Pod(ns1, a) = %+v, %v; want %+v", got, err, want)
	}
	if got, err := lc.Pod("ns1", "gone"); got != nil || err != nil {
		t.Errorf("Pod(ns1, gone) = %v, %v; want nil, nil", got, err)
	}
	all, err1 := lc.Pods()
	in1, err2 := lc.PodsIn("ns1")
	if len(all) != 3 || len(in1) != 2 || err1 != nil || err2 != nil {
		t.Errorf("Pods: %d (%v), PodsIn(ns1): %d (%v); want 3 and 2", len(all), err1, len(in1), err2)
	}
	moved, err := slimPod(fullPod("ns1", "a", "node2", "10.128.0.5"))
	if err != nil {
		t.Fatal(err)
	}
	relabelled := fullPod("ns1", "a", "node1", "10.128.0.5")
	relabelled.Annotations["big"] = "other"
	same, err := slimPod(relabelled)
	if err != nil {
		t.Fatal(err)
	}
	if !podChanged(cp, moved) || podChanged(cp, same) {
		t.Errorf("podChanged: node moved %v (want true), annotation only %v (want false)", podChanged(cp, moved), podChanged(cp, same))
	}
}

// TestClusterManagerCachesNoPods: the cluster manager writes no NB rows, so it
// starts no pod or namespace informer (every pod of the cluster, and a sync on
// each pod event, for nothing); a master and a zone controller do.
func TestClusterManagerCachesNoPods(t *testing.T) {
	for _, tc := range []struct {
		name  string
		s     settings
		cache bool
	}{
		{"cluster manager", settings{mode: gwmode.Shared, interconnect: true, noNB: true, Params: Params{Role: RoleClusterManager}}, false},
		{"zone", settings{mode: gwmode.Shared, interconnect: true, Params: Params{Role: RoleZone, Zone: "node1"}}, true},
		{"master", settings{mode: gwmode.Shared}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.s.Reachability = newFakeReach()
			kubeInf := informers.NewSharedInformerFactory(kubefake.NewSimpleClientset(), 0)
			eipInf := eipinformers.NewSharedInformerFactory(eipfake.NewSimpleClientset(), 0)
			if _, err := newController(tc.s, nil, newMetrics(prometheus.NewRegistry()), kubeInf, eipInf); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			kubeInf.Start(stop)
			defer func() {
				close(stop)
				kubeInf.Shutdown() // waits for the informers, which stop with stop
			}()
			started := kubeInf.WaitForCacheSync(stop)
			_, pods := started[reflect.TypeOf(&corev1.Pod{})]
			_, nss := started[reflect.TypeOf(&corev1.Namespace{})]
			_, nodes := started[reflect.TypeOf(&corev1.Node{})]
			if pods != tc.cache || nss != tc.cache || !nodes {
				t.Errorf("informers started: pods %v, namespaces %v, nodes %v; want %v, %v, true", pods, nss, nodes, tc.cache, tc.cache)
			}
		})
	}
}
