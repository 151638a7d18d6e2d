package chaos

// A second opinion on the zones' rows, from the product's own rule (interconnect layout): what `ovnkube egressip
// explain` reports (master.ExplainEgressIP), which compares each zone's NB rows of an EgressIP with the rows that
// zone's controller plans (its own planning code) from the same API objects the checker read. The checker's own rows
// (checker.go) are written from the docs; this one shows where a zone's NB is not what its writer plans from what
// the API says now. A row it finds missing or extra makes the check fail like the checker's own.

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/ovn-org/libovsdb/client"
	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// desiredOpinion adds, for every EgressIP, the rows explain finds missing or extra in any zone to v.
func desiredOpinion(ctx context.Context, mode gwmode.Mode, zones map[string]client.Client, eips []egressipv1.EgressIP,
	nodes []corev1.Node, nss []corev1.Namespace, pods []corev1.Pod, v *verdict) error {
	in := master.ExplainInput{Mode: mode, ClusterSubnets: []netip.Prefix{netip.MustParsePrefix(cluster.ClusterCIDR)},
		JoinSubnets: []netip.Prefix{netip.MustParsePrefix(cluster.JoinCIDR)}, ZoneNB: map[string]*nbstate.Current{}}
	for i := range eips {
		in.EgressIPs = append(in.EgressIPs, &eips[i])
	}
	for i := range nodes {
		in.Nodes = append(in.Nodes, &nodes[i])
	}
	for i := range nss {
		in.Namespaces = append(in.Namespaces, &nss[i])
	}
	for i := range pods {
		in.Pods = append(in.Pods, &pods[i])
	}
	for zone, nb := range zones {
		cur, err := nbstate.ReadCurrent(ctx, nb)
		if err != nil {
			return fmt.Errorf("zone %s NB: %w", zone, err)
		}
		in.ZoneNB[zone] = &cur
	}
	for _, e := range eips {
		r, err := master.ExplainEgressIP(in, e.Name)
		if err != nil {
			return err
		}
		if r.NB == nil {
			continue
		}
		for _, l := range r.NB.Missing {
			v.missing = append(v.missing, "desired (explain): "+l)
		}
		for _, l := range r.NB.Extra {
			v.stale = append(v.stale, "desired (explain): "+l)
		}
	}
	return nil
}
