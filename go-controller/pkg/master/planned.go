package master

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// The rows a sync plans, computed from one read of the API (explain, `ovnkube
// egressip migrate`) with the sync's own stages' code: nodeParser and vetFacts
// (readNodes), zoneMemory.linger (decide, in a zone controller), plan in a full
// sync (planRows). What a sync keeps from one run to the next (how long a node claim
// has been doubted, what a zone's node released) cannot be read from the API: it
// is taken as vetAsReported and zoneRows say.

// vetAsReported is vetNodes without its memory, for a sync that believes the
// status items of eips (the master, the cluster manager): facts (those of nodes, in
// order) vetted against that status (vetFacts), every claim not believed taken as
// reported already (dropListed): the state the sync reaches defaultDoubtGrace after
// the claim appeared, which one read of the API cannot date.
func vetAsReported(nodes []*corev1.Node, facts []nodeFacts, eips []*egressipv1.EgressIP) {
	status := func(e *egressipv1.EgressIP) []egressipv1.EgressIPStatusItem { return e.Status.Items }
	found := vetFacts(nodes, facts, statusHolders(eips, status))
	dropListed(nodes, facts, found, func(assign.Doubt) bool { return true })
}

// nbNodesOf maps the nodes' NB facts by name, as readNodes does.
func nbNodesOf(facts []nodeFacts) map[string]nbstate.Node {
	out := make(map[string]nbstate.Node, len(facts))
	for _, f := range facts {
		out[f.assign.Name] = f.nb
	}
	return out
}

// programmedItems is the status items of every EgressIP as the API has them: what
// the rows follow (NB follows status).
func programmedItems(eips []*egressipv1.EgressIP) map[string][]egressipv1.EgressIPStatusItem {
	out := make(map[string][]egressipv1.EgressIPStatusItem, len(eips))
	for _, e := range eips {
		out[e.Name] = e.Status.Items
	}
	return out
}

// zoneRows is what the zone controller of zone plans (interconnect layout): the
// node facts as it reads them (its own node's ready list is its node daemon's;
// nothing vetted, no probe), its node's linger as a controller starting now takes
// it (zoneMemory.linger: the linger end its node published, by its zone in shared
// gateway mode, by its node daemon in local gateway mode; an IP the node still lists
// ready and does not hold as released now), and planAll.
func zoneRows(nodes []*corev1.Node, lay factsLayout, zone string, nb nbstate.Input, eips []*egressipv1.EgressIP, cache podCache) (nbstate.State, error) {
	lay.zone = zone
	nb.Zone = zone
	nb.Nodes = nbNodesOf(newNodeParser(lay, allReachable{}).parse(nodes))
	var zm zoneMemory
	zm.linger(zone, nb.Mode, defaultReleaseLinger, programmedItems(eips), nb.Nodes, nb.Now)
	rows, _, err := planAll(nb, eips, cache)
	return rows, err
}

// planAll is plan in a full sync, over a fresh serving memory: the rows of every
// pod of cache the EgressIPs eips (status as programmed) serve, with the shared
// rows and the served-pods address sets, and the memory (its routes are the ones
// the rows follow).
func planAll(nb nbstate.Input, eips []*egressipv1.EgressIP, cache podCache) (nbstate.State, *serving, error) {
	s := newServing()
	withStatus := asProgrammed(eips, programmedItems(eips))
	r, _, err := plan(s, planInput{full: true, nb: nb, eips: withStatus, rank: selection.Rank(withStatus), now: nb.Now, cache: cache})
	return r.desired, s, err
}

// objectCache is a podCache over maps: pods by key ("namespace/name"), namespaces
// by name (explain's read of the API; tests).
type objectCache struct {
	pods       map[string]*corev1.Pod
	namespaces map[string]*corev1.Namespace
}

func newObjectCache(pods []*corev1.Pod, namespaces []*corev1.Namespace) objectCache {
	c := objectCache{pods: make(map[string]*corev1.Pod, len(pods)), namespaces: make(map[string]*corev1.Namespace, len(namespaces))}
	for _, p := range pods {
		c.pods[podKey(p.Namespace, p.Name)] = p
	}
	for _, ns := range namespaces {
		c.namespaces[ns.Name] = ns
	}
	return c
}

func (c objectCache) Pod(ns, name string) (*corev1.Pod, error) { return c.pods[podKey(ns, name)], nil }

func (c objectCache) Pods() ([]*corev1.Pod, error) { return slices.Collect(maps.Values(c.pods)), nil }

func (c objectCache) PodsIn(ns string) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for _, p := range c.pods {
		if p.Namespace == ns {
			out = append(out, p)
		}
	}
	return out, nil
}

func (c objectCache) Namespace(name string) (*corev1.Namespace, error) {
	return c.namespaces[name], nil
}

func (c objectCache) Namespaces() ([]*corev1.Namespace, error) {
	return slices.Collect(maps.Values(c.namespaces)), nil
}
