package master

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/selection"
)

// ExplainInput is a read of the cluster (API objects, and NB when given) that
// Explain works on. Explain is pure: it computes "why" with the master's own
// functions (nodeParser, vetFacts, assign.Assign, conditions.Compute, selection),
// and the rows NB should hold with the sync's own planning (plan, planned.go).
type ExplainInput struct {
	Mode           gwmode.Mode
	ClusterSubnets []netip.Prefix
	JoinSubnets    []netip.Prefix
	EgressIPs      []*egressipv1.EgressIP
	Nodes          []*corev1.Node
	Namespaces     []*corev1.Namespace
	Pods           []*corev1.Pod
	// Reachable: nil means not probed (every labelled node taken as reachable).
	Reachable Reachability
	// NB is what NB holds of our rows (nil: not read).
	NB *nbstate.Current
	// ZoneNB (interconnect layout) is what each zone's NB holds of our rows, by
	// zone (node) name; nil in the centralized layout. Each zone's rows are compared
	// with what that zone's controller plans (zoneRows).
	ZoneNB map[string]*nbstate.Current
	// Now is the time published linger ends are compared with (zero: the time of
	// the call).
	Now time.Time
	// GatewaySNAT maps a gateway router name to its SNAT rows that are not ours
	// (the node's own SNAT of the cluster subnet), to tell unserved pods' source.
	GatewaySNAT map[string][]NATRow
}

// NATRow is one SNAT row of a gateway router.
type NATRow struct {
	ExternalIP, LogicalIP string
}

// EgressIPReport is Explain's answer for one EgressIP.
type EgressIPReport struct {
	Name        string                  `json:"name"`
	Spec        egressipv1.EgressIPSpec `json:"spec"`
	Ready       *metav1.Condition       `json:"ready,omitempty"` // as written in status by the master
	Assigned    string                  `json:"assigned"`        // as written in status
	Computed    *metav1.Condition       `json:"computed"`        // Ready as computed now from the same inputs
	IPs         []IPReport              `json:"ips"`
	Served      []PodRef                `json:"served"`
	ServedOther []PodRef                `json:"selectedServedByOther,omitempty"`
	SelectorErr string                  `json:"selectorError,omitempty"`
	NB          *RowsReport             `json:"nb,omitempty"`
	Hosts       []HostReport            `json:"hosts,omitempty"`
	Notes       []string                `json:"notes,omitempty"`
}

// IPReport is one requested IP: its holder (status) or why it has none.
type IPReport struct {
	IP      string       `json:"ip"`
	Holder  string       `json:"holder,omitempty"`
	Reason  string       `json:"reason"`
	Message string       `json:"message"`
	Nodes   []NodeReport `json:"nodes"`
}

// NodeReport says why a labelled node is or is not a candidate for one IP.
type NodeReport struct {
	Node    string `json:"node"`
	Verdict string `json:"verdict"`
}

// PodRef is a pod with its IPs and node; ServedBy is set for pods served by
// another EgressIP.
type PodRef struct {
	Pod      string   `json:"pod"`
	IPs      []string `json:"ips"`
	Node     string   `json:"node"`
	ServedBy string   `json:"servedBy,omitempty"`
}

// RowsReport compares the NB rows of one EgressIP with what should be there.
type RowsReport struct {
	Present []string `json:"present"`
	Missing []string `json:"missing"`
	Extra   []string `json:"extra"`
}

// HostReport (local gateway mode) is what a holder reports programmed on its host
// (its egress-ips-ready annotation) for this EgressIP's IPs.
type HostReport struct {
	Node    string   `json:"node"`
	Ready   []string `json:"ready"`
	Missing []string `json:"missing,omitempty"`
	Note    string   `json:"note,omitempty"`
}

// PodReport is Explain's answer for one pod.
type PodReport struct {
	Pod      string   `json:"pod"`
	IPs      []string `json:"ips"`
	Node     string   `json:"node"`
	ServedBy string   `json:"servedBy,omitempty"`
	// Via are the egress IPs with the node holding each ("ip@node") that carry
	// the pod's traffic now.
	Via []string `json:"via,omitempty"`
	// Sources are the addresses the outside world sees (one of them, per flow);
	// empty when the traffic is dropped (strict).
	Sources []string `json:"sources"`
	// Lingering (local gateway mode) are the nodes that carry the pod's traffic
	// in their release linger: no holder of the family is ready, and they still
	// SNAT an egress IP they released (nbstate.Lingers).
	Lingering []LingerReport `json:"lingering,omitempty"`
	Why       string         `json:"why"`
}

// LingerReport is a node that still SNATs an egress IP it no longer holds, by
// its published facts, and until when ("" while it still lists the IP ready and
// has not published the end yet).
type LingerReport struct {
	Node  string `json:"node"`
	IP    string `json:"ip"`
	Until string `json:"until,omitempty"`
}

func (l LingerReport) String() string {
	s := "node " + l.Node + " still SNATs " + l.IP + " in its release linger"
	if l.Until == "" {
		return s + " (it still lists it in " + annotations.EgressIPsReady + "; the end is not published yet)"
	}
	return s + " until " + l.Until + " (" + annotations.EgressIPsLingeringUntil + ")"
}

// lingerReports are the LingerHolders of ne for fam, with their ends.
func lingerReports(in nbstate.Input, ne nbstate.EgressIP, fam string) []LingerReport {
	var out []LingerReport
	for _, h := range nbstate.LingerHolders(in, ne, fam) {
		l := LingerReport{Node: h.Node, IP: h.EgressIP.String()}
		if _, until := nbstate.Lingers(in.Nodes[h.Node], h.EgressIP, in.Now); !until.IsZero() {
			l.Until = until.UTC().Format(time.RFC3339Nano)
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node+out[i].IP < out[j].Node+out[j].IP })
	return out
}

// explainState is what Explain computes once for all EgressIPs.
type explainState struct {
	in   ExplainInput
	mode gwmode.Mode
	lay  factsLayout
	// nodes are the node facts as the master (or the cluster manager) reads them,
	// vetted (vetAsReported); claimed are the same unvetted: what each node says.
	nodes    map[string]nodeFacts
	claimed  map[string]nodeFacts
	nbNodes  map[string]nbstate.Node
	res      assign.Result
	problems map[string][]assign.Problem
	assignIn map[string]assign.EgressIP
	rank     selection.Ranked
	ns       map[string]*corev1.Namespace
	served   selection.Result
	// kept are the spec IPs each EgressIP keeps, as the sync plans its routes with
	// them (keptIPs over the status in the API): their lingering holders are its
	// fallback, those of an IP another EgressIP keeps are not.
	kept map[string][]netip.Addr
	// rows are the rows the sync plans, by zone ("": the centralized master's),
	// for the zones planRows was asked.
	rows map[string]nbstate.State
}

func newExplainState(in ExplainInput) *explainState {
	st := &explainState{in: in, mode: in.Mode, nodes: map[string]nodeFacts{}, claimed: map[string]nodeFacts{},
		problems: map[string][]assign.Problem{}, assignIn: map[string]assign.EgressIP{}, ns: map[string]*corev1.Namespace{},
		rows: map[string]nbstate.State{}}
	reach := in.Reachable
	if reach == nil {
		reach = allReachable{}
	}
	var an []assign.Node
	st.lay = factsLayout{mode: st.mode, interconnect: in.ZoneNB != nil, joins: in.JoinSubnets}
	claimed := newNodeParser(st.lay, reach).parse(in.Nodes)
	facts := slices.Clone(claimed)
	vetAsReported(in.Nodes, facts, in.EgressIPs) // the master and the cluster manager assign over vetted facts
	st.nbNodes = nbNodesOf(facts)
	for i, f := range facts {
		st.nodes[f.assign.Name], st.claimed[f.assign.Name] = f, claimed[i]
		an = append(an, f.assign)
	}
	var ae []assign.EgressIP
	for _, e := range in.EgressIPs {
		a := toAssign(e, e.Status.Items)
		st.assignIn[e.Name] = a
		ae = append(ae, a)
	}
	st.res = assign.Assign(ae, an)
	st.kept = keptIPs(in.EgressIPs, st.nbNodes)
	for _, p := range st.res.Problems {
		st.problems[p.EgressIP] = append(st.problems[p.EgressIP], p)
	}
	st.rank = selection.Rank(in.EgressIPs)
	for _, ns := range in.Namespaces {
		st.ns[ns.Name] = ns
	}
	st.served = selection.ServedPods(in.EgressIPs, st.ns, in.Pods)
	return st
}

// ExplainEgressIP explains EgressIP name; an error when it does not exist.
func ExplainEgressIP(in ExplainInput, name string) (*EgressIPReport, error) {
	st := newExplainState(in)
	var eip *egressipv1.EgressIP
	for _, e := range in.EgressIPs {
		if e.Name == name {
			eip = e
		}
	}
	if eip == nil {
		return nil, fmt.Errorf("EgressIP %s not found", name)
	}
	if err := st.planRows(st.comparedZones()); err != nil {
		return nil, err
	}
	r := &EgressIPReport{Name: name, Spec: eip.Spec, Assigned: eip.Status.Assigned,
		Ready: meta.FindStatusCondition(eip.Status.Conditions, conditions.TypeReady)}

	// What the master would write now: items as computed, programmed as far as
	// NB (shared) or the holders' annotations (local) show.
	items := toStatusItems(st.res.Status[name])
	if !sameItems(items, eip.Status.Items) {
		r.Notes = append(r.Notes, fmt.Sprintf("status.items %s differ from what assignment computes now %s (the master has not synced since, or sees a node differently, e.g. its reachability)",
			describe(eip.Status.Items), describe(items)))
	}
	r.IPs = st.ipReports(eip)
	st.podReports(r, eip)
	notProg := st.programmed(r, eip)
	_, conds := conditions.Compute(conditions.Input{Generation: eip.Generation, Spec: eip.Spec.EgressIPs, Items: eip.Status.Items,
		Problems: st.problems[name], NotProgrammed: notProg, Strict: eip.Spec.Strict})
	r.Computed = &conds[0]
	if in.Reachable == nil {
		r.Notes = append(r.Notes, "node reachability not probed (--probe): every labelled node is taken as reachable")
	}
	return r, nil
}

// ipReports says, for each IP of eip's spec, who holds it or why nobody does, and
// each labelled node's verdict on it.
func (st *explainState) ipReports(eip *egressipv1.EgressIP) []IPReport {
	name := eip.Name
	var out []IPReport
	held := map[string]string{}
	for _, it := range eip.Status.Items {
		held[it.EgressIP] = it.Node
	}
	problems := map[int]assign.Problem{}
	for _, p := range st.problems[name] {
		problems[p.Index] = p
	}
	ae := st.assignIn[name]
	labelled := st.labelledNodes()
	for i, raw := range eip.Spec.EgressIPs {
		ir := IPReport{IP: raw, Holder: held[raw]}
		switch p, bad := problems[i]; {
		case ir.Holder != "":
			ir.Reason, ir.Message = conditions.ReasonAssigned, raw+" is held by node "+ir.Holder
		case bad:
			ir.Reason, ir.Message = string(p.Cause), p.Message
		default:
			ir.Reason, ir.Message = conditions.ReasonUnknown, "not in status and no problem computed (the master has not synced yet?)"
		}
		if addr, reason, _ := assign.ParseEgressIP(raw); reason == "" {
			for _, n := range labelled {
				ir.Nodes = append(ir.Nodes, NodeReport{Node: n, Verdict: st.nodeVerdict(&ae, eip, n, addr)})
			}
		}
		out = append(out, ir)
	}

	return out
}

// podReports lists the pods eip serves and those it selects that another EgressIP
// serves.
func (st *explainState) podReports(r *EgressIPReport, eip *egressipv1.EgressIP) {
	name, in := eip.Name, st.in
	if err, bad := st.served.Errors[name]; bad {
		r.SelectorErr = err.Error()
	}
	for _, p := range st.served.Served[name] {
		r.Served = append(r.Served, podRef(p, ""))
	}
	if sel, err := selection.Compile(eip); err == nil {
		for _, p := range in.Pods {
			ns := st.ns[p.Namespace]
			if ns == nil || !selection.PodServable(p) || !sel.Matches(ns, p) {
				continue
			}
			if by := st.rank.Serve(ns, p); by != name {
				r.ServedOther = append(r.ServedOther, podRef(p, by))
			}
		}
		sort.Slice(r.ServedOther, func(i, j int) bool { return r.ServedOther[i].Pod < r.ServedOther[j].Pod })
	}

}

// programmed compares the rows (and, in local gateway mode, the holders' host
// state) with what eip needs, into r, and returns the egress IPs not programmed
// with why (conditions.Input.NotProgrammed).
func (st *explainState) programmed(r *EgressIPReport, eip *egressipv1.EgressIP) map[string]string {
	name, in := eip.Name, st.in
	notProg := map[string]string{}
	switch {
	case in.ZoneNB != nil:
		r.NB = st.compareZones(name)
		for _, it := range eip.Status.Items {
			if _, ok := in.ZoneNB[it.Node]; !ok {
				notProg[it.EgressIP] = "the NB of its holder's zone " + it.Node + " was not read"
				continue
			}
			// Carried when every zone read has its rows as desired: the SNATs in the
			// holder's zone, each pod's reroute in the pod's zone.
			for z, cur := range in.ZoneNB {
				if !carried(st.desiredIn(z), *cur, name, it) {
					notProg[it.EgressIP] = "its rows in zone " + z + " are missing or differ"
				}
			}
		}
	case in.NB != nil:
		desired := st.desiredIn("")
		r.NB = compareRows(desired, *in.NB, name)
		for _, it := range eip.Status.Items {
			if !carried(desired, *in.NB, name, it) {
				notProg[it.EgressIP] = "its NB rows are missing or differ"
			}
		}
	default:
		r.Notes = append(r.Notes, "NB not read (no --nb-address): rows not compared")
	}
	if n := missingFamilyNote(in, name); n != "" {
		r.Notes = append(r.Notes, n)
	}
	if st.mode == gwmode.Local || in.ZoneNB != nil {
		// Local gateway mode in either layout, and the interconnect layout: the linger
		// each node published (nbstate.Lingers; by its zone controller in shared
		// gateway mode, whose rows stay nbstate.LingerGrace longer: KeepsRows).
		nbIn := nbstate.Input{Mode: st.mode, ClusterSubnets: in.ClusterSubnets, JoinSubnets: in.JoinSubnets, Nodes: st.nbNodes, Now: st.now()}
		ne := routeInput(eip, st.kept)
		for _, fam := range nbstate.Families(in.ClusterSubnets) {
			for _, l := range lingerReports(nbIn, ne, fam) {
				r.Notes = append(r.Notes, l.String()+": while no holder of its family is ready, the pods are rerouted there")
			}
		}
	}
	if st.mode == gwmode.Local {
		r.Hosts = st.hosts(eip)
		for _, h := range r.Hosts {
			for _, ip := range h.Missing {
				list := annotations.EgressIPsReady
				if in.ZoneNB != nil {
					list += " and " + annotations.EgressIPsSNATReady // node daemon and zone controller
				}
				notProg[ip] = "node " + h.Node + " does not list it in " + list
			}
		}
	}
	return notProg
}

func podRef(p *corev1.Pod, by string) PodRef {
	r := PodRef{Pod: p.Namespace + "/" + p.Name, Node: p.Spec.NodeName, ServedBy: by}
	for _, ip := range selection.PodIPs(p) {
		r.IPs = append(r.IPs, ip.String())
	}
	return r
}

func (st *explainState) labelledNodes() []string {
	var out []string
	for name, f := range st.nodes {
		if f.assign.Labelled {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

// nodeVerdict says why node may or may not hold addr for eip.
func (st *explainState) nodeVerdict(ae *assign.EgressIP, eip *egressipv1.EgressIP, node string, addr netip.Addr) string {
	f := st.nodes[node]
	for _, it := range eip.Status.Items {
		if it.Node != node {
			continue
		}
		if a, err := netip.ParseAddr(it.EgressIP); err == nil && a == addr {
			return string(assign.NodeHolder)
		}
		return string(assign.NodeHoldsOther) + " (" + it.EgressIP + ")"
	}
	v := string(assign.Why(ae, &f.assign, addr))
	switch {
	case v == string(assign.NodeConfigInvalid) && f.assign.ConfigErr != nil:
		v += ": " + f.assign.ConfigErr.Error()
	case v == string(assign.NodeCandidate):
		v += " (network " + f.assign.Egress.Network.For(addr).String() + ")"
	}
	return v
}

// compareZones compares the rows of EgressIP name in every zone read, each line
// naming its zone ("zone node2: nat GR_node2 ...").
func (st *explainState) compareZones(name string) *RowsReport {
	out := &RowsReport{Present: []string{}, Missing: []string{}, Extra: []string{}}
	zones := make([]string, 0, len(st.in.ZoneNB))
	for z := range st.in.ZoneNB {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	for _, z := range zones {
		r := compareRows(st.desiredIn(z), *st.in.ZoneNB[z], name)
		for _, l := range r.Present {
			out.Present = append(out.Present, "zone "+z+": "+l)
		}
		for _, l := range r.Missing {
			out.Missing = append(out.Missing, "zone "+z+": "+l)
		}
		for _, l := range r.Extra {
			out.Extra = append(out.Extra, "zone "+z+": "+l)
		}
	}
	return out
}

// desiredIn is desired for the rows of one zone (interconnect layout; "" = the
// centralized layout's one NB), as planRows computed them.
func (st *explainState) desiredIn(zone string) nbstate.State { return st.rows[zone] }

// planRows computes the rows the sync plans for each of zones, from the status in
// the API: for "" the centralized master's (planAll over the vetted node facts it
// assigns with), for a zone its zone controller's (zoneRows).
func (st *explainState) planRows(zones []string) error {
	in := st.in
	nb := nbstate.Input{Mode: st.mode, ClusterSubnets: in.ClusterSubnets, JoinSubnets: in.JoinSubnets, Nodes: st.nbNodes, Now: st.now()}
	cache := newObjectCache(in.Pods, in.Namespaces)
	for _, z := range zones {
		if _, done := st.rows[z]; done {
			continue
		}
		var err error
		if z == "" {
			st.rows[z], _, err = planAll(nb, in.EgressIPs, cache)
		} else {
			st.rows[z], err = zoneRows(in.Nodes, st.lay, z, nb, in.EgressIPs, cache)
		}
		if err != nil {
			return fmt.Errorf("plan the rows of zone %q: %w", z, err)
		}
	}
	return nil
}

// comparedZones are the zones whose NB rows explain compares: the one NB's (""),
// or every zone read.
func (st *explainState) comparedZones() []string {
	if st.in.ZoneNB != nil {
		return slices.Sorted(maps.Keys(st.in.ZoneNB))
	}
	if st.in.NB != nil {
		return []string{""}
	}
	return nil
}

// ofEgressIP keeps the rows of EgressIP name.
func ofEgressIP(s nbstate.State, name string) nbstate.State {
	out := nbstate.NewState()
	for k, p := range s.Policies {
		if k.IDs.OwnerType == nbstate.OwnerEgressIP && k.IDs.Name == name {
			out.Policies[k] = p
		}
	}
	for k, n := range s.NATs {
		if k.IDs.OwnerType == nbstate.OwnerEgressIP && k.IDs.Name == name {
			out.NATs[k] = n
		}
	}
	return out
}

// missingFamilyNote names the IP families of EgressIP name's rows in NB that the
// cluster subnets explain was given do not have: explain computes no rows of such a
// family, so every one of them shows as extra. That is what the default
// --cluster-subnets (IPv4 only) does on a dual-stack or IPv6 cluster; the note says
// which flag to pass rather than leaving the reader with "extra" rows.
func missingFamilyNote(in ExplainInput, name string) string {
	have := nbstate.Families(in.ClusterSubnets)
	counts := map[string]int{}
	count := func(s nbstate.State) {
		for k := range ofEgressIP(s, name).Policies {
			counts[k.IDs.Family]++
		}
		for k := range ofEgressIP(s, name).NATs {
			counts[k.IDs.Family]++
		}
	}
	if in.NB != nil {
		count(in.NB.Rows)
	}
	for _, cur := range in.ZoneNB {
		count(cur.Rows)
	}
	var parts []string
	for _, fam := range []string{nbstate.FamilyIPv4, nbstate.FamilyIPv6} {
		if counts[fam] > 0 && !slices.Contains(have, fam) {
			parts = append(parts, fmt.Sprintf("%d %s", counts[fam], fam))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	subnets := make([]string, len(in.ClusterSubnets))
	for i, p := range in.ClusterSubnets {
		subnets[i] = p.String()
	}
	return fmt.Sprintf("NB has rows of this EgressIP (%s) of a family the cluster subnets given to explain (%s) lack, so they show as extra: "+
		"pass --cluster-subnets and --join-subnet as the ovnkube processes run with (or their --config-file)",
		strings.Join(parts, ", "), strings.Join(subnets, ","))
}

func compareRows(desired nbstate.State, cur nbstate.Current, name string) *RowsReport {
	want, have := nbstate.Dump(ofEgressIP(desired, name)), nbstate.Dump(ofEgressIP(cur.Rows, name))
	r := &RowsReport{Present: []string{}, Missing: []string{}, Extra: []string{}}
	for _, l := range want {
		if slices.Contains(have, l) {
			r.Present = append(r.Present, l)
		} else {
			r.Missing = append(r.Missing, l)
		}
	}
	for _, l := range have {
		if !slices.Contains(want, l) {
			r.Extra = append(r.Extra, l)
		}
	}
	return r
}

// carried reports whether every desired row of EgressIP name that involves the
// holder of item (its SNAT rows, in shared mode) is in NB as desired, and so is
// every reroute row of name.
func carried(desired nbstate.State, cur nbstate.Current, name string, item egressipv1.EgressIPStatusItem) bool {
	want := ofEgressIP(desired, name)
	have := ofEgressIP(cur.Rows, name)
	for k, p := range want.Policies {
		h, ok := have.Policies[k]
		if !ok || !nbstate.PolicyEqual(h, p) {
			return false
		}
	}
	for k, n := range want.NATs {
		if k.Router != nbstate.GatewayRouter(item.Node) || k.IDs.EgressIP != n.ExternalIP || n.ExternalIP != canonical(item.EgressIP) {
			continue
		}
		if h, ok := have.NATs[k]; !ok || !nbstate.NATEqual(h, n) {
			return false
		}
	}
	return true
}

func canonical(ip string) string {
	if a, err := netip.ParseAddr(ip); err == nil {
		return a.String()
	}
	return ip
}

// hosts reports, per holder of eip, whether its egress-ips-ready annotation lists
// the IP it holds (local gateway mode).
func (st *explainState) hosts(eip *egressipv1.EgressIP) []HostReport {
	var out []HostReport
	for _, it := range eip.Status.Items {
		h := HostReport{Node: it.Node, Ready: []string{}}
		f, ok := st.claimed[it.Node] // what the holder lists, believed or not
		if !ok {
			h.Note = "node not found"
			out = append(out, h)
			continue
		}
		if f.readyErr != nil {
			h.Note = f.readyErr.Error()
		} else if f.nb.ReadyEgressIPs == nil {
			h.Note = annotations.EgressIPsReady + " absent: the node daemon has listed nothing ready"
		}
		for ip := range f.nb.ReadyEgressIPs {
			h.Ready = append(h.Ready, ip.String())
		}
		sort.Strings(h.Ready)
		if a, err := netip.ParseAddr(it.EgressIP); err != nil || !f.nb.ReadyEgressIPs[a] {
			h.Missing = append(h.Missing, it.EgressIP)
		}
		out = append(out, h)
	}
	return out
}

// notSelectedWhy says why no EgressIP of eips selects a pod of namespace ns: the
// ones whose namespace selector matches it (its pod selector does not).
func notSelectedWhy(eips []*egressipv1.EgressIP, ns *corev1.Namespace) string {
	var sel []string
	for _, e := range selection.Ordered(eips) {
		if s, err := selection.Compile(e); err == nil && s.MatchesNamespace(ns) {
			sel = append(sel, e.Name+" (namespace matches, pod labels do not)")
		}
	}
	why := "no EgressIP selects it"
	if len(sel) > 0 {
		why += ": " + strings.Join(sel, "; ")
	}
	return why
}

// ExplainPod explains which EgressIP serves pod ns/name and the source the
// outside world sees: which EgressIP serves it (and which stand by), the sources
// its routes give per family, then whether NB holds its rows.
func ExplainPod(in ExplainInput, ns, name string) (*PodReport, error) {
	st := newExplainState(in)
	var pod *corev1.Pod
	for _, p := range in.Pods {
		if p.Namespace == ns && p.Name == name {
			pod = p
		}
	}
	if pod == nil {
		return nil, fmt.Errorf("pod %s/%s not found", ns, name)
	}
	ref := podRef(pod, "")
	r := &PodReport{Pod: ref.Pod, IPs: ref.IPs, Node: ref.Node, Sources: []string{}}
	nsObj := st.ns[ns]
	switch {
	case nsObj == nil:
		r.Why = "its namespace is not found"
	case !selection.PodServable(pod):
		r.Why = "not servable (hostNetwork, no IP, or completed): it leaves like any host or unserved pod"
	default:
		r.ServedBy = st.rank.Serve(nsObj, pod)
	}
	if r.ServedBy == "" {
		if r.Why == "" {
			r.Why = notSelectedWhy(in.EgressIPs, nsObj)
		}
		r.Sources = st.unservedSource(pod)
		return r, nil
	}
	var eip *egressipv1.EgressIP
	for _, e := range in.EgressIPs {
		if e.Name == r.ServedBy {
			eip = e
		}
	}
	r.Why = servedWhy(in.EgressIPs, eip, nsObj, pod)
	st.podSources(r, eip)
	missing, err := st.missingPodRows(eip, pod)
	if err != nil {
		return nil, err
	}
	st.podOutcome(r, eip, pod, missing)
	return r, nil
}

// servedWhy says that eip selects the pod, and which later EgressIPs (in serving order) also select it and stand by.
func servedWhy(eips []*egressipv1.EgressIP, eip *egressipv1.EgressIP, ns *corev1.Namespace, pod *corev1.Pod) string {
	var others []string
	seen := false
	for _, e := range selection.Ordered(eips) {
		if e.Name == eip.Name {
			seen = true
			continue
		}
		if s, err := selection.Compile(e); seen && err == nil && s.Matches(ns, pod) {
			others = append(others, e.Name)
		}
	}
	why := "EgressIP " + eip.Name + " selects it (namespaceSelector and podSelector match)"
	if len(others) > 0 {
		why += "; also selected by " + strings.Join(others, ", ") + ", which come later in serving order (EgressIPs with an assigned IP first, then oldest, then name) and stand by"
	}
	return why
}

// podSources fills r.Via, r.Sources and r.Lingering from eip's routes (nbstate.Routes), per family: the SNAT
// holders (shared gateway mode), the ready holders (local gateway mode), or, with none ready, the nodes that still
// SNAT one of its IPs by their published linger (nbstate.Lingers), as the master reroutes.
func (st *explainState) podSources(r *PodReport, eip *egressipv1.EgressIP) {
	in := st.in
	nbIn := nbstate.Input{Mode: st.mode, ClusterSubnets: in.ClusterSubnets, JoinSubnets: in.JoinSubnets, Nodes: st.nbNodes, Now: st.now()}
	ne := routeInput(eip, st.kept)
	routes := nbstate.Routes(nbIn, ne)
	for _, fam := range nbstate.Families(in.ClusterSubnets) {
		rt, ok := routes[fam]
		if !ok {
			continue
		}
		r.Via = append(r.Via, holdersOf(eip, fam)...)
		for _, h := range rt.SNAT {
			r.Sources = append(r.Sources, h.EgressIP.String())
		}
		if st.mode != gwmode.Local {
			continue
		}
		ready := false
		for _, it := range eip.Status.Items {
			a, err := netip.ParseAddr(it.EgressIP)
			if err == nil && nbstate.Family(a) == fam && st.nbNodes[it.Node].ReadyEgressIPs[a] {
				r.Sources = append(r.Sources, a.String())
				ready = true
			}
		}
		if ready || rt.Drop {
			continue
		}
		for _, l := range lingerReports(nbIn, ne, fam) {
			r.Sources = append(r.Sources, l.IP)
			r.Via = append(r.Via, l.IP+"@"+l.Node+" (lingering"+lingerEnd(l.Until)+")")
			r.Lingering = append(r.Lingering, l)
		}
	}
	slices.Sort(r.Sources)
	r.Sources = slices.Compact(r.Sources)
}

// podOutcome ends r.Why with how the pod's traffic leaves: as an unserved pod while NB lacks its rows (missing,
// missingPodRows), through the lingering nodes, through the holders, dropped (strict), or as an unserved pod when
// nothing carries its IPs.
func (st *explainState) podOutcome(r *PodReport, eip *egressipv1.EgressIP, pod *corev1.Pod, missing []string) {
	switch {
	case len(missing) > 0:
		r.Why += "; but NB lacks (or holds otherwise) its rows: " + strings.Join(missing, "; ") + ": it leaves as an unserved pod until the master repairs them"
		r.Sources = st.unservedSource(pod)
	case len(r.Lingering) > 0:
		var ls []string
		for _, l := range r.Lingering {
			ls = append(ls, l.String())
		}
		r.Why += "; no holder is ready: its traffic leaving the cluster is rerouted to the nodes in their release linger and leaves with the egress IP they released (" +
			strings.Join(ls, "; ") + "); once the linger ends it is not rerouted there any more"
	case len(r.Sources) > 0:
		r.Why += "; its traffic leaving the cluster is rerouted to the holders and leaves with one of its egress IPs (ECMP per flow)"
	case eip.Spec.Strict:
		r.Why += "; no egress IP of it is assigned and carried, and it is strict: traffic leaving the cluster is dropped (traffic inside the cluster is not)"
	default:
		r.Why += "; but no egress IP of it is assigned and carried: it leaves as an unserved pod"
		r.Sources = st.unservedSource(pod)
	}
}

// holdersOf lists "ip@node" of eip's status items of family fam.
func holdersOf(eip *egressipv1.EgressIP, fam string) []string {
	var out []string
	for _, it := range eip.Status.Items {
		if a, err := netip.ParseAddr(it.EgressIP); err == nil && nbstate.Family(a) == fam {
			out = append(out, it.EgressIP+"@"+it.Node)
		}
	}
	return out
}

// unservedSource is the source of an unserved pod: its gateway router's SNAT
// address (shared mode, from NB) or its node's address (local mode).
func (st *explainState) unservedSource(pod *corev1.Pod) []string {
	node := pod.Spec.NodeName
	var out []string
	if st.mode == gwmode.Shared {
		for _, ip := range selection.PodIPs(pod) {
			for _, n := range st.in.GatewaySNAT[nbstate.GatewayRouter(node)] {
				if p, err := netip.ParsePrefix(n.LogicalIP); err == nil && p.Contains(ip) {
					out = append(out, n.ExternalIP)
				} else if a, err := netip.ParseAddr(n.LogicalIP); err == nil && a == ip {
					out = append(out, n.ExternalIP)
				}
			}
		}
		if out == nil {
			out = []string{"GR_" + node + " SNAT address (not read from NB)"}
		}
		return out
	}
	f, ok := st.claimed[node]
	if !ok {
		return []string{"address of node " + node + " (node not found)"}
	}
	for _, p := range []netip.Prefix{f.assign.Egress.Network.V4, f.assign.Egress.Network.V6} {
		if p.IsValid() {
			out = append(out, p.Addr().String())
		}
	}
	return out
}

// missingPodRows lists the desired policy rows of pod under eip that NB does not
// hold as desired (nil when NB was not read). Without its policy the pod is not
// rerouted (nor dropped).
func (st *explainState) missingPodRows(eip *egressipv1.EgressIP, pod *corev1.Pod) ([]string, error) {
	zone, nb := "", st.in.NB
	if st.in.ZoneNB != nil {
		zone, nb = pod.Spec.NodeName, st.in.ZoneNB[pod.Spec.NodeName] // the pod's reroute lives in its own zone
	}
	if nb == nil {
		return nil, nil
	}
	if err := st.planRows([]string{zone}); err != nil {
		return nil, err
	}
	want := ofEgressIP(st.desiredIn(zone), eip.Name)
	key := pod.Namespace + "/" + pod.Name
	var out []string
	for k, p := range want.Policies {
		if k.IDs.Pod != key {
			continue
		}
		h, ok := nb.Rows.Policies[k]
		if !ok || !nbstate.PolicyEqual(h, p) {
			out = append(out, fmt.Sprintf("policy %s %q", p.Action, p.Match))
		}
	}
	sort.Strings(out)
	return out, nil
}

// now is the time explain decides at (ExplainInput.Now, or the time of the call).
func (st *explainState) now() time.Time {
	if st.in.Now.IsZero() {
		return time.Now()
	}
	return st.in.Now
}

func lingerEnd(until string) string {
	if until == "" {
		return ", still listed ready"
	}
	return " until " + until
}

// PlannedRows returns the rows ours would write now, computed as explain compares
// them (planRows: the sync's own planning over the status in the API, with the
// node facts each writer reads): for the one NB of the centralized layout (zones
// empty, key ""), or for each zone named (interconnect layout). Drift names the
// EgressIPs whose status items differ from what assignment computes now: ours
// would move those IPs at its first sync, after the rows given here.
func PlannedRows(in ExplainInput, zones []string) (rows map[string]nbstate.State, drift []string, err error) {
	if len(zones) > 0 && in.ZoneNB == nil {
		in.ZoneNB = map[string]*nbstate.Current{} // the interconnect layout's node facts (factsLayout)
	}
	st := newExplainState(in)
	if len(zones) == 0 {
		zones = []string{""}
	}
	if err = st.planRows(zones); err != nil {
		return nil, nil, err
	}
	rows = map[string]nbstate.State{}
	for _, z := range zones {
		rows[z] = st.desiredIn(z)
	}
	for _, e := range in.EgressIPs {
		if items := toStatusItems(st.res.Status[e.Name]); !sameItems(items, e.Status.Items) {
			drift = append(drift, fmt.Sprintf("EgressIP %s: status.items %s, assignment computes %s", e.Name, describe(e.Status.Items), describe(items)))
		}
	}
	sort.Strings(drift)
	return rows, drift, nil
}
