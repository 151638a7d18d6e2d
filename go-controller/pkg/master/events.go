package master

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// ReasonInvalidNodeFacts is the Event reason, on a Node (interconnect layout), for an
// egress-assignable node whose node facts (node-id, transit switch address, egress
// network) are absent or do not parse: it cannot hold egress IPs.
const ReasonInvalidNodeFacts = "InvalidNodeFacts"

// reporter turns problems into Warning Events and log lines, once per problem: a
// problem is reported when it appears (or its message changes), not on every sync;
// when it goes away and comes back it is reported again. Only the sync goroutine
// uses it.
type reporter struct {
	recorder record.EventRecorder
	reported map[types.UID]map[problemKey]bool
}

type problemKey struct{ reason, ip, message string }

func newReporter(r record.EventRecorder) *reporter {
	return &reporter{recorder: r, reported: map[types.UID]map[problemKey]bool{}}
}

// report records the current problems of one EgressIP.
func (r *reporter) report(eip *egressipv1.EgressIP, problems []assign.Problem, selectorErr error) {
	now := map[problemKey]bool{}
	for _, p := range problems {
		now[problemKey{string(p.Reason), p.IP, p.Message}] = true
	}
	if selectorErr != nil {
		now[problemKey{selection.ReasonInvalidSelector, "", selectorErr.Error()}] = true
	}
	before := r.reported[eip.UID]
	for _, p := range problems {
		k := problemKey{string(p.Reason), p.IP, p.Message}
		if !before[k] {
			klog.InfoS("EgressIP request cannot be met", "egressip", eip.Name, "field", "spec.egressIPs", "ip", p.IP, "reason", p.Reason, "message", p.Message)
			r.recorder.Event(eip, corev1.EventTypeWarning, string(p.Reason), p.Message)
		}
	}
	if selectorErr != nil {
		k := problemKey{selection.ReasonInvalidSelector, "", selectorErr.Error()}
		if !before[k] {
			klog.InfoS("EgressIP selector is invalid; it serves no pod", "egressip", eip.Name, "err", selectorErr)
			r.recorder.Event(eip, corev1.EventTypeWarning, selection.ReasonInvalidSelector, selectorErr.Error())
		}
	}
	if len(now) == 0 {
		delete(r.reported, eip.UID)
		return
	}
	r.reported[eip.UID] = now
}

// prune forgets EgressIPs that no longer exist.
func (r *reporter) prune(exists map[types.UID]bool) {
	for uid := range r.reported {
		if !exists[uid] {
			delete(r.reported, uid)
		}
	}
}
