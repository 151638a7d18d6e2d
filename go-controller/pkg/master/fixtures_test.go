package master

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
	e.expectRows(what,
		map[string]string{
			"prod/web1": rr("eip-prod", "10.244.1.5", "100.64.0.2", "100.64.0.3"),
			"prod/web2": rr("eip-prod", "10.244.3.6", "100.64.0.2", "100.64.0.3"),
		},
		[]string{
			sn("node1", "172.18.0.33", "10.244.1.5", "eip-prod"), sn("node1", "172.18.0.33", "10.244.3.6", "eip-prod"),
			sn("node2", "172.18.0.44", "10.244.1.5", "eip-prod"), sn("node2", "172.18.0.44", "10.244.3.6", "eip-prod"),
		})
}
