package migrate

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/ovn-org/libovsdb/model"
	"github.com/ovn-org/libovsdb/ovsdb"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Parent is a row that references a policy, NAT or QoS row: a router's policies
// or nat, a switch's qos_rules.
type Parent struct {
	Table, UUID, Name, Column string
}

// Row is one row a migration removes (UUID, Parents) or creates (Model, Parents
// with the existing parent's UUID) outside nbstate's plan of our own rows.
type Row struct {
	Table   string
	UUID    string
	Parents []Parent
	Model   model.Model
	// Line describes the row (dry run).
	Line string
}

// Plan is one NB's migration, committed as ONE transaction (Commit).
type Plan struct {
	// Ours are the changes to our own rows: to write them (FromUpstream) or to
	// delete them (ToUpstream).
	Ours nbstate.Plan
	// Remove are upstream's rows deleted (FromUpstream); Create are the rows in
	// upstream's shape written (ToUpstream).
	Remove, Create []Row
	// Kept are upstream's address sets FromUpstream keeps: a row that stays
	// references them.
	Kept []string
	// Unserved are the pod IPs upstream's rows serve and ours would not. FromUpstream
	// refuses such a plan unless allowed.
	Unserved []string
	// Notes are differences worth reading before committing (a pod whose next hops
	// or egress IPs change, rows that cannot be written).
	Notes []string
}

// Empty reports whether the plan writes nothing (Commit then sends no transaction).
func (p Plan) Empty() bool {
	return len(p.Ours.Changes) == 0 && len(p.Remove) == 0 && len(p.Create) == 0
}

// Lines describes the plan, one row per line, for a dry run.
func (p Plan) Lines() []string {
	var out []string
	for _, r := range p.Create {
		out = append(out, "create upstream "+r.Line)
	}
	for _, c := range p.Ours.Changes {
		out = append(out, fmt.Sprintf("%s ours %s %s", c.Op, c.Table, c.Key))
	}
	for _, r := range p.Remove {
		out = append(out, "delete upstream "+r.Line)
	}
	for _, k := range p.Kept {
		out = append(out, "keep upstream "+k)
	}
	return out
}

// FromUpstream plans replacing upstream's egress IP rows of s with desired (ours,
// as the master plans them): our rows as nbstate.Diff writes them, and every
// upstream row deleted but the address sets a row that stays still references.
// Unserved lists the pod IPs an upstream reroute serves that no reroute of ours
// (one that can be written) serves, and in shared gateway mode (mode) those
// upstream SNATs in this NB that no SNAT of ours does (their traffic would leave
// with the gateway router's address).
func FromUpstream(s Snapshot, desired nbstate.State, mode gwmode.Mode) Plan {
	p := Plan{Ours: nbstate.Diff(desired, s.Ours)}
	parents := parentIndex(s)
	removed := map[string]bool{}
	upstreamHops := map[netip.Addr][]string{}
	upstreamSNAT := map[netip.Addr][]string{}
	for _, u := range sortedKeys(s.Policies) {
		pol := s.Policies[u]
		if !IsUpstream(pol.ExternalIDs) {
			continue
		}
		removed[u] = true
		p.Remove = append(p.Remove, Row{Table: nbdb.LogicalRouterPolicyTable, UUID: u, Parents: parents[u],
			Line: fmt.Sprintf("policy %s %d %s %q nexthops=%v %s", names(parents[u]), pol.Priority, pol.Action, pol.Match, pol.Nexthops, idOf(pol.ExternalIDs))})
		if pol.Action != nbdb.LogicalRouterPolicyActionReroute {
			continue
		}
		ip, ok := srcIP(pol.Match)
		if !ok {
			p.Unserved = append(p.Unserved, fmt.Sprintf("%q (upstream reroute %s: a match ours cannot read)", pol.Match, idOf(pol.ExternalIDs)))
			continue
		}
		upstreamHops[ip] = append(upstreamHops[ip], pol.Nexthops...)
	}
	for _, u := range sortedKeys(s.NATs) {
		n := s.NATs[u]
		if !IsUpstream(n.ExternalIDs) {
			continue
		}
		removed[u] = true
		p.Remove = append(p.Remove, Row{Table: nbdb.NATTable, UUID: u, Parents: parents[u],
			Line: fmt.Sprintf("nat %s %s %s -> %s %s", names(parents[u]), n.Type, n.LogicalIP, n.ExternalIP, idOf(n.ExternalIDs))})
		if ip, err := netip.ParseAddr(n.LogicalIP); err == nil && n.Type == nbdb.NATTypeSNAT {
			upstreamSNAT[ip] = append(upstreamSNAT[ip], n.ExternalIP)
		}
	}
	for _, u := range sortedKeys(s.QoS) {
		q := s.QoS[u]
		if !IsUpstream(q.ExternalIDs) {
			continue
		}
		removed[u] = true
		p.Remove = append(p.Remove, Row{Table: nbdb.QoSTable, UUID: u, Parents: parents[u],
			Line: fmt.Sprintf("qos %s %d %q %s", names(parents[u]), q.Priority, q.Match, idOf(q.ExternalIDs))})
	}
	// The matches that stay: every row not removed, and ours as desired.
	var matches []string
	for u, pol := range s.Policies {
		if !removed[u] {
			matches = append(matches, pol.Match)
		}
	}
	for u, q := range s.QoS {
		if !removed[u] {
			matches = append(matches, q.Match)
		}
	}
	for _, a := range s.ACLs {
		matches = append(matches, a.Match)
	}
	for _, pol := range desired.Policies {
		matches = append(matches, pol.Match)
	}
	sets := slices.Clone(s.AddressSets)
	sort.Slice(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
	for _, as := range sets {
		if !IsUpstream(as.ExternalIDs) {
			continue
		}
		if by := referencing(matches, as.Name); by != "" {
			p.Kept = append(p.Kept, fmt.Sprintf("address set %s %s: referenced by %q", as.Name, idOf(as.ExternalIDs), by))
			continue
		}
		p.Remove = append(p.Remove, Row{Table: nbdb.AddressSetTable, UUID: as.UUID,
			Line: fmt.Sprintf("address set %s %s", as.Name, idOf(as.ExternalIDs))})
	}
	p.checkServed(desired, upstreamHops, upstreamSNAT, mode)
	return p
}

// Refuse is the error a plan is refused with: upstream serves pods ours would
// not (allowUnserved accepts that).
func (p Plan) Refuse(allowUnserved bool) error {
	if len(p.Unserved) == 0 || allowUnserved {
		return nil
	}
	return fmt.Errorf("upstream's rows serve %d pod IP(s) ours would not: %s (check `ovnkube egressip explain`; --allow-unserved migrates anyway)",
		len(p.Unserved), strings.Join(p.Unserved, ", "))
}

// checkServed fills Unserved and Notes: which pod IPs upstream serves that ours
// would not, and which change next hops or egress IPs.
func (p *Plan) checkServed(desired nbstate.State, upstreamHops, upstreamSNAT map[netip.Addr][]string, mode gwmode.Mode) {
	skipped := map[nbstate.Key]bool{}
	for _, k := range p.Ours.Skipped {
		skipped[k] = true
		p.Notes = append(p.Notes, "cannot write "+k.String()+" (its router is not in NB, or a foreign address set has its name)")
	}
	oursHops := map[netip.Addr][]string{}
	for k, pol := range desired.Policies {
		if skipped[k] || k.IDs.Rule != nbstate.RuleReroute || pol.Action != nbdb.LogicalRouterPolicyActionReroute {
			continue
		}
		if ip, ok := srcIP(pol.Match); ok {
			oursHops[ip] = append(oursHops[ip], pol.Nexthops...)
		}
	}
	oursSNAT := map[netip.Addr][]string{}
	for k, n := range desired.NATs {
		if ip, err := netip.ParseAddr(n.LogicalIP); err == nil && !skipped[k] {
			oursSNAT[ip] = append(oursSNAT[ip], n.ExternalIP)
		}
	}
	if mode == gwmode.Shared {
		for _, ip := range sortedAddrs(upstreamSNAT) {
			if _, ok := oursSNAT[ip]; !ok {
				p.Unserved = append(p.Unserved, ip.String()+" (SNAT to "+strings.Join(set(upstreamSNAT[ip]), ",")+" in this NB, none of ours)")
			}
		}
	}
	for _, ip := range sortedAddrs(upstreamHops) {
		ours, ok := oursHops[ip]
		if !ok {
			p.Unserved = append(p.Unserved, ip.String())
			continue
		}
		if a, b := set(upstreamHops[ip]), set(ours); !slices.Equal(a, b) {
			p.Notes = append(p.Notes, fmt.Sprintf("pod %s: next hops change from %v (upstream) to %v (ours)", ip, a, b))
		}
		if a, b := set(upstreamSNAT[ip]), set(oursSNAT[ip]); !slices.Equal(a, b) {
			p.Notes = append(p.Notes, fmt.Sprintf("pod %s: SNAT in this NB changes from %v (upstream) to %v (ours)", ip, a, b))
		}
	}
}

// oursRouters are the routers of s our rows are on, by name.
func oursRouters(s Snapshot) map[string]*nbdb.LogicalRouter {
	out := map[string]*nbdb.LogicalRouter{}
	for _, r := range s.Routers {
		if r.UUID == s.Ours.Routers[r.Name] {
			out[r.Name] = r
		}
	}
	return out
}

// upstreamIndex indexes what upstream already has in s: have holds "parent UUID + id" of
// its policies and NATs and the id of its address sets, setName maps an address set id
// to its name, and names are the names of every address set.
func upstreamIndex(s Snapshot) (have map[string]bool, setName map[string]string, names map[string]bool) {
	have, setName, names = map[string]bool{}, map[string]string{}, map[string]bool{}
	parents := parentIndex(s)
	for u, pol := range s.Policies {
		if IsUpstream(pol.ExternalIDs) {
			for _, par := range parents[u] {
				have[par.UUID+" "+pol.ExternalIDs[UpstreamIDKey]] = true
			}
		}
	}
	for u, n := range s.NATs {
		if IsUpstream(n.ExternalIDs) {
			for _, par := range parents[u] {
				have[par.UUID+" "+n.ExternalIDs[UpstreamIDKey]] = true
			}
		}
	}
	for _, as := range s.AddressSets {
		names[as.Name] = true
		if IsUpstream(as.ExternalIDs) {
			have[as.ExternalIDs[UpstreamIDKey]] = true
			setName[as.ExternalIDs[UpstreamIDKey]] = as.Name
		}
	}
	return have, setName, names
}

// ToUpstream plans replacing our rows of s with rows in upstream's shape carrying
// the traffic the same way: per reroute of ours an upstream reroute with the same
// match and next hops, per SNAT an upstream SNAT on the same gateway router, the
// no-reroute policies and their address sets; and every row of ours deleted. A row
// upstream already has (the same k8s.ovn.org/id on the same router, or address
// set) is not created again.
func ToUpstream(s Snapshot) Plan {
	p := Plan{Ours: nbstate.Diff(nbstate.NewState(), s.Ours)}
	routerByName := oursRouters(s)
	have, setName, names := upstreamIndex(s)
	upstreamSet := func(name, fam string, addrs []string) string {
		as := UpstreamAddressSet(name, fam, addrs)
		id := as.ExternalIDs[UpstreamIDKey]
		if n, ok := setName[id]; ok {
			return n
		}
		if names[as.Name] {
			p.Notes = append(p.Notes, "address set "+as.Name+" exists and is not upstream's "+name+": not created")
			return as.Name
		}
		setName[id], names[as.Name] = as.Name, true
		p.Create = append(p.Create, Row{Table: nbdb.AddressSetTable, Model: as, Line: fmt.Sprintf("address set %s %v %s", as.Name, addrs, id)})
		return as.Name
	}
	add := func(router string, table, column string, m model.Model, ext map[string]string, line string) {
		r, ok := routerByName[router]
		if !ok || have[r.UUID+" "+ext[UpstreamIDKey]] {
			return
		}
		have[r.UUID+" "+ext[UpstreamIDKey]] = true
		p.Create = append(p.Create, Row{Table: table, Model: m, Parents: []Parent{{Table: nbdb.LogicalRouterTable, UUID: r.UUID, Name: r.Name, Column: column}},
			Line: line + " " + ext[UpstreamIDKey]})
	}
	// Address sets first: the pod-to-node policy names them.
	for _, k := range sortedStateKeys(s.Ours.Rows.AddressSets) {
		as := s.Ours.Rows.AddressSets[k]
		switch k.IDs.Rule {
		case nbstate.RuleServedPods:
			upstreamSet(UpstreamServedPods, k.IDs.Family, as.Addresses)
		case nbstate.RuleNodeIPs:
			upstreamSet(UpstreamNodeIPs, k.IDs.Family, as.Addresses)
		}
	}
	for _, k := range sortedStateKeys(s.Ours.Rows.Policies) {
		pol := s.Ours.Rows.Policies[k]
		fam := k.IDs.Family
		var up *nbdb.LogicalRouterPolicy
		switch k.IDs.Rule {
		case nbstate.RuleReroute:
			if pol.Action != nbdb.LogicalRouterPolicyActionReroute {
				p.Notes = append(p.Notes, fmt.Sprintf("%s: %s (strict) has no upstream equivalent: not carried over", k, pol.Action))
				continue
			}
			up = UpstreamPolicy(k.IDs.Name+"_"+k.IDs.Pod, fam, pol.Priority, pol.Match, pol.Action, pol.Nexthops)
		case nbstate.RulePodToPod:
			up = UpstreamPolicy(UpstreamNoReroutePodToPod, fam, pol.Priority, pol.Match, pol.Action, nil)
		case nbstate.RulePodToJoin:
			up = UpstreamPolicy(UpstreamNoReroutePodToJoin, fam, pol.Priority, pol.Match, pol.Action, nil)
		case nbstate.RulePodToNode:
			served := s.Ours.Rows.AddressSets[nbstate.ServedPodsKey(fam)]
			nodeIPs := s.Ours.Rows.AddressSets[nbstate.Key{IDs: nbstate.IDs{OwnerType: nbstate.OwnerCluster, Rule: nbstate.RuleNodeIPs, Family: fam}}]
			match := pol.Match
			if served != nil {
				match = strings.ReplaceAll(match, "$"+served.Name, "$"+upstreamSet(UpstreamServedPods, fam, served.Addresses))
			}
			if nodeIPs != nil {
				match = strings.ReplaceAll(match, "$"+nodeIPs.Name, "$"+upstreamSet(UpstreamNodeIPs, fam, nodeIPs.Addresses))
			}
			up = UpstreamPolicy(UpstreamNoReroutePodToNode, fam, pol.Priority, match, pol.Action, nil)
		default:
			continue
		}
		add(k.Router, nbdb.LogicalRouterPolicyTable, "policies", up, up.ExternalIDs,
			fmt.Sprintf("policy %s %d %s %q nexthops=%v", k.Router, up.Priority, up.Action, up.Match, up.Nexthops))
	}
	for _, k := range sortedStateKeys(s.Ours.Rows.NATs) {
		n := s.Ours.Rows.NATs[k]
		if k.IDs.Rule != nbstate.RuleSNAT || !strings.HasPrefix(k.Router, nbstate.GatewayRouterPrefix) {
			continue
		}
		up := UpstreamSNAT(k.IDs.Name+"_"+k.IDs.Pod, k.IDs.Family, n.ExternalIP, n.LogicalIP, strings.TrimPrefix(k.Router, nbstate.GatewayRouterPrefix))
		add(k.Router, nbdb.NATTable, "nat", up, up.ExternalIDs, fmt.Sprintf("nat %s snat %s -> %s", k.Router, n.LogicalIP, n.ExternalIP))
	}
	return p
}

// Client is what Commit needs of a libovsdb client.
type Client interface {
	Transact(ctx context.Context, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error)
}

// Commit sends plan as ONE transaction; none when it is empty (committed false).
// An error means nothing was committed (OVSDB transactions are atomic), or, for a
// lost connection, that the outcome is unknown: running the migration again
// converges either way.
func Commit(ctx context.Context, c Client, plan Plan) (committed bool, err error) {
	if plan.Empty() {
		return false, nil
	}
	ops, err := plan.Ops()
	if err != nil {
		return false, err
	}
	res, err := c.Transact(ctx, ops...)
	if err != nil {
		return false, fmt.Errorf("NB transaction of %d operations: %w", len(ops), err)
	}
	if _, err := ovsdb.CheckOperationResults(res, ops); err != nil {
		return false, fmt.Errorf("NB transaction of %d operations failed, nothing written: %w", len(ops), err)
	}
	return true, nil
}

// Ops are the operations of the plan's one transaction: the upstream-shaped rows
// created, our rows' changes (nbstate.Ops), then upstream's rows removed (from
// their routers and switches; address sets deleted).
func (p Plan) Ops() ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	for i, r := range p.Create {
		named := fmt.Sprintf("migrate_row_%d", i)
		row, err := insertRow(r.Model)
		if err != nil {
			return nil, err
		}
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: r.Table, Row: row, UUIDName: named})
		for _, par := range r.Parents {
			ops = append(ops, refMutation(par, ovsdb.MutateOperationInsert, named))
		}
	}
	if len(p.Ours.Changes) > 0 {
		ours, err := nbstate.Ops(p.Ours)
		if err != nil {
			return nil, err
		}
		ops = append(ops, ours...)
	}
	for _, r := range p.Remove {
		if r.Table == nbdb.AddressSetTable {
			ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationDelete, Table: r.Table, Where: whereUUID(r.UUID)})
			continue
		}
		if len(r.Parents) == 0 {
			return nil, fmt.Errorf("%s row %s has no parent to remove it from", r.Table, r.UUID)
		}
		for _, par := range r.Parents {
			ops = append(ops, refMutation(par, ovsdb.MutateOperationDelete, r.UUID))
		}
	}
	return ops, nil
}

func insertRow(m model.Model) (ovsdb.Row, error) {
	switch r := m.(type) {
	case *nbdb.LogicalRouterPolicy:
		return ovsdb.Row{"priority": r.Priority, "match": r.Match, "action": r.Action,
			"nexthops": strings2set(r.Nexthops), "external_ids": strings2map(r.ExternalIDs)}, nil
	case *nbdb.NAT:
		row := ovsdb.Row{"type": r.Type, "external_ip": r.ExternalIP, "logical_ip": r.LogicalIP,
			"external_ids": strings2map(r.ExternalIDs)}
		if r.LogicalPort != nil {
			row["logical_port"] = *r.LogicalPort
		}
		return row, nil
	case *nbdb.AddressSet:
		return ovsdb.Row{"name": r.Name, "addresses": strings2set(r.Addresses), "external_ids": strings2map(r.ExternalIDs)}, nil
	}
	return nil, fmt.Errorf("unexpected row type %T", m)
}

func refMutation(par Parent, mutator ovsdb.Mutator, uuid string) ovsdb.Operation {
	set := ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: uuid}}}
	return ovsdb.Operation{Op: ovsdb.OperationMutate, Table: par.Table, Where: whereUUID(par.UUID),
		Mutations: []ovsdb.Mutation{*ovsdb.NewMutation(par.Column, mutator, set)}}
}

func whereUUID(uuid string) []ovsdb.Condition {
	return []ovsdb.Condition{ovsdb.NewCondition("_uuid", ovsdb.ConditionEqual, ovsdb.UUID{GoUUID: uuid})}
}

func strings2set(ss []string) ovsdb.OvsSet {
	set := ovsdb.OvsSet{GoSet: []any{}}
	for _, s := range ss {
		set.GoSet = append(set.GoSet, s)
	}
	return set
}

func strings2map(m map[string]string) ovsdb.OvsMap {
	out := ovsdb.OvsMap{GoMap: map[any]any{}}
	for k, v := range m {
		out.GoMap[k] = v
	}
	return out
}

// parentIndex maps a policy, NAT or QoS row's UUID to the routers and switches
// referencing it.
func parentIndex(s Snapshot) map[string][]Parent {
	out := map[string][]Parent{}
	for _, r := range s.Routers {
		for _, u := range r.Policies {
			out[u] = append(out[u], Parent{Table: nbdb.LogicalRouterTable, UUID: r.UUID, Name: r.Name, Column: "policies"})
		}
		for _, u := range r.Nat {
			out[u] = append(out[u], Parent{Table: nbdb.LogicalRouterTable, UUID: r.UUID, Name: r.Name, Column: "nat"})
		}
	}
	for _, sw := range s.Switches {
		for _, u := range sw.QOSRules {
			out[u] = append(out[u], Parent{Table: nbdb.LogicalSwitchTable, UUID: sw.UUID, Name: sw.Name, Column: "qos_rules"})
		}
	}
	for u := range out {
		sort.Slice(out[u], func(i, j int) bool { return out[u][i].Name < out[u][j].Name })
	}
	return out
}

func names(ps []Parent) string {
	if len(ps) == 0 {
		return "(no parent)"
	}
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return strings.Join(out, ",")
}

func idOf(ext map[string]string) string {
	if id := ext[UpstreamIDKey]; id != "" {
		return UpstreamIDKey + "=" + id
	}
	return UpstreamNameKey + "=" + ext[UpstreamNameKey]
}

// srcIP reads the pod IP of a reroute's match, "ip4.src == IP" (ip6 likewise).
func srcIP(match string) (netip.Addr, bool) {
	for _, fam := range []string{nbstate.FamilyIPv4, nbstate.FamilyIPv6} {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(match), fam+".src == "); ok {
			ip, err := netip.ParseAddr(strings.TrimSpace(rest))
			return ip, err == nil
		}
	}
	return netip.Addr{}, false
}

// referencing returns the first match that names address set name ($name, not
// followed by a character of a longer name), "" if none.
func referencing(matches []string, name string) string {
	ref := "$" + name
	for _, m := range matches {
		for rest := m; ; {
			i := strings.Index(rest, ref)
			if i < 0 {
				break
			}
			rest = rest[i+len(ref):]
			if rest == "" || !isNameChar(rest[0]) {
				return m
			}
		}
	}
	return ""
}

func isNameChar(c byte) bool {
	return c == '_' || c == '.' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func set(ss []string) []string {
	out := slices.Clone(ss)
	slices.Sort(out)
	return slices.Compact(out)
}

func sortedKeys[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedStateKeys[T any](m map[nbstate.Key]T) []nbstate.Key {
	out := make([]nbstate.Key, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

func sortedAddrs[T any](m map[netip.Addr]T) []netip.Addr {
	out := make([]netip.Addr, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}
