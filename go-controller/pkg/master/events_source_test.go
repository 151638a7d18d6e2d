package master

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// Each process of a layout names itself in the Events it writes, so `kubectl get events` says which one to read
// the log of: the cluster manager is not "ovnkube-master", and a zone controller names its zone's node.
func TestEventSource(t *testing.T) {
	for _, tc := range []struct {
		role Role
		zone string
		want corev1.EventSource
	}{
		{RoleMaster, "", corev1.EventSource{Component: "ovnkube-master"}},
		{RoleClusterManager, "", corev1.EventSource{Component: "ovnkube-cluster-manager"}},
		{RoleZone, "node2", corev1.EventSource{Component: "ovnkube-controller", Host: "node2"}},
	} {
		if got := EventSource(tc.role, tc.zone); got != tc.want {
			t.Errorf("EventSource(%q, %q) = %+v, want %+v", tc.role, tc.zone, got, tc.want)
		}
	}
}
