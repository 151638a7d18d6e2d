package e2e

import (
	"net/netip"
	"testing"
)

// Helpers of the cases written for IPv4 clusters (the operator cases of runOperatorCases and case 12, a node that
// cannot pull egress IPs to itself): they run in the IPv4 cluster of each gateway mode only. The family-aware
// cases use sourceFamily, nodeSources and the eipA/eipB maps.

// ipv4Only reports whether e's cluster is IPv4-only; when not, it logs that the IPv4 cases are skipped there.
func ipv4Only(t *testing.T, e *env) bool {
	if len(e.fams) == 1 && e.fams[0] == 4 {
		return true
	}
	t.Logf("the operator and node-claim cases run in IPv4 clusters only (this one has families %v)", e.fams)
	return false
}

// source is the IPv4 source address the echo server saw for one request of the pod.
func (e *env) source(ns, pod string) (netip.Addr, error) { return e.sourceFamily(ns, pod, 4) }

// nodeSource is the IPv4 address a pod of node that no EgressIP serves leaves with.
func (e *env) nodeSource(node string) netip.Addr {
	for _, a := range e.nodeSources(node) {
		if a.Is4() {
			return a
		}
	}
	e.t.Fatalf("node %s has no IPv4 source", node)
	return netip.Addr{}
}

// mustNode is node name's IPv4 node address.
func (e *env) mustNode(name string) struct{ NodeIP netip.Addr } {
	n, err := e.c.Node(name)
	if err != nil {
		e.t.Fatal(err)
	}
	return struct{ NodeIP netip.Addr }{n.NodeIP}
}
