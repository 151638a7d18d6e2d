package master

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// cachedPod is what the pod informer keeps of a pod (slimPod): the fields the
// master reads. Every master, cluster manager and zone controller keeps every pod
// of the cluster (a zone's SNATs serve pods of all zones); a *corev1.Pod is 1,240
// bytes with no field set, this is 504 (20,000 pods: about 14 MiB less live heap).
type cachedPod struct {
	metav1.TypeMeta
	metav1.ObjectMeta // name, namespace, UID, resourceVersion, labels, creation and deletion times
	NodeName          string
	HostNetwork       bool
	Phase             corev1.PodPhase
	PodIP             string
	PodIPs            []corev1.PodIP
}

// DeepCopyObject makes cachedPod a runtime.Object (the informer's store).
func (p *cachedPod) DeepCopyObject() runtime.Object {
	cp := &cachedPod{TypeMeta: p.TypeMeta, NodeName: p.NodeName, HostNetwork: p.HostNetwork, Phase: p.Phase, PodIP: p.PodIP,
		PodIPs: append([]corev1.PodIP(nil), p.PodIPs...)}
	p.ObjectMeta.DeepCopyInto(&cp.ObjectMeta)
	return cp
}

// pod is the *corev1.Pod view of p that planning and selection read (labels shared, not copied).
func (p *cachedPod) pod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: p.ObjectMeta,
		Spec:       corev1.PodSpec{HostNetwork: p.HostNetwork, NodeName: p.NodeName},
		Status:     corev1.PodStatus{Phase: p.Phase, PodIP: p.PodIP, PodIPs: p.PodIPs},
	}
}

// slimPod is the pod informer's transform: the fields selection.TrimPod keeps (the one rule of what master and
// node read of a pod), packed into a *cachedPod.
func slimPod(obj any) (any, error) {
	t, err := selection.TrimPod(obj)
	p, ok := t.(*corev1.Pod)
	if err != nil || !ok {
		return t, err
	}
	return &cachedPod{
		TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta,
		NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork,
		Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs,
	}, nil
}

// podChanged is selection.PodServingChanged on the pod informer's objects.
func podChanged(old, new any) bool {
	o, n := asPod(old), asPod(new)
	if o == nil || n == nil {
		return true
	}
	return selection.PodServingChanged(o, n)
}

// asPod is the *corev1.Pod view of an object of the pod informer (a *cachedPod,
// or a *corev1.Pod when no transform ran); nil for anything else.
func asPod(obj any) *corev1.Pod {
	switch p := obj.(type) {
	case *cachedPod:
		return p.pod()
	case *corev1.Pod:
		return p
	}
	return nil
}

// podStore reads the pod informer's indexer (it holds *cachedPod: the generated
// lister would not read them).
type podStore struct{ idx cache.Indexer }

// get returns the pod namespace/name, nil when absent.
func (s podStore) get(namespace, name string) (*corev1.Pod, error) {
	obj, ok, err := s.idx.GetByKey(podKey(namespace, name))
	if err != nil || !ok {
		return nil, err
	}
	if p := asPod(obj); p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("pod cache: %s/%s is a %T", namespace, name, obj)
}

// list returns the pods of namespace ("" = every namespace).
func (s podStore) list(namespace string) ([]*corev1.Pod, error) {
	var objs []any
	if namespace == "" {
		objs = s.idx.List()
	} else {
		var err error
		if objs, err = s.idx.ByIndex(cache.NamespaceIndex, namespace); err != nil {
			return nil, err
		}
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, obj := range objs {
		p := asPod(obj)
		if p == nil {
			return nil, fmt.Errorf("pod cache: a %T", obj)
		}
		out = append(out, p)
	}
	return out, nil
}
