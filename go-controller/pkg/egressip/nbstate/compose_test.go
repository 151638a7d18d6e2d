package nbstate

import (
	"net/netip"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// Desired is these tests' composition of the rows for in, from this package's pieces
// as the master's full sync composes them (master.plan, which explain and `ovnkube
// egressip migrate` call too): with no EgressIP at all it is empty (not even the
// shared rows); per family of the cluster subnets the shared rows (ClusterRows) with
// the served pod IPs; per served pod, the rows of PodRows under its EgressIP's
// Routes; when two served pods share an IP, the pod object owning it
// (selection.OwnsBefore) has the rows of that IP, or none has them when its
// EgressIP has no route there.
func Desired(in Input) State {
	st := NewState()
	if len(in.EgressIPs) == 0 {
		return st
	}
	served := map[string][]string{} // family -> served pod IPs
	var claims []selection.IPClaim
	for _, e := range in.EgressIPs {
		for _, pod := range e.Pods {
			claims = append(claims, selection.IPClaim{Namespace: pod.Namespace, Name: pod.Name, Created: pod.Created, IPs: pod.IPs})
		}
	}
	owner := selection.Owners(claims) // pod IP -> index in claims of the pod object owning it
	i := 0
	for _, e := range in.EgressIPs {
		routes := Routes(in, e)
		for _, pod := range e.Pods {
			me := i
			i++
			claim := func(ip netip.Addr) bool { return owner[ip] == me }
			for _, ip := range addPodRows(&st, in.Mode, in.Zone, e.Name, routes, pod, claim) {
				served[Family(ip)] = append(served[Family(ip)], ip.String())
			}
		}
	}
	for _, fam := range families(in.ClusterSubnets) {
		addClusterRows(&st, in, fam, served[fam])
	}
	return st
}
