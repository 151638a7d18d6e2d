package master

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// withNode applies fs to n and returns it.
func withNode(n *corev1.Node, fs ...func(*corev1.Node)) *corev1.Node {
	for _, f := range fs {
		f(n)
	}
	return n
}

// current reads the NB rows we own (nbstate.ReadCurrent through the test's NB client), failing the test on an error.
func (e *env) current() nbstate.Current {
	e.t.Helper()
	cur, err := nbstate.ReadCurrent(context.Background(), e.nbc)
	if err != nil {
		e.t.Fatal(err)
	}
	return cur
}

// createProdOnNodes12 creates EgressIP eip-prod (172.18.0.33 and 172.18.0.44, serving prod's web pods) and waits
// until its status has node1 holding .33 and node2 .44, as the populated cluster assigns them.
func (e *env) createProdOnNodes12() {
	e.t.Helper()
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44"}, prodNS, web))
	e.expectStatus("eip-prod", "172.18.0.33@node1", "172.18.0.44@node2")
}

// expectProdRowsOnNodes12 waits for eip-prod's rows while node1 and node2 hold its IPs (shared gateway mode): web1
// and web2 rerouted to both nodes' join IPs, and each pod SNATed on both gateway routers.
func (e *env) expectProdRowsOnNodes12(what string) {
	e.t.Helper()
	e.expectHeldRows(what, "eip-prod", prodWebs(), holder{"node1", "172.18.0.33", "100.64.0.2"}, holder{"node2", "172.18.0.44", "100.64.0.3"})
}

// prodWebs: the populated cluster's pods web1 and web2 of namespace prod, by IP.
func prodWebs() map[string]string {
	return map[string]string{"prod/web1": "10.244.1.5", "prod/web2": "10.244.3.6"}
}

// holder: node holds egress IP eip; its join IP (join) is the next hop of reroutes to it in shared gateway mode.
type holder struct{ node, eip, join string }

// expectHeldRows waits for the rows of EgressIP name serving pods (namespace/name -> pod IP) while holders hold its
// IPs (shared gateway mode): every pod rerouted to all the holders' join IPs, and SNATed on each holder's gateway
// router with the IP it holds.
func (e *env) expectHeldRows(what, name string, pods map[string]string, holders ...holder) {
	e.t.Helper()
	var joins, snats []string
	for _, h := range holders {
		joins = append(joins, h.join)
		for _, ip := range pods {
			snats = append(snats, sn(h.node, h.eip, ip, name))
		}
	}
	reroutes := map[string]string{}
	for pod, ip := range pods {
		reroutes[pod] = rr(name, ip, slices.Clone(joins)...)
	}
	e.expectRows(what, reroutes, snats)
}
