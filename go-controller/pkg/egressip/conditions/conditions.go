// Package conditions computes the status conditions of an EgressIP: "Ready" (every
// requested IP is assigned and programmed) and, per requested IP, "Assigned-<ip>"
// (assigned, or why not). It is pure: the master calls it at every sync with the
// assignment's result and what it knows is programmed, and `ovnkube egressip
// explain` calls it on the same inputs.
package conditions

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
)

// Condition types and reasons.
const (
	TypeReady = "Ready"
	// TypeAssignedPrefix + the IP is the type of one requested IP's condition.
	TypeAssignedPrefix = "Assigned-"

	ReasonProgrammed    = "Programmed"
	ReasonNotAssigned   = "NotAllAssigned"
	ReasonNotProgrammed = "NotProgrammed"
	ReasonAssigned      = "Assigned"
	// ReasonUnknown: the IP is neither assigned nor reported as a problem (not
	// expected; said rather than guessed).
	ReasonUnknown = "Unknown"
)

// AssignedType returns the condition type of spec.egressIPs[index] = raw. An IP is
// written in its canonical form (IPv6 colons become dashes; a trailing "::" is
// written "--0", the same address); an entry that is not an IP is "entry<index>".
func AssignedType(raw string, index int) string {
	addr, err := netip.ParseAddr(raw)
	if err != nil || addr.Zone() != "" {
		return TypeAssignedPrefix + "entry" + strconv.Itoa(index)
	}
	s := addr.String()
	if addr.Is6() {
		s = strings.ReplaceAll(s, ":", "-")
		if strings.HasSuffix(s, "-") {
			s += "0"
		}
	}
	return TypeAssignedPrefix + s
}

// Input is everything Compute reads about one EgressIP.
type Input struct {
	Generation int64
	// Spec is spec.egressIPs as written.
	Spec []string
	// Items are the status items (assignments) the status will hold.
	Items []egressipv1.EgressIPStatusItem
	// Problems are the assignment's problems of this EgressIP (assign.Result).
	Problems []assign.Problem
	// NotProgrammed maps an assigned IP (as written in spec) to why its traffic is
	// not carried yet; an assigned IP absent from it is programmed.
	NotProgrammed map[string]string
	// Strict is spec.strict.
	Strict bool
}

// Compute returns status.assigned ("assigned/requested") and the conditions, Ready
// first, then one per spec entry in spec order. LastTransitionTime is left zero:
// Merge sets it.
func Compute(in Input) (string, []metav1.Condition) {
	held := map[string]string{}
	for _, it := range in.Items {
		held[it.EgressIP] = it.Node
	}
	problems := map[int]assign.Problem{}
	for _, p := range in.Problems {
		problems[p.Index] = p
	}
	out := []metav1.Condition{{Type: TypeReady}}
	used := map[string]bool{TypeReady: true}
	var unassigned, unprogrammed []string
	assigned := 0
	for i, raw := range in.Spec {
		typ := AssignedType(raw, i)
		if used[typ] {
			typ = TypeAssignedPrefix + "entry" + strconv.Itoa(i)
		}
		used[typ] = true
		c := metav1.Condition{Type: typ, ObservedGeneration: in.Generation}
		if node, ok := held[raw]; ok {
			assigned++
			c.Status, c.Reason = metav1.ConditionTrue, ReasonAssigned
			c.Message = fmt.Sprintf("%s is held by node %s", raw, node)
			if why, ok := in.NotProgrammed[raw]; ok {
				c.Message += "; not programmed yet: " + why
				unprogrammed = append(unprogrammed, raw+" on "+node+": "+why)
			}
		} else if p, ok := problems[i]; ok {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, string(p.Cause), p.Message
			unassigned = append(unassigned, raw+": "+string(p.Cause))
		} else {
			c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonUnknown, raw+" is not assigned and no reason is known"
			unassigned = append(unassigned, raw+": "+ReasonUnknown)
		}
		out = append(out, c)
	}
	summary := fmt.Sprintf("%d/%d", assigned, len(in.Spec))
	r := &out[0]
	r.ObservedGeneration = in.Generation
	switch {
	case len(unassigned) > 0:
		r.Status, r.Reason = metav1.ConditionFalse, ReasonNotAssigned
		r.Message = summary + " egress IPs assigned; not assigned: " + strings.Join(unassigned, "; ")
		if in.Strict && assigned == 0 {
			r.Message += "; strict: served pods' traffic leaving the cluster is dropped"
		}
	case len(unprogrammed) > 0:
		r.Status, r.Reason = metav1.ConditionFalse, ReasonNotProgrammed
		r.Message = summary + " egress IPs assigned; not programmed yet: " + strings.Join(unprogrammed, "; ")
	default:
		r.Status, r.Reason = metav1.ConditionTrue, ReasonProgrammed
		r.Message = summary + " egress IPs assigned and programmed"
	}
	return summary, out
}

// Merge returns want with each condition's LastTransitionTime taken from the
// condition of the same type in old when its status is unchanged, else now; and
// whether the result differs from old in anything but order-insensitive equality
// (a sync whose conditions are unchanged writes nothing).
func Merge(old, want []metav1.Condition, now metav1.Time) ([]metav1.Condition, bool) {
	prev := make(map[string]metav1.Condition, len(old))
	for _, c := range old {
		prev[c.Type] = c
	}
	changed := len(old) != len(want)
	out := make([]metav1.Condition, len(want))
	for i, c := range want {
		p, ok := prev[c.Type]
		if ok && p.Status == c.Status {
			c.LastTransitionTime = p.LastTransitionTime
		} else {
			c.LastTransitionTime = now
		}
		if !ok || p != c {
			changed = true
		}
		out[i] = c
	}
	return out, changed
}
