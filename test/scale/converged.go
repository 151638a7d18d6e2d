package scale

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// converged is the independent full check: it returns "" when the API and NB show
// the converged state, else what is missing or wrong (the first few differences).
// It reads every EgressIP from the API and every owned row and the routers'
// references once (nbstate.ReadCurrentLive, which also checks router membership;
// from the NB database file when the server is a standalone ovsdb-server, see
// fileQuerier), so it costs a pass over the whole cluster: a phase runs it once,
// after the tracker says converged.
func (h *harness) converged(ctx context.Context) string {
	list, err := h.eips.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	pods, lost := h.tr.expected()

	// Expected rows, from status alone.
	wantReroute := map[string]string{} // pod IP -> sorted next hops
	var wantSNAT []string              // "GR_x external <- logical"
	if len(list.Items) != h.cfg.Namespaces {
		return fmt.Sprintf("%d EgressIPs, want %d", len(list.Items), h.cfg.Namespaces)
	}
	for _, e := range list.Items {
		seen := map[string]bool{}
		var hops []string
		for _, it := range e.Status.Items {
			n, ok := h.byName[it.Node]
			if !ok || lost[it.Node] || seen[it.EgressIP] || !slices.Contains(e.Spec.EgressIPs, it.EgressIP) {
				return fmt.Sprintf("EgressIP %s: bad status item %s@%s", e.Name, it.EgressIP, it.Node)
			}
			seen[it.EgressIP] = true
			hops = append(hops, n.JoinIP.String())
		}
		if len(seen) != len(e.Spec.EgressIPs) {
			return fmt.Sprintf("EgressIP %s: %d of %d egress IPs assigned", e.Name, len(seen), len(e.Spec.EgressIPs))
		}
		sort.Strings(hops)
		for key, ip := range pods {
			if ns, _, _ := strings.Cut(key, "/"); ns != e.Name {
				continue
			}
			wantReroute[ip.String()] = strings.Join(hops, " ")
			for _, it := range e.Status.Items {
				wantSNAT = append(wantSNAT, fmt.Sprintf("%s %s <- %s", nbstate.GatewayRouter(it.Node), it.EgressIP, ip))
			}
		}
	}

	cur, err := h.nb.readCurrent(ctx)
	if err != nil {
		return err.Error()
	}
	if len(cur.Stale) > 0 {
		return fmt.Sprintf("%d stale NB rows", len(cur.Stale))
	}
	gotReroute := map[string]string{}
	for k, p := range cur.Rows.Policies {
		if k.IDs.Rule != nbstate.RuleReroute {
			continue
		}
		src, ok := strings.CutPrefix(p.Match, "ip4.src == ")
		if !ok {
			return fmt.Sprintf("reroute policy with match %q", p.Match)
		}
		hops := slices.Clone(p.Nexthops)
		sort.Strings(hops)
		if _, dup := gotReroute[src]; dup {
			return "two reroute policies for " + src
		}
		gotReroute[src] = strings.Join(hops, " ")
	}
	var gotSNAT []string
	for k, n := range cur.Rows.NATs {
		gotSNAT = append(gotSNAT, fmt.Sprintf("%s %s <- %s", k.Router, n.ExternalIP, n.LogicalIP))
	}
	sort.Strings(wantSNAT)
	sort.Strings(gotSNAT)
	var diffs []string
	for ip, want := range wantReroute {
		if got := gotReroute[ip]; got != want {
			diffs = append(diffs, fmt.Sprintf("reroute %s: nexthops %q, want %q", ip, got, want))
		}
	}
	for ip := range gotReroute {
		if _, ok := wantReroute[ip]; !ok {
			diffs = append(diffs, "reroute for "+ip+" that no served pod has")
		}
	}
	if !slices.Equal(gotSNAT, wantSNAT) {
		diffs = append(diffs, fmt.Sprintf("%d SNAT rows, want %d (or different)", len(gotSNAT), len(wantSNAT)))
	}
	sort.Strings(diffs)
	if len(diffs) > 3 {
		diffs = append(diffs[:3], fmt.Sprintf("... %d more", len(diffs)-3))
	}
	return strings.Join(diffs, "; ")
}

// assignments maps every assigned egress IP to its node, from EgressIP status.
func (h *harness) assignments(ctx context.Context) map[string]string {
	h.t.Helper()
	list, err := h.eips.K8sV1().EgressIPs().List(ctx, metav1.ListOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range list.Items {
		for _, it := range e.Status.Items {
			out[it.EgressIP] = it.Node
		}
	}
	return out
}
