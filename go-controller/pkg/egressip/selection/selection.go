// Package selection decides which pods each EgressIP serves. It is the one
// place this rule lives: the master (NB rows), the node daemon (host SNAT rules)
// and explain call it, and the master's and node daemon's pod informers keep
// and react to the same pod fields (TrimPod, PodServingChanged). The rule gives
// one answer for one set of objects; but the master and the node daemon each
// read their own informer caches, so between an API change and both caches
// seeing it they can disagree.
// Everything here is pure: no clients, no clock.
package selection

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
)

// PodIPs returns the pod's IPs from status.podIPs (falling back to status.podIP),
// skipping unparsable entries. IPv4-mapped IPv6 addresses are unmapped.
func PodIPs(pod *corev1.Pod) []netip.Addr {
	var raw []string
	for _, p := range pod.Status.PodIPs {
		raw = append(raw, p.IP)
	}
	if len(raw) == 0 && pod.Status.PodIP != "" {
		raw = []string{pod.Status.PodIP}
	}
	out := make([]netip.Addr, 0, len(raw))
	for _, s := range raw {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// PodServable reports whether a pod can be served by any EgressIP: it is not on the
// host network, has at least one IP, and has not completed (Succeeded/Failed).
func PodServable(pod *corev1.Pod) bool {
	if pod.Spec.HostNetwork {
		return false
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return false
	}
	return len(PodIPs(pod)) > 0
}

// ReasonInvalidSelector is the reason, in Events and logs, for an EgressIP whose
// namespaceSelector or podSelector does not compile (Compile's error): it serves
// no pod. The Event is the master's (cluster manager's) alone; node daemons log it.
const ReasonInvalidSelector = "InvalidSelector"

// Selector is an EgressIP's compiled namespaceSelector AND podSelector.
type Selector struct {
	namespace labels.Selector
	pod       labels.Selector
}

// Compile turns the EgressIP's selectors into a Selector. The error names the
// field (spec.namespaceSelector or spec.podSelector) and the problem.
func Compile(eip *egressipv1.EgressIP) (Selector, error) {
	ns, err := metav1.LabelSelectorAsSelector(&eip.Spec.NamespaceSelector)
	if err != nil {
		return Selector{}, fmt.Errorf("EgressIP %s: spec.namespaceSelector: %w", eip.Name, err)
	}
	pod, err := metav1.LabelSelectorAsSelector(&eip.Spec.PodSelector)
	if err != nil {
		return Selector{}, fmt.Errorf("EgressIP %s: spec.podSelector: %w", eip.Name, err)
	}
	return Selector{namespace: ns, pod: pod}, nil
}

// MatchesNamespace reports whether the namespace is selected.
func (s Selector) MatchesNamespace(ns *corev1.Namespace) bool {
	return s.namespace.Matches(labels.Set(ns.Labels))
}

// Matches reports whether pod (in namespace ns) is selected by both selectors.
// It does not check PodServable.
func (s Selector) Matches(ns *corev1.Namespace, pod *corev1.Pod) bool {
	return s.MatchesNamespace(ns) && s.pod.Matches(labels.Set(pod.Labels))
}

// Ordered returns the EgressIPs in serving priority, the order in which they claim
// pods matched by several of them: those with at least one assigned IP
// (status.items not empty) first, then the oldest creationTimestamp, then name.
// The input slice is not modified.
func Ordered(eips []*egressipv1.EgressIP) []*egressipv1.EgressIP {
	out := append([]*egressipv1.EgressIP(nil), eips...)
	sort.SliceStable(out, func(i, j int) bool {
		ai, aj := len(out[i].Status.Items) > 0, len(out[j].Status.Items) > 0
		if ai != aj {
			return ai
		}
		ti, tj := out[i].CreationTimestamp.Time, out[j].CreationTimestamp.Time
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Result is the outcome of ServedPods.
type Result struct {
	// Served maps an EgressIP name to the pods it serves, sorted by namespace/name.
	// Every EgressIP of the input has an entry (possibly empty) unless it is in Errors.
	Served map[string][]*corev1.Pod
	// Errors maps an EgressIP name to the reason it serves nothing (bad selector).
	Errors map[string]error
}

// Ranked are EgressIPs in serving priority (Ordered) with their compiled selectors:
// the one rule that decides which EgressIP serves a pod, for a whole cluster
// (ServedPods) or one pod at a time (Serve).
type Ranked struct {
	// Names in serving priority; only EgressIPs whose selectors compile.
	Names []string
	// Errors maps an EgressIP name to the reason it serves nothing (bad selector).
	Errors map[string]error
	sels   []Selector
	rank   map[string]int
}

// Rank orders eips (Ordered) and compiles their selectors.
func Rank(eips []*egressipv1.EgressIP) Ranked { return NewCompiler().Rank(eips) }

// Compiler compiles EgressIP selectors and remembers each EgressIP's last
// compilation, so that a controller ranking every EgressIP on every event compiles
// only those whose selectors changed (compiling validates every label key and
// value with regular expressions: at 200 EgressIPs it was a seventh of the
// master's CPU while pods were added). Not safe for concurrent use.
type Compiler struct {
	memo map[string]compiled
}

type compiled struct {
	namespace, pod metav1.LabelSelector // deep copies of what was compiled
	sel            Selector
	err            error
}

// NewCompiler returns a Compiler that remembers nothing yet.
func NewCompiler() *Compiler { return &Compiler{memo: map[string]compiled{}} }

// Compile returns what the function Compile returns for eip, compiling only when
// eip's selectors differ from the last ones compiled under its name.
func (c *Compiler) Compile(eip *egressipv1.EgressIP) (Selector, error) {
	if m, ok := c.memo[eip.Name]; ok && sameSelector(m.namespace, eip.Spec.NamespaceSelector) && sameSelector(m.pod, eip.Spec.PodSelector) {
		return m.sel, m.err
	}
	sel, err := Compile(eip)
	c.memo[eip.Name] = compiled{namespace: *eip.Spec.NamespaceSelector.DeepCopy(), pod: *eip.Spec.PodSelector.DeepCopy(), sel: sel, err: err}
	return sel, err
}

// sameSelector is equality.Semantic.DeepEqual of two label selectors (nil and
// empty alike), without reflection: Rank compares every EgressIP's on every sync.
func sameSelector(a, b metav1.LabelSelector) bool {
	return maps.Equal(a.MatchLabels, b.MatchLabels) && slices.EqualFunc(a.MatchExpressions, b.MatchExpressions,
		func(x, y metav1.LabelSelectorRequirement) bool {
			return x.Key == y.Key && x.Operator == y.Operator && slices.Equal(x.Values, y.Values)
		})
}

// Rank returns what the function Rank returns for eips, compiling through c
// (Compiler.Compile); c forgets the EgressIPs not in eips.
func (c *Compiler) Rank(eips []*egressipv1.EgressIP) Ranked {
	r := Ranked{Errors: map[string]error{}, rank: map[string]int{}}
	names := make(map[string]bool, len(eips))
	for _, eip := range eips {
		names[eip.Name] = true
	}
	for name := range c.memo {
		if !names[name] {
			delete(c.memo, name)
		}
	}
	for _, eip := range Ordered(eips) {
		sel, err := c.Compile(eip)
		if err != nil {
			r.Errors[eip.Name] = err
			continue
		}
		r.rank[eip.Name] = len(r.Names)
		r.Names = append(r.Names, eip.Name)
		r.sels = append(r.sels, sel)
	}
	return r
}

// Rank returns the serving priority of an EgressIP (0 first) and whether it serves at all.
func (r Ranked) Rank(name string) (int, bool) {
	i, ok := r.rank[name]
	return i, ok
}

// SelectsNamespace reports whether the EgressIP of rank i selects namespace ns.
func (r Ranked) SelectsNamespace(i int, ns *corev1.Namespace) bool {
	return r.sels[i].MatchesNamespace(ns)
}

// Serve returns the EgressIP that serves pod (in namespace ns, nil when unknown):
// the first in priority whose selectors match a servable pod; "" when none.
func (r Ranked) Serve(ns *corev1.Namespace, pod *corev1.Pod) string {
	return r.serve(ns, pod, nil)
}

// serve is Serve with an optional memo of namespace matches per rank.
func (r Ranked) serve(ns *corev1.Namespace, pod *corev1.Pod, nsMatch []map[string]bool) string {
	if ns == nil || !PodServable(pod) {
		return ""
	}
	podLabels := labels.Set(pod.Labels)
	for i, sel := range r.sels {
		var m, seen bool
		if nsMatch != nil {
			m, seen = nsMatch[i][ns.Name]
		}
		if !seen {
			m = sel.MatchesNamespace(ns)
			if nsMatch != nil {
				nsMatch[i][ns.Name] = m
			}
		}
		if m && sel.pod.Matches(podLabels) {
			return r.Names[i]
		}
	}
	return ""
}

// ServedPods assigns every servable pod to at most one EgressIP: the first, in
// Ordered order, whose selectors match it (Ranked.Serve). namespaces is keyed by
// name; pods whose namespace is unknown are skipped. EgressIPs with invalid
// selectors serve nothing and are reported in Result.Errors; they never take pods
// from valid ones.
func ServedPods(eips []*egressipv1.EgressIP, namespaces map[string]*corev1.Namespace, pods []*corev1.Pod) Result {
	r := Rank(eips)
	res := Result{Served: map[string][]*corev1.Pod{}, Errors: r.Errors}
	for _, name := range r.Names {
		res.Served[name] = nil
	}
	if len(r.Names) == 0 {
		return res
	}
	// Namespace matches are computed once per (EgressIP, namespace).
	nsMatch := make([]map[string]bool, len(r.Names))
	for i := range nsMatch {
		nsMatch[i] = map[string]bool{}
	}
	for _, pod := range pods {
		if name := r.serve(namespaces[pod.Namespace], pod, nsMatch); name != "" {
			res.Served[name] = append(res.Served[name], pod)
		}
	}
	for _, list := range res.Served {
		sort.Slice(list, func(i, j int) bool {
			if list[i].Namespace != list[j].Namespace {
				return list[i].Namespace < list[j].Namespace
			}
			return list[i].Name < list[j].Name
		})
	}
	return res
}
