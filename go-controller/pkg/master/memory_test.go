package master

import (
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/assign"
)

func versioned(name, uid, rv string, items ...egressipv1.EgressIPStatusItem) *egressipv1.EgressIP {
	return &egressipv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("u-" + uid), ResourceVersion: rv},
		Status:     egressipv1.EgressIPStatus{Items: items},
	}
}

// TestStatusMemory: until the cache shows our write, the master works from what
// it wrote (and writes on top of the new resourceVersion); then from the cache.
func TestStatusMemory(t *testing.T) {
	m := newStatusMemory()
	old := egressipv1.EgressIPStatusItem{Node: "node1", EgressIP: "172.18.0.33"}
	moved := egressipv1.EgressIPStatusItem{Node: "node2", EgressIP: "172.18.0.33"}
	cached := versioned("e", "1", "10", old)
	m.remember(cached, versioned("e", "1", "11", moved))

	st, rv := m.current(cached)
	items := st.Items // cache still at 10
	if !slices.Equal(items, []egressipv1.EgressIPStatusItem{moved}) || rv != "11" {
		t.Errorf("behind cache: got %v@%s, want our write %v@11", items, rv, moved)
	}
	st, rv = m.current(versioned("e", "1", "11", moved))
	items = st.Items // caught up
	if !slices.Equal(items, []egressipv1.EgressIPStatusItem{moved}) || rv != "11" {
		t.Errorf("caught up: got %v@%s", items, rv)
	}
	if _, ok := m.written["e"]; ok {
		t.Error("memory kept after the cache caught up")
	}
	m.remember(cached, versioned("e", "1", "11", moved))
	st, _ = m.current(versioned("e", "2", "10", old))
	items = st.Items // recreated object, same name
	if !slices.Equal(items, []egressipv1.EgressIPStatusItem{old}) {
		t.Errorf("recreated EgressIP: got %v, want the cache's %v", items, old)
	}
	m.remember(cached, versioned("e", "1", "", moved)) // unversioned client: never remembered
	if _, ok := m.written["e"]; ok {
		t.Error("remembered a write without resourceVersion")
	}
	m.remember(cached, versioned("e", "1", "11", moved))
	m.prune(map[string]bool{})
	if len(m.written) != 0 {
		t.Error("prune kept a deleted EgressIP")
	}
}

// TestReporter: a problem is reported once while it lasts, again when it comes back.
func TestReporter(t *testing.T) {
	rec := record.NewFakeRecorder(100)
	r := newReporter(rec)
	eip := versioned("e", "1", "1")
	p := assign.Problem{EgressIP: "e", IP: "10.0.0.1", Reason: assign.NoMatchingNodeFound, Message: "no node"}
	r.report(eip, []assign.Problem{p}, nil)
	r.report(eip, []assign.Problem{p}, nil)
	r.report(eip, nil, nil)
	r.report(eip, []assign.Problem{p}, errors.New("spec.podSelector: bad"))
	r.report(eip, []assign.Problem{p}, errors.New("spec.podSelector: bad"))
	close(rec.Events)
	var got []string
	for ev := range rec.Events {
		got = append(got, ev)
	}
	want := []string{
		"Warning NoMatchingNodeFound no node",
		"Warning NoMatchingNodeFound no node",
		"Warning InvalidSelector spec.podSelector: bad",
	}
	if !slices.Equal(got, want) {
		t.Errorf("events:\n got  %q\n want %q", got, want)
	}
}

// TestStatusMemoryTwoWrites: two writes in a row (items, then conditions once
// programmed) before the cache shows either: a cache showing the first write is
// still behind the second.
func TestStatusMemoryTwoWrites(t *testing.T) {
	m := newStatusMemory()
	one := egressipv1.EgressIPStatusItem{Node: "node1", EgressIP: "172.18.0.33"}
	cached := versioned("e", "1", "10")
	first := versioned("e", "1", "11", one)
	m.remember(cached, first)
	second := versioned("e", "1", "12", one)
	second.Status.Assigned = "1/1"
	m.remember(cached, second)
	st, rv := m.current(first) // the cache caught up with the first write only
	if rv != "12" || st.Assigned != "1/1" {
		t.Errorf("cache at the first write: got %+v@%s, want the second write @12", st, rv)
	}
	st, rv = m.current(second)
	if rv != "12" || st.Assigned != "1/1" {
		t.Errorf("caught up: got %+v@%s", st, rv)
	}
}
