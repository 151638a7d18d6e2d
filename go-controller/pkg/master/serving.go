package master

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// serving is the sync goroutine's memory of who serves which pod and how, kept
// current pod by pod so that a sync costs what changed: which EgressIP serves each
// pod (selection.Ranked.Serve), the pods each EgressIP serves, which pods claim
// each pod IP, each EgressIP's routes (nbstate.Routes) and what its selection
// depended on. A full sync rebuilds it from scratch with the same functions.
type serving struct {
	pods map[string]servedPod // pod key -> how it is served
	// servedIPs are, per pod key, the IPs its rows serve (after routes and claims);
	// servedBy is the inverse: the served-pods address sets.
	servedIPs map[string][]netip.Addr
	servedBy  map[netip.Addr]string
	eipPods   map[string]map[string]bool // EgressIP -> keys of the pods it serves
	claims    map[netip.Addr][]string    // pod IP -> keys of served pods having it (usually one)
	routes    map[string]map[string]nbstate.Route
	// kept are, per EgressIP, the spec IPs it keeps (keptIPs) as its routes were
	// last computed with: what a node they reroute to carries for it.
	kept map[string][]netip.Addr
	sigs map[string]selectionSig
	// selectors caches each EgressIP's selectors rendered as strings (for sigs),
	// per resourceVersion: rendering them for every EgressIP on every sync cost
	// more than the rest of a sync's selection work.
	selectors map[string]renderedSelectors
}

// servedPod is one selected pod: its EgressIP, namespace/name (for ordering) and IPs.
type servedPod struct {
	eip       string
	namespace string
	name      string
	ips       []netip.Addr
	node      string    // spec.nodeName: its zone in the interconnect layout
	created   time.Time // which of two pod objects sharing an IP owns it (selection.OwnsBefore)
}

// selectionSig is what an EgressIP's selection of pods depends on: a change means
// its pods, and the pods its selectors now match, are selected again.
type selectionSig struct {
	uid       types.UID
	assigned  bool // status has items (serving priority)
	created   time.Time
	selectors [2]string
}

type renderedSelectors struct {
	uid types.UID
	rv  string
	sel [2]string
}

func newServing() *serving {
	return &serving{
		pods: map[string]servedPod{}, servedIPs: map[string][]netip.Addr{}, servedBy: map[netip.Addr]string{}, eipPods: map[string]map[string]bool{}, claims: map[netip.Addr][]string{},
		routes: map[string]map[string]nbstate.Route{}, sigs: map[string]selectionSig{}, selectors: map[string]renderedSelectors{},
	}
}

// sigOf computes e's selectionSig, rendering its two selectors as text.
func sigOf(e *egressipv1.EgressIP) selectionSig {
	return selectionSig{uid: e.UID, assigned: len(e.Status.Items) > 0, created: e.CreationTimestamp.Time,
		selectors: [2]string{e.Spec.NamespaceSelector.String(), e.Spec.PodSelector.String()}}
}

// sigOf returns e's selectionSig as the function sigOf computes it, but renders
// the selectors only once per resourceVersion (an object without one, from a
// client that does not version, every time).
func (s *serving) sigOf(e *egressipv1.EgressIP) selectionSig {
	if c, ok := s.selectors[e.Name]; ok && e.ResourceVersion != "" && c.uid == e.UID && c.rv == e.ResourceVersion {
		return selectionSig{uid: e.UID, assigned: len(e.Status.Items) > 0, created: e.CreationTimestamp.Time, selectors: c.sel}
	}
	sig := sigOf(e)
	if e.ResourceVersion != "" {
		s.selectors[e.Name] = renderedSelectors{uid: e.UID, rv: e.ResourceVersion, sel: sig.selectors}
	}
	return sig
}

// podKey is the "namespace/name" of a pod: the key of informer caches and of NB rows.
func podKey(ns, name string) string { return ns + "/" + name }

// choose records that key is now served by eip ("" = by none; pod nil = gone),
// and reports whether that differs from before.
func (s *serving) choose(key string, pod *corev1.Pod, eip string) bool {
	old, had := s.pods[key]
	var ips []netip.Addr
	node := ""
	var created time.Time
	if eip != "" {
		ips = selection.PodIPs(pod)
		node = pod.Spec.NodeName
		created = pod.CreationTimestamp.Time
	}
	if had && old.eip == eip && slices.Equal(old.ips, ips) && old.node == node && old.created.Equal(created) {
		return false
	}
	if !had && eip == "" {
		return false
	}
	if had {
		delete(s.eipPods[old.eip], key)
		if len(s.eipPods[old.eip]) == 0 {
			delete(s.eipPods, old.eip)
		}
		for _, ip := range old.ips {
			s.unclaim(ip, key)
		}
		delete(s.pods, key)
	}
	if eip == "" {
		return true
	}
	ns, name, _ := strings.Cut(key, "/")
	s.pods[key] = servedPod{eip: eip, namespace: ns, name: name, ips: ips, node: node, created: created}
	if s.eipPods[eip] == nil {
		s.eipPods[eip] = map[string]bool{}
	}
	s.eipPods[eip][key] = true
	for _, ip := range ips {
		if !slices.Contains(s.claims[ip], key) {
			s.claims[ip] = append(s.claims[ip], key)
		}
	}
	return true
}

func (s *serving) unclaim(ip netip.Addr, key string) {
	list := slices.DeleteFunc(s.claims[ip], func(k string) bool { return k == key })
	if len(list) == 0 {
		delete(s.claims, ip)
		return
	}
	s.claims[ip] = list
}

// coClaimants adds to dirty every pod claiming one of ips (a pod that had or has
// them: which of the claimants has the rows may change; after a pod left, the
// one remaining claimant may be the new owner).
func (s *serving) coClaimants(ips []netip.Addr, dirty map[string]bool) {
	for _, ip := range ips {
		for _, k := range s.claims[ip] {
			dirty[k] = true
		}
	}
}

// winner reports whether pod key has the rows of ip: it is the pod object owning
// ip among the served pods having it (selection.Owner), and its EgressIP routes
// that family. Which EgressIP serves the others does not matter.
func (s *serving) winner(ip netip.Addr, key string) bool {
	list := s.claims[ip]
	if len(list) != 1 {
		claims := make([]selection.IPClaim, len(list))
		for i, k := range list {
			p := s.pods[k]
			claims[i] = selection.IPClaim{Namespace: p.namespace, Name: p.name, Created: p.created}
		}
		if i := selection.Owner(claims); i < 0 || list[i] != key {
			return false
		}
	} else if list[0] != key {
		return false
	}
	_, routed := s.routes[s.pods[key].eip][nbstate.Family(ip)]
	return routed
}

// rows adds the NB rows of pod key (none when it is not served) to into, and
// records the IPs they serve; it returns the served IPs before and after.
func (s *serving) rows(key string, mode gwmode.Mode, zone string, into *nbstate.State) (before, after []netip.Addr) {
	before = s.servedIPs[key]
	if p, ok := s.pods[key]; ok {
		var st nbstate.State
		st, after = nbstate.PodRows(mode, zone, p.eip, s.routes[p.eip], nbstate.Pod{Namespace: p.namespace, Name: p.name, IPs: p.ips, Node: p.node, Created: p.created},
			func(ip netip.Addr) bool { return s.winner(ip, key) })
		for k, v := range st.Policies {
			into.Policies[k] = v
		}
		for k, v := range st.NATs {
			into.NATs[k] = v
		}
	}
	for _, ip := range before {
		if s.servedBy[ip] == key {
			delete(s.servedBy, ip)
		}
	}
	for _, ip := range after {
		s.servedBy[ip] = key
	}
	if len(after) == 0 {
		delete(s.servedIPs, key)
	} else {
		s.servedIPs[key] = after
	}
	return before, after
}

// servedAddresses returns the served pod IPs of a family, sorted (the served-pods
// address set).
func (s *serving) servedAddresses(fam string) []string {
	out := []string{}
	for ip := range s.servedBy {
		if nbstate.Family(ip) == fam {
			out = append(out, ip.String())
		}
	}
	slices.Sort(out)
	return out
}

// sameRoutes compares two EgressIPs' routes per family.
func sameRoutes(a, b map[string]nbstate.Route) bool {
	if len(a) != len(b) {
		return false
	}
	for fam, r := range a {
		o, ok := b[fam]
		if !ok || !r.Equal(o) {
			return false
		}
	}
	return true
}
