package master

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// TestForgedNodeClaimsAreNotBelieved: node2 publishes node1's address as its egress
// network, node3 lists as ready the egress IP node1 holds. Neither is used (node2
// gets no egress IP, nothing is rerouted to node3) and an Event on each Node says
// why; once node2 publishes its own address again it hosts an egress IP.
func TestForgedNodeClaimsAreNotBelieved(t *testing.T) {
	forEachNB(t, func(t *testing.T, start func(testing.TB) *nbserver.Server) {
		e := newEnv(t, start, gwmode.Local)
		populateObjects(e)
		p := e.params()
		p.doubtGrace = 50 * time.Millisecond
		e.startWith(p)
		e.updateNode("node2", func(n *corev1.Node) { n.Annotations[annotations.PrimaryIfAddr] = `{"ipv4":"172.18.0.11/16"}` })
		e.updateNode("node1", ready("172.18.0.33"))
		e.updateNode("node3", ready("172.18.0.33"))
		e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44"}, prodNS, web))
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.expectEvent("AddressOfAnotherNode", "node node2: annotation k8s.ovn.org/node-primary-ifaddr: 172.18.0.11 is node node1's address")
		e.expectEvent("ReadyEgressIPNotHeld", "node node3: annotation k8s.ovn.org/egress-ips-ready lists 172.18.0.33, which node node1 holds")
		e.settle()
		e.expectStatus("eip-prod", "172.18.0.33@node1")
		e.expectRows("rerouted to node1 only",
			map[string]string{"prod/web1": rr("eip-prod", "10.244.1.5", "10.244.1.2"), "prod/web2": rr("eip-prod", "10.244.3.6", "10.244.1.2")}, nil)

		e.updateNode("node2", func(n *corev1.Node) { n.Annotations[annotations.PrimaryIfAddr] = `{"ipv4":"172.18.0.12/16"}` })
		e.expectStatus("eip-prod", "172.18.0.33@node1", "172.18.0.44@node2")
	})
}
