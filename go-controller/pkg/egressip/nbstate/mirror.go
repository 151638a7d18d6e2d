package nbstate

import (
	"fmt"
	"slices"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
)

// Mirror is the master's index of the NB rows it owns, so that a sync that
// touches a few pods reads and compares only their rows instead of re-reading and
// re-parsing every row of the NB cache (ReadCurrent). It is built from a full read
// (NewMirror, after which the rows are exactly what NB held) and kept current by
// Commit with every plan committed. It is not safe for concurrent use; rows are
// never modified in place (they are replaced), so rows handed out stay valid.
//
// Rows changed in NB behind the master's back are not seen by the Mirror: the
// master's full verification (start-up, NB reconnect, periodic) rebuilds it.
type Mirror struct {
	rows State
	// byPod indexes the policy and NAT rows of one served pod ("namespace/name");
	// rows of no pod are under "".
	// A slice, not a set: a pod has a few rows, and a small map per pod would cost
	// a kilobyte each (20 MiB at 20,000 pods).
	byPod map[string][]Key
	// served are the addresses of the served-pods address sets, per family.
	served map[string]map[string]bool
}

// NewMirror returns a Mirror of cur's rows (cur.Stale is ignored: those rows are
// deleted by the plan that follows, which is then Committed).
func NewMirror(cur Current) *Mirror {
	m := &Mirror{rows: NewState(), byPod: map[string][]Key{}, served: map[string]map[string]bool{}}
	for k, p := range cur.Rows.Policies {
		m.put(k, p)
	}
	for k, n := range cur.Rows.NATs {
		m.put(k, n)
	}
	for k, s := range cur.Rows.AddressSets {
		m.put(k, s)
	}
	return m
}

// Len is the number of rows mirrored.
func (m *Mirror) Len() int { return m.rows.Len() }

func (m *Mirror) put(k Key, row any) {
	switch r := row.(type) {
	case *nbdb.LogicalRouterPolicy:
		// external_ids are not kept: they are k.IDs.ExternalIDs() (ParseIDs read k
		// from them), rebuilt by Current for the rows it hands out. This halves the
		// memory of a mirrored row.
		cp := *r
		cp.ExternalIDs = nil
		m.rows.Policies[k] = &cp
	case *nbdb.NAT:
		cp := *r
		cp.ExternalIDs = nil
		m.rows.NATs[k] = &cp
	case *nbdb.AddressSet:
		m.rows.AddressSets[k] = r
		if k.IDs.OwnerType == OwnerCluster && k.IDs.Rule == RuleServedPods {
			set := make(map[string]bool, len(r.Addresses))
			for _, a := range r.Addresses {
				set[a] = true
			}
			m.served[k.IDs.Family] = set
		}
		return
	}
	// Rows of no pod (the shared policies) are indexed under "".
	if !slices.Contains(m.byPod[k.IDs.Pod], k) {
		m.byPod[k.IDs.Pod] = append(m.byPod[k.IDs.Pod], k)
	}
}

func (m *Mirror) drop(table string, k Key) {
	switch table {
	case nbdb.LogicalRouterPolicyTable:
		delete(m.rows.Policies, k)
	case nbdb.NATTable:
		delete(m.rows.NATs, k)
	case nbdb.AddressSetTable:
		delete(m.rows.AddressSets, k)
		if k.IDs.Rule == RuleServedPods {
			delete(m.served, k.IDs.Family)
		}
		return
	}
	if keys := slices.DeleteFunc(m.byPod[k.IDs.Pod], func(o Key) bool { return o == k }); len(keys) > 0 {
		m.byPod[k.IDs.Pod] = keys
	} else {
		delete(m.byPod, k.IDs.Pod)
	}
}

// Current returns the mirrored rows of the given pods, every other row except the
// served-pods address sets (cluster rows: few), and routers: the input of Diff for
// a sync limited to those pods.
func (m *Mirror) Current(pods map[string]bool, routers map[string]string) Current {
	// Sized for the rows handed out (a node loss hands out thousands: growing the
	// maps cost as much as filling them).
	n := len(m.byPod[""])
	for pod := range pods {
		n += len(m.byPod[pod])
	}
	cur := Current{Rows: State{Policies: make(map[Key]*nbdb.LogicalRouterPolicy, n/3+1), NATs: make(map[Key]*nbdb.NAT, 2*n/3+1),
		AddressSets: map[Key]*nbdb.AddressSet{}}, Routers: routers, ForeignAddressSets: map[string]bool{}}
	add := func(pod string) {
		for _, k := range m.byPod[pod] {
			if p, ok := m.rows.Policies[k]; ok {
				cp := *p
				cp.ExternalIDs = k.IDs.ExternalIDs()
				cur.Rows.Policies[k] = &cp
			}
			if n, ok := m.rows.NATs[k]; ok {
				cp := *n
				cp.ExternalIDs = k.IDs.ExternalIDs()
				cur.Rows.NATs[k] = &cp
			}
		}
	}
	add("") // shared rows
	for pod := range pods {
		add(pod)
	}
	for k, s := range m.rows.AddressSets {
		if k.IDs.Rule != RuleServedPods {
			cur.Rows.AddressSets[k] = s
		}
	}
	return cur
}

// ServedPods returns the served-pods address set of a family, if mirrored, and
// whether addr is in it.
func (m *Mirror) ServedPods(fam string) (*nbdb.AddressSet, bool) {
	s, ok := m.rows.AddressSets[ServedPodsKey(fam)]
	return s, ok
}

// HasServed reports whether addr is in the mirrored served-pods set of its family.
func (m *Mirror) HasServed(fam, addr string) bool { return m.served[fam][addr] }

// Commit records a committed plan. inserted are the UUIDs NB gave the plan's
// Inserts, in plan order (CommitPlan's result).
func (m *Mirror) Commit(plan Plan, inserted []string) error {
	n := 0
	for _, c := range plan.Changes {
		switch c.Op {
		case Insert:
			if n >= len(inserted) {
				return fmt.Errorf("mirror: %d inserts committed, fewer UUIDs", n+1)
			}
			m.put(c.Key, withUUID(c.Row, inserted[n]))
			n++
		case Update:
			if c.Row == nil { // address delta
				m.mutateServed(c)
				continue
			}
			if old := keyOfOld(c); old != c.Key {
				m.drop(c.Table, old)
			}
			m.put(c.Key, withUUID(c.Row, c.UUID))
		case Delete:
			if c.Key != (Key{}) {
				m.drop(c.Table, c.Key)
			}
		}
	}
	return nil
}

// keyOfOld is the Key of the row an Update replaces: the same as the new one,
// except for a NAT row moved to another gateway router.
func keyOfOld(c Change) Key {
	if c.Table != nbdb.NATTable || c.OldKey == nil {
		return c.Key
	}
	return *c.OldKey
}

func (m *Mirror) mutateServed(c Change) {
	old, ok := m.rows.AddressSets[c.Key]
	if !ok {
		return
	}
	set := m.served[c.Key.IDs.Family]
	for _, a := range c.DelAddresses {
		delete(set, a)
	}
	for _, a := range c.AddAddresses {
		set[a] = true
	}
	cp := *old
	cp.Addresses = nil // m.served is authoritative for the addresses (HasServed)
	m.rows.AddressSets[c.Key] = &cp
	m.served[c.Key.IDs.Family] = set
}

func withUUID(row any, uuid string) any {
	switch r := row.(type) {
	case *nbdb.LogicalRouterPolicy:
		cp := *r
		cp.UUID = uuid
		return &cp
	case *nbdb.NAT:
		cp := *r
		cp.UUID = uuid
		return &cp
	case *nbdb.AddressSet:
		cp := *r
		cp.UUID = uuid
		return &cp
	}
	return row
}
