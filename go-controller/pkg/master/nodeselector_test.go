package master

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

func zone(z string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Labels["zone"] = z }
}

// TestNodeSelectorMaster: two EgressIPs restricted to disjoint nodes; editing a
// selector moves its IP (status and NB rows in the same sync), and a selector
// that selects no node says so in the IP's condition.
func TestNodeSelectorMaster(t *testing.T) {
	e := newEnv(t, nbserver.Start, gwmode.Shared)
	populateObjects(e)
	e.updateNode("node3", labelAssignable)
	e.updateNode("node1", zone("a"))
	e.updateNode("node2", zone("b"))
	e.updateNode("node3", zone("c"))
	e.start()

	prod := egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web)
	prod.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "b"}}
	dev := egressIP("eip-dev", 1, []string{"172.18.0.44"}, map[string]string{"env": "dev"}, nil)
	dev.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	e.create(prod)
	e.create(dev)
	e.expectStatus("eip-prod", "172.18.0.33@node2")
	e.expectStatus("eip-dev", "172.18.0.44@node1")

	e.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) {
		o.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "zone", Operator: metav1.LabelSelectorOpIn, Values: []string{"c", "d"}}}}
	})
	e.expectStatus("eip-prod", "172.18.0.33@node3")
	e.expectRows("moved to node3",
		map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.4"), "prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.4"),
			"dev/web3": rr("eip-dev", "10.244.2.8", "100.64.0.2")},
		[]string{sn("node3", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node3", "172.18.0.33", "10.244.3.6", "eip-prod"),
			sn("node1", "172.18.0.44", "10.244.2.8", "eip-dev")})
	e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed)

	e.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) {
		o.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "nowhere"}}
	})
	e.expectStatus("eip-prod")
	e.expectCondition("eip-prod", "Assigned-172.18.0.33", metav1.ConditionFalse, "CandidatesExcludedBySelector")
	e.expectStatus("eip-dev", "172.18.0.44@node1")
}
