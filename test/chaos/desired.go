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
	"strings"

	"github.com/ovn-org/libovsdb/client"
	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
)

// cutNodes is the Reachability explain is given: every node but those whose links the harness had cut when the
// checker read the cluster (a set taken then: explain asks it later, with the harness' lock held).
type cutNodes map[string]bool

func (c cutNodes) Reachable(node string) bool { return !c[node] }

// explainInput is what explain reads, built from one read of the checker: the API objects, and each NB (nbs: ""
// the one NB of the centralized layout, else each zone's by node name) with its gateway routers' own SNAT rows
// (the source of pods not served, in shared gateway mode), as `ovnkube egressip explain` reads them. It serves
// desiredOpinion, and explain --pod: the harness compares master.ExplainPod's sources of every probing pod with
// what its probes see after the check (converge_test.go).
func explainInput(ctx context.Context, mode gwmode.Mode, nbs map[string]client.Client, isCut func(string) bool,
	eips []egressipv1.EgressIP, nodes []corev1.Node, nss []corev1.Namespace, pods []corev1.Pod) (master.ExplainInput, error) {
	in := master.ExplainInput{Mode: mode, ClusterSubnets: []netip.Prefix{netip.MustParsePrefix(cluster.ClusterCIDR)},
		JoinSubnets: []netip.Prefix{netip.MustParsePrefix(cluster.JoinCIDR)}, GatewaySNAT: map[string][]master.NATRow{}}
	cut := cutNodes{}
	for _, n := range nodes {
		cut[n.Name] = isCut(n.Name)
	}
	in.Reachable = cut
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
	for zone, nb := range nbs {
		cur, err := nbstate.ReadCurrent(ctx, nb)
		if err != nil {
			return in, fmt.Errorf("zone %q NB: %w", zone, err)
		}
		if zone == "" {
			in.NB = &cur
		} else {
			if in.ZoneNB == nil {
				in.ZoneNB = map[string]*nbstate.Current{}
			}
			in.ZoneNB[zone] = &cur
		}
		if err := gatewaySNAT(ctx, nb, in.GatewaySNAT); err != nil {
			return in, fmt.Errorf("zone %q NB: %w", zone, err)
		}
	}
	return in, nil
}

// gatewaySNAT adds the SNAT rows of nb's gateway routers that are not ours (the node's own SNAT of the cluster
// subnet) to out.
func gatewaySNAT(ctx context.Context, nb client.Client, out map[string][]master.NATRow) error {
	var routers []nbdb.LogicalRouter
	var nats []nbdb.NAT
	if err := nb.List(ctx, &routers); err != nil {
		return err
	}
	if err := nb.List(ctx, &nats); err != nil {
		return err
	}
	byUUID := map[string]nbdb.NAT{}
	for _, n := range nats {
		byUUID[n.UUID] = n
	}
	for _, r := range routers {
		if !strings.HasPrefix(r.Name, nbstate.GatewayRouterPrefix) {
			continue
		}
		for _, u := range r.Nat {
			if n, ok := byUUID[u]; ok && n.Type == nbdb.NATTypeSNAT && !nbstate.Owned(n.ExternalIDs) {
				out[r.Name] = append(out[r.Name], master.NATRow{ExternalIP: n.ExternalIP, LogicalIP: n.LogicalIP})
			}
		}
	}
	return nil
}

// desiredOpinion adds, for every EgressIP, the rows explain finds missing or extra in any zone to v.
func desiredOpinion(in master.ExplainInput, eips []egressipv1.EgressIP, v *verdict) error {
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
