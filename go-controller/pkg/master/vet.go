package master

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
)

// defaultDoubtGrace is how long a doubted node claim must last before it is
// reported: a node daemon updates its ready list a moment after an egress IP
// moves away from it, and that is no lie. The claim is not used meanwhile.
const defaultDoubtGrace = 5 * time.Second

// doubtKey identifies one doubted claim.
type doubtKey struct {
	node, field string
	ip          netip.Addr
	reason      assign.Reason
}

// doubts remembers the doubted claims: since when each is seen, and whether it
// was reported. Only the sync goroutine uses it.
type doubts struct {
	since    map[doubtKey]time.Time
	reported map[doubtKey]bool
}

func newDoubts() *doubts {
	return &doubts{since: map[doubtKey]time.Time{}, reported: map[doubtKey]bool{}}
}

// claimsOf is what node n claims about egress addresses (read once per
// resourceVersion, by nodeParser): its egress network, ready egress IPs, status
// addresses and host CIDRs.
func claimsOf(n *corev1.Node, f nodeFacts) assign.Claims {
	// Egress is zero when the egress config does not parse; a node whose only problem is another annotation
	// (such as a missing join IP) still claims its egress network address.
	c := assign.Claims{Node: n.Name, Ready: f.nb.ReadyEgressIPs, Egress: f.assign.Egress.Network,
		EgressField: annotations.PrimaryIfAddr}
	if f.hostReady != nil {
		// Interconnect, local gateway mode: the node daemon's own list is its claim (ReadyEgressIPs also needs
		// the zone's list, which a node claiming another's IP does not get).
		c.Ready = f.hostReady
	}
	if _, ok := n.Annotations[annotations.EgressIPConfig]; ok {
		c.EgressField = annotations.EgressIPConfig
	}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			c.Status = append(c.Status, ip.Unmap())
		}
	}
	//nolint:errcheck // unparsable: nothing claimed (NodeAddresses skips it too, and the node's own Event names it)
	c.HostCIDRs, _ = annotations.ParseHostCIDRs(n)
	return c
}

// report logs and records (a Warning Event on the Node) each doubt of found once it
// has lasted grace. It returns when the next report may be due (zero: none) and
// the doubts found now.
func (d *doubts) report(found []assign.Doubt, nodes []*corev1.Node, rec record.EventRecorder, now time.Time,
	grace time.Duration) (time.Duration, map[doubtKey]bool) {
	nodeByName := map[string]*corev1.Node{}
	for _, n := range nodes {
		nodeByName[n.Name] = n
	}
	var next time.Duration
	seen := map[doubtKey]bool{}
	for _, x := range found {
		k := doubtKey{x.Node, x.Field, x.IP, x.Reason}
		seen[k] = true
		first, ok := d.since[k]
		if !ok {
			first = now
			d.since[k] = now
		}
		if d.reported[k] {
			continue
		}
		if wait := first.Add(grace).Sub(now); wait > 0 {
			if next == 0 || wait < next {
				next = wait
			}
			continue
		}
		d.reported[k] = true
		klog.InfoS("Node claim not believed", "node", x.Node, "field", "metadata.annotations["+x.Field+"]", "ip", x.IP,
			"reason", x.Reason, "message", x.Message)
		if n := nodeByName[x.Node]; n != nil {
			rec.Event(nodeRef(n), corev1.EventTypeWarning, string(x.Reason), x.Message)
		}
	}
	return next, seen
}

// vetNodes takes out of facts what the nodes publish that cannot be true
// (vetFacts) and reports each such claim once it has lasted grace: a log line
// naming node, field and IP, and a Warning Event on the Node. It returns when the
// next report may be due (zero: none). holders come from the EgressIP status the
// master believes current.
func (d *doubts) vetNodes(nodes []*corev1.Node, facts []nodeFacts, eips []*egressipv1.EgressIP,
	status func(*egressipv1.EgressIP) []egressipv1.EgressIPStatusItem, rec record.EventRecorder, now time.Time, grace time.Duration) time.Duration {
	found := vetFacts(nodes, facts, statusHolders(eips, status))
	next, seen := d.report(found, nodes, rec, now, grace)
	// A moved IP's old holder still listing it ready is a fallback next hop
	// (nbstate.Lingers) only until the claim is reported: a node that never
	// publishes the end of its linger is not trusted past the grace.
	dropListed(nodes, facts, found, func(x assign.Doubt) bool { return d.reported[doubtKey{x.Node, x.Field, x.IP, x.Reason}] })
	for k := range d.since {
		if !seen[k] {
			if d.reported[k] {
				klog.InfoS("Node claim no longer doubted", "node", k.node, "field", "metadata.annotations["+k.field+"]", "ip", k.ip)
			}
			delete(d.since, k)
			delete(d.reported, k)
		}
	}
	return next
}

// statusHolders maps each egress IP in the status items of eips to the node holding it.
func statusHolders(eips []*egressipv1.EgressIP, status func(*egressipv1.EgressIP) []egressipv1.EgressIPStatusItem) map[netip.Addr]string {
	holders := map[netip.Addr]string{}
	for _, e := range eips {
		for _, it := range status(e) {
			if ip, err := netip.ParseAddr(it.EgressIP); err == nil {
				holders[ip.Unmap()] = it.Node
			}
		}
	}
	return holders
}

// vetFacts takes out of facts (those of nodes, in order) what the nodes publish
// that cannot be true (assign.Vet against holders: an egress network or host
// address that is another node's, an egress IP listed as ready by a node that does
// not hold it) and returns those claims. An IP listed ready that way stays in
// ListedReady (a linger fallback, nbstate.Lingers) until dropListed takes it out.
func vetFacts(nodes []*corev1.Node, facts []nodeFacts, holders map[netip.Addr]string) []assign.Doubt {
	claims := make([]assign.Claims, len(nodes))
	for i := range nodes {
		claims[i] = facts[i].claims
	}
	found := assign.Vet(claims, holders)
	byNode := map[string][]assign.Doubt{}
	for _, x := range found {
		byNode[x.Node] = append(byNode[x.Node], x)
	}
	for i, n := range nodes {
		ds := byNode[n.Name]
		if len(ds) == 0 {
			continue
		}
		facts[i].assign = assign.Distrust(facts[i].assign, ds)
		facts[i].nb.Addresses = facts[i].assign.Addresses
		for _, x := range ds {
			if x.Reason == assign.ReadyEgressIPNotHeld && facts[i].nb.ReadyEgressIPs[x.IP] {
				facts[i].nb.ReadyEgressIPs = without(facts[i].nb.ReadyEgressIPs, x.IP)
			}
		}
	}
	return found
}

// dropListed takes out of ListedReady the egress IPs of the ReadyEgressIPNotHeld
// claims of found that reported says are reported: the node is no longer a linger
// fallback for them.
func dropListed(nodes []*corev1.Node, facts []nodeFacts, found []assign.Doubt, reported func(assign.Doubt) bool) {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.Name] = i
	}
	for _, x := range found {
		i, ok := index[x.Node]
		if !ok || x.Reason != assign.ReadyEgressIPNotHeld || !facts[i].nb.ListedReady[x.IP] || !reported(x) {
			continue
		}
		facts[i].nb.ListedReady = without(facts[i].nb.ListedReady, x.IP)
	}
}

// without is set without ip, in a fresh map (facts share their maps with the
// parser's cache: they are replaced, never modified).
func without(set map[netip.Addr]bool, ip netip.Addr) map[netip.Addr]bool {
	out := make(map[netip.Addr]bool, len(set))
	for a, ok := range set {
		out[a] = ok && a != ip
	}
	return out
}

func nodeRef(n *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", Name: n.Name, UID: n.UID, APIVersion: "v1"}
}
