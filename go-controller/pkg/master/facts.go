package master

import (
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
)

// nodeFacts is what one sync knows of a node, in the shapes of the pure packages.
type nodeFacts struct {
	assign assign.Node
	nb     nbstate.Node
	// readyErr: the EgressIPsReady annotation does not parse (local mode).
	readyErr error
	// hostReady (interconnect layout, local gateway mode) is the node daemon's
	// EgressIPsReady alone: what the node's own zone reroutes to its management
	// port by (nb.ReadyEgressIPs also needs the zone's EgressIPsSNATReady).
	hostReady map[netip.Addr]bool
	// claims are the node's address claims vetted against status (claimsOf).
	claims assign.Claims
	// daemonID is the node's annotations.EgressDaemonID ("" when absent).
	daemonID string
}

// parseNode reads a node's labels, conditions and annotations. A labelled node
// whose egress config or reroute next hop (join IP in shared mode, node subnet in
// local mode) does not parse gets assign.Node.ConfigErr, naming the annotation.
// In local mode it also reads the egress IPs the node reports ready (a holder
// becomes a reroute next hop only once its IP is there). reach is only asked
// about labelled nodes.
func parseNode(n *corev1.Node, mode gwmode.Mode, reach Reachability) nodeFacts {
	return parseNodeIn(n, factsLayout{mode: mode}, reach)
}

// factsLayout is how node facts are read: the gateway mode and, in the
// interconnect layout, the join subnets the gateway router join IP is derived in.
type factsLayout struct {
	mode         gwmode.Mode
	interconnect bool
	joins        []netip.Prefix
	// zone is the zone controller's own node (empty elsewhere): in local gateway
	// mode its ready list is its node daemon's alone, since the zone's own
	// EgressIPsSNATReady says what this zone has committed.
	zone string
}

// parseNodeIn is parseNode for a layout. In the interconnect layout the gateway
// router join IP comes from k8s.ovn.org/node-id (no fallback to the deprecated
// annotation), the transit switch IPs are read, and a labelled node missing either
// cannot host egress IPs (its error names the annotation); the ready list is the
// zone's SNAT-ready list in shared gateway mode, the node daemon's in local mode,
// and the lingering list is read too.
func parseNodeIn(n *corev1.Node, lay factsLayout, reach Reachability) nodeFacts {
	mode := lay.mode
	f := nodeFacts{
		assign: assign.Node{
			Name:      n.Name,
			Addresses: annotations.NodeAddresses(n),
			Labelled:  annotations.IsEgressAssignable(n),
			Ready:     annotations.IsReady(n),
			Labels:    n.Labels,
		},
		nb: nbstate.Node{Name: n.Name},
	}
	f.nb.Addresses = f.assign.Addresses
	if f.assign.Labelled {
		f.assign.Reachable = reach.Reachable(n.Name)
	}
	var errs []error
	cfg, err := annotations.ParseEgressConfig(n)
	if err != nil {
		errs = append(errs, err)
	}
	f.assign.Egress = cfg
	var errGR error
	if lay.interconnect {
		f.nb.JoinIPs, errGR = annotations.GatewayRouterJoinIPs(n, lay.joins, false)
		var errTS error
		if f.nb.TransitIPs, errTS = annotations.ParseTransitIPs(n); errTS != nil {
			errs = append(errs, errTS)
		}
	} else {
		gr, err := annotations.ParseGatewayRouterIPs(n)
		errGR = err
		for _, p := range gr.Prefixes() {
			f.nb.JoinIPs = append(f.nb.JoinIPs, p.Addr())
		}
	}
	subnets, errSubnets := annotations.ParseNodeSubnets(n)
	for _, s := range subnets {
		f.nb.ManagementIPs = append(f.nb.ManagementIPs, annotations.ManagementIP(s))
	}
	if (mode == gwmode.Shared || lay.interconnect) && errGR != nil {
		errs = append(errs, errGR)
	}
	if mode == gwmode.Local && errSubnets != nil {
		errs = append(errs, errSubnets)
	}
	switch {
	case lay.interconnect && mode == gwmode.Shared:
		// The holder's zone controller lists what it has programmed (SNATs) and,
		// for an IP it released, the end of the linger it published (nbstate.Lingers):
		// every zone reads the same end, so a restarted zone keeps no linger of its
		// own. The lingering list as written is kept for the zone's own node: an IP
		// listed there without an end is taken as released now (zoneMemory.linger).
		ready, err := annotations.ParseIPList(n, annotations.EgressIPsSNATReady)
		listed, errList := annotations.ParseIPList(n, annotations.EgressIPsLingering)
		until, errL := annotations.ParseLingering(n)
		if errList != nil {
			errL = errList // ParseLingering returns the same error: reported once
		}
		f.nb.ReadyEgressIPs, f.nb.ListedReady, f.nb.LingeringUntil, f.nb.LingeringEgressIPs = ready, ready, until, listed
		f.readyErr = errors.Join(err, errL)
	case lay.interconnect && mode == gwmode.Local:
		// Both halves of the holder: its node daemon's address and iptables SNAT
		// (EgressIPsReady) and its zone's reroutes of the IP's pods to its management
		// port (EgressIPsSNATReady, written by its zone controller after the commit).
		// Traffic another zone reroutes here before that commit meets no reroute and
		// leaves through the gateway router with its address.
		// The zone's own node: its node daemon's list alone (what it publishes
		// follows from its own commit).
		host, err := annotations.ParseEgressIPsReady(n)
		zone, errZ := annotations.ParseIPList(n, annotations.EgressIPsSNATReady)
		// What its node daemon still SNATs after a release, until the end it
		// published (nbstate.Lingers), as in the centralized layout: every zone
		// reads the same end, so a restarted zone keeps no linger of its own.
		until, errL := annotations.ParseLingering(n)
		f.hostReady, f.nb.ReadyEgressIPs, f.nb.LingeringUntil = host, bothReady(host, zone), until
		f.nb.ListedReady = host // a daemon still listing a moved IP still SNATs it (nbstate.Lingers)
		f.readyErr = errors.Join(err, errZ, errL)
		if n.Name == lay.zone {
			f.nb.ReadyEgressIPs, f.readyErr = host, errors.Join(err, errL)
		}
	case mode == gwmode.Local:
		// Absent: the node has listed nothing ready yet (new, restarting, or its
		// write not in our cache yet). Unparsable: nothing is ready there (the
		// error names the annotation). Readiness is never assumed.
		ready, err := annotations.ParseEgressIPsReady(n)
		f.nb.ReadyEgressIPs = ready
		f.readyErr = err
		if !lay.interconnect {
			// What it still SNATs after a release, until the end it published
			// (nbstate.Lingers); an IP without a parsable end is not lingering.
			until, errL := annotations.ParseLingering(n)
			f.nb.LingeringUntil = until
			f.nb.ListedReady = ready // kept as written: vetNodes replaces ReadyEgressIPs
			f.readyErr = errors.Join(err, errL)
		}
	}
	f.assign.ConfigErr = errors.Join(errs...)
	f.claims = claimsOf(n, f)
	f.daemonID = n.Annotations[annotations.EgressDaemonID]
	return f
}

// trustDaemon is f as the master may use it now: in local gateway mode, when the
// node's latest passed health probe came from another daemon than the one that
// wrote its annotations (DaemonIdentity; the daemon restarted and the master's
// cache does not hold what the new one published yet), what the node lists about
// egress IPs it is not assigned is not believed: none is still listed ready nor
// lingering, so it is no next hop for an IP that moved away (the new daemon may
// have dropped rules the old one listed). Its readiness for the IPs it is assigned
// stays (vetNodes keeps only those in ReadyEgressIPs): the new daemon answers
// probes only after its first sync programmed them, and dropping them would leave
// the pods with no holder for the time of a watch event. A probe without an
// identity (an older daemon) changes nothing. f's maps are shared with the
// parser's cache: they are replaced, never modified.
// It also returns the probed identity when it differs ("" when f is trusted).
func trustDaemon(f nodeFacts, mode gwmode.Mode, reach Reachability) (nodeFacts, string) {
	di, ok := reach.(DaemonIdentity)
	if !ok || mode != gwmode.Local {
		return f, ""
	}
	probed := di.DaemonID(f.assign.Name)
	if probed == "" || probed == f.daemonID {
		return f, ""
	}
	f.nb.ListedReady, f.nb.LingeringUntil = nil, nil
	return f, probed
}

// nodeParser parses each node once per resourceVersion: every sync reads every
// node, and most syncs come from pod events (at 100 nodes, parsing their
// annotations on every sync was a third of the master's CPU while pods were
// added one at a time). Reachability is asked again on every call. The facts
// returned share their maps and slices with the cache: callers replace, never
// modify them (vetNodes and assign.Distrust copy).
type nodeParser struct {
	lay   factsLayout
	reach Reachability
	seen  map[string]parsedNode
	// stale is the probed daemon identity a node's annotations were last found
	// older than (trustDaemon), so that it is logged once.
	stale map[string]string
}

type parsedNode struct {
	uid   types.UID
	rv    string
	facts nodeFacts
}

func newNodeParser(lay factsLayout, reach Reachability) *nodeParser {
	return &nodeParser{lay: lay, reach: reach, seen: map[string]parsedNode{}, stale: map[string]string{}}
}

// parse returns the facts of nodes, in order, and forgets nodes not among them.
func (p *nodeParser) parse(nodes []*corev1.Node) []nodeFacts {
	out := make([]nodeFacts, len(nodes))
	names := make(map[string]bool, len(nodes))
	for i, n := range nodes {
		names[n.Name] = true
		c, ok := p.seen[n.Name]
		if !ok || n.ResourceVersion == "" || c.uid != n.UID || c.rv != n.ResourceVersion {
			c = parsedNode{uid: n.UID, rv: n.ResourceVersion, facts: parseNodeIn(n, p.lay, p.reach)}
			p.seen[n.Name] = c
		} else if c.facts.assign.Labelled {
			c.facts.assign.Reachable = p.reach.Reachable(n.Name)
		}
		out[i] = p.trust(c.facts)
	}
	for name := range p.seen {
		if !names[name] {
			delete(p.seen, name)
			delete(p.stale, name)
		}
	}
	return out
}

// trust applies trustDaemon and logs, once per probed identity, a node whose
// facts are its previous daemon's.
func (p *nodeParser) trust(f nodeFacts) nodeFacts {
	out, probed := trustDaemon(f, p.lay.mode, p.reach)
	name := f.assign.Name
	switch {
	case probed == "":
		delete(p.stale, name)
	case p.stale[name] != probed:
		p.stale[name] = probed
		klog.InfoS("Node daemon restarted: egress IPs it is not assigned count as neither ready nor lingering there until the master sees what the new daemon published",
			"node", name, "annotation", annotations.EgressDaemonID, "annotated", f.daemonID, "probed", probed)
	}
	return out
}

// toAssign converts an EgressIP (with the status the master believes current).
func toAssign(eip *egressipv1.EgressIP, items []egressipv1.EgressIPStatusItem) assign.EgressIP {
	out := claimOf(eip, items)
	if eip.Spec.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(eip.Spec.NodeSelector)
		if err != nil {
			out.NodeSelectorErr = fmt.Errorf("spec.nodeSelector: %w", err)
		} else {
			out.NodeSelector = sel
		}
	}
	return out
}

// claimOf is eip with status items as the claim rule reads it (assign.Kept): its
// name, age, spec and status, without the node selector (toAssign adds it).
func claimOf(eip *egressipv1.EgressIP, items []egressipv1.EgressIPStatusItem) assign.EgressIP {
	out := assign.EgressIP{
		Name:    eip.Name,
		Created: eip.CreationTimestamp.Time,
		Spec:    eip.Spec.EgressIPs,
	}
	for _, it := range items {
		out.Status = append(out.Status, assign.Item{Node: it.Node, EgressIP: it.EgressIP})
	}
	return out
}

func toStatusItems(items []assign.Item) []egressipv1.EgressIPStatusItem {
	var out []egressipv1.EgressIPStatusItem
	for _, it := range items {
		out = append(out, egressipv1.EgressIPStatusItem{Node: it.Node, EgressIP: it.EgressIP})
	}
	return out
}

func sameItems(a, b []egressipv1.EgressIPStatusItem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// toNB converts an EgressIP with its programmed status items.
func toNB(name string, items []egressipv1.EgressIPStatusItem) nbstate.EgressIP {
	e := nbstate.EgressIP{Name: name}
	for _, it := range items {
		if ip, err := netip.ParseAddr(it.EgressIP); err == nil {
			e.Assigned = append(e.Assigned, nbstate.Assignment{Node: it.Node, IP: ip})
		}
	}
	return e
}

// bothReady is the egress IPs in both sets, in a fresh map.
func bothReady(host, zone map[netip.Addr]bool) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for ip := range host {
		if zone[ip] {
			out[ip] = true
		}
	}
	return out
}
