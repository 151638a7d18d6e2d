package kube

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// NewRecorder returns an Event recorder that writes core/v1 Events through client as component, and the function
// that stops it (flushing what is queued).
func NewRecorder(client kubernetes.Interface, component string) (record.EventRecorder, func()) {
	b := record.NewBroadcaster()
	b.StartStructuredLogging(4)
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	r := b.NewRecorder(Scheme(), corev1.EventSource{Component: component})
	return r, b.Shutdown
}
