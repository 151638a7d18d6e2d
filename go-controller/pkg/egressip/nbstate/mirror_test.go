package nbstate

import (
	"slices"
	"testing"
)

// TestMirror: a Mirror hands out, for the pods asked, the rows it was built from
// (external_ids included, though it does not keep them) plus the shared rows; a
// committed plan (a move: SNAT row to another router, next hops switched) leaves
// it equal to the plan's desired state, and Diff against it is then empty.
func TestMirror(t *testing.T) {
	onA, onB := sampleDesired("node-a"), sampleDesired("node-b")
	m := NewMirror(asCurrent(onA))
	if m.Len() != onA.Len() {
		t.Fatalf("mirror holds %d rows, want %d", m.Len(), onA.Len())
	}
	pods := map[string]bool{"ns1/p1": true}
	cur := m.Current(pods, testRouters)
	servedKey := ServedPodsKey(FamilyIPv4)
	want := withoutKey(onA, servedKey)
	if got := Dump(cur.Rows); !slices.Equal(got, Dump(want)) {
		t.Errorf("rows of ns1/p1 and shared rows:\n got  %v\n want %v", got, Dump(want))
	}
	if shared := m.Current(nil, testRouters); len(shared.Rows.Policies) != 3 || len(shared.Rows.NATs) != 0 {
		t.Errorf("no pod asked: %d policies, %d NAT rows; want the 3 shared policies only", len(shared.Rows.Policies), len(shared.Rows.NATs))
	}

	plan := Diff(withoutKey(onB, servedKey), cur)
	if err := m.Commit(plan, nil); err != nil { // a move inserts nothing
		t.Fatal(err)
	}
	after := m.Current(pods, testRouters)
	if got := Dump(after.Rows); !slices.Equal(got, Dump(withoutKey(onB, servedKey))) {
		t.Errorf("after the move:\n got  %v\n want %v", got, Dump(withoutKey(onB, servedKey)))
	}
	if p := Diff(withoutKey(onB, servedKey), after); len(p.Changes) != 0 {
		t.Errorf("diff after commit: %v", planLines(p))
	}
	if s, ok := m.ServedPods(FamilyIPv4); !ok || !m.HasServed(FamilyIPv4, "10.244.1.5") || s.UUID == "" {
		t.Errorf("served-pods set: %+v %v; want it with 10.244.1.5", s, ok)
	}
}

// withoutKey returns a copy of st without the address set k.
func withoutKey(st State, k Key) State {
	out := NewState()
	for kk, v := range st.Policies {
		out.Policies[kk] = v
	}
	for kk, v := range st.NATs {
		out.NATs[kk] = v
	}
	for kk, v := range st.AddressSets {
		if kk != k {
			out.AddressSets[kk] = v
		}
	}
	return out
}
