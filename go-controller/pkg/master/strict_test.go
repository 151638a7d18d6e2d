package master

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// actions maps "pod -> action" for every policy of rule reroute.
func (e *env) actions() map[string]string {
	e.t.Helper()
	cur := e.current()
	out := map[string]string{}
	for k, p := range cur.Rows.Policies {
		if k.IDs.Rule == nbstate.RuleReroute {
			out[k.IDs.Pod] = string(p.Action)
		}
	}
	return out
}

func (e *env) expectActions(what string, want map[string]string) {
	e.t.Helper()
	e.eventually(what, func() error {
		if got := e.actions(); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("policy actions %v, want %v", got, want)
		}
		return nil
	})
}

// TestStrict: a strict EgressIP with nothing assigned drops its pods' traffic
// (drop policy), takes the reroute back once an IP is assigned; turning strict
// off with nothing assigned removes the rows (pods leave as before).
func TestStrict(t *testing.T) {
	for _, mode := range []gwmode.Mode{gwmode.Shared, gwmode.Local} {
		t.Run(string(mode), func(t *testing.T) {
			e := cluster(t, nbserver.Start, mode)
			for _, n := range []string{"node1", "node2"} {
				e.updateNode(n, unlabelAssignable)
			}
			if mode == gwmode.Local {
				e.updateNode("node1", ready("172.18.0.33"))
			}
			strict := egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web)
			strict.Spec.Strict = true
			e.create(strict)
			e.expectCondition("eip-prod", "Assigned-172.18.0.33", metav1.ConditionFalse, "CandidatesNotLabelled")
			e.expectActions("strict, nothing assigned", map[string]string{"prod/web1": "drop", "prod/web2": "drop"})

			e.updateNode("node1", labelAssignable)
			e.expectStatus("eip-prod", "172.18.0.33@node1")
			e.expectActions("assigned", map[string]string{"prod/web1": "reroute", "prod/web2": "reroute"})

			e.updateNode("node1", unlabelAssignable)
			e.expectActions("unassigned again", map[string]string{"prod/web1": "drop", "prod/web2": "drop"})
			e.updateEgressIP("eip-prod", func(o *egressipv1.EgressIP) { o.Spec.Strict = false })
			e.expectActions("strict off", map[string]string{})
		})
	}
}
