package selection

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TrimPod is the transform of the master's and the node daemon's pod informers:
// it keeps only what they read of a pod, so that a cache of every pod in the
// cluster stays small. Kept: name, namespace, UID, resourceVersion, labels, the
// creation and deletion timestamps, spec.hostNetwork, spec.nodeName,
// status.phase, status.podIP and status.podIPs. Anything that is not a *Pod (a
// deletion tombstone) is returned as it is.
func TrimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Labels: p.Labels,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   corev1.PodSpec{HostNetwork: p.Spec.HostNetwork, NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
}

// PodServingChanged reports whether a pod update can change whether or how the
// pod is served: whether an EgressIP selects it (labels), whether it can be
// served (PodServable: host network, phase, IPs), its IPs, its node, and its
// creation time (which of two pod objects sharing an IP owns it: OwnsBefore).
// An update whose objects are not both *Pods counts as a change.
func PodServingChanged(old, new any) bool {
	o, ok1 := old.(*corev1.Pod)
	n, ok2 := new.(*corev1.Pod)
	if !ok1 || !ok2 {
		return true
	}
	if !maps.Equal(o.Labels, n.Labels) || o.Spec.HostNetwork != n.Spec.HostNetwork || o.Spec.NodeName != n.Spec.NodeName ||
		o.Status.Phase != n.Status.Phase || o.Status.PodIP != n.Status.PodIP || len(o.Status.PodIPs) != len(n.Status.PodIPs) ||
		!o.CreationTimestamp.Equal(&n.CreationTimestamp) {
		return true
	}
	for i := range o.Status.PodIPs {
		if o.Status.PodIPs[i].IP != n.Status.PodIPs[i].IP {
			return true
		}
	}
	return false
}
