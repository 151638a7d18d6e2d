package hostegress

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
)

// Two pod objects share a pod IP (the old one terminating, a new one given its IP), each served by another
// EgressIP held here: the IP is SNATed with the egress IP of the EgressIP serving the pod object that owns it now
// (selection.OwnsBefore: the newer), never with the other's. The old rule (EgressIPs by name, first claim wins)
// SNATed it with "a-old"'s 172.18.0.50.
func TestSharedPodIPSNATedForItsOwner(t *testing.T) {
	old := pod("prod", "old", web, "10.244.1.3")
	old.CreationTimestamp = metav1.NewTime(time.Unix(100, 0))
	newer := pod("prod", "new", db, "10.244.1.3")
	newer.CreationTimestamp = metav1.NewTime(time.Unix(200, 0))
	st, problems := Compute(Input{NodeName: "node1", Host: testHost(), Namespaces: namespaces(),
		EgressIPs: []*egressipv1.EgressIP{eip("a-old", 1, web, "node1", "172.18.0.50"), eip("b-new", 2, db, "node1", "172.18.0.51")},
		Pods:      []*corev1.Pod{old, newer}})
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	if len(st.SNAT) != 1 {
		t.Fatalf("SNAT rules %+v, want one for 10.244.1.3", st.SNAT)
	}
	if s := st.SNAT[0]; s.PodIP != ma("10.244.1.3") || s.EgressIPAddr != ma("172.18.0.51") || s.EgressIP != "b-new" {
		t.Errorf("SNAT %+v: the IP must leave with b-new's 172.18.0.51 (it serves prod/new, which owns the IP)", s)
	}
}
