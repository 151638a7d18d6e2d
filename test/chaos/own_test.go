package chaos

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
)

// ownFixture: eip1 (team t1, 172.18.0.60 and .61, held by node2) and eip2 (team t2, strict, 172.18.0.70, held by
// node3); ns1 labelled team, pods p1 (app=web, node1) and p2 (app=db, node2); ns3 selected by no EgressIP with p3.
func ownFixture(ns1Team string) ([]egressipv1.EgressIP, []corev1.Namespace, []corev1.Pod) {
	eip := func(name, team string, strict bool, ips []string, holder string) egressipv1.EgressIP {
		return egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: egressipv1.EgressIPSpec{EgressIPs: ips, Strict: strict,
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": team}}},
			Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{{Node: holder, EgressIP: ips[0]}}}}
	}
	eips := []egressipv1.EgressIP{eip("eip1", "t1", false, []string{"172.18.0.60", "172.18.0.61"}, "node2"),
		eip("eip2", "t2", true, []string{"172.18.0.70"}, "node3")}
	nss := []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "ns1", Labels: map[string]string{"team": ns1Team}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ns3", Labels: map[string]string{"team": "t4"}}}}
	pod := func(ns, name, app, node, ip string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
				PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	return eips, nss, []corev1.Pod{pod("ns1", "p1", "web", "node1", "10.244.1.3"), pod("ns1", "p2", "db", "node2", "10.244.2.3"),
		pod("ns3", "p3", "web", "node3", "10.244.3.3")}
}

// gr is each node's egress source in the fixture (its gateway router address: shared gateway mode).
func gr(node string) (netip.Addr, error) {
	switch node {
	case "node1":
		return netip.MustParseAddr("172.18.0.11"), nil
	case "node2":
		return netip.MustParseAddr("172.18.0.12"), nil
	case "node3":
		return netip.MustParseAddr("172.18.0.13"), nil
	}
	return netip.Addr{}, errors.New("no such node")
}

// TestOwnOf: a served pod's own sources are its EgressIP's spec IPs (assigned or not) and, non-strict, its node's
// address; a strict EgressIP's pods have no node address; an unserved pod has its node's only; another EgressIP's
// address and another node's are foreign; the holders' gateway router addresses only with holderGR, and apart.
func TestOwnOf(t *testing.T) {
	eips, nss, pods := ownFixture("t1")
	o := ownOf(eips, nss, pods, gr, nil)
	for _, c := range []struct {
		pod, src string
		foreign  bool
	}{
		{"ns1/p1", "172.18.0.60", false}, {"ns1/p1", "172.18.0.61", false}, // assigned or not: its EgressIP's
		{"ns1/p1", "172.18.0.11", false}, // its node's (eip1 is not strict)
		{"ns1/p1", "172.18.0.12", true},  // the holder's gateway router: another node's
		{"ns1/p1", "172.18.0.70", true},  // another EgressIP's
		{"ns3/p3", "172.18.0.13", false}, // unserved: its node's
		{"ns3/p3", "172.18.0.60", true},
		{"ns9/p9", "172.18.0.11", true}, // a pod the read does not have: nothing is its own
	} {
		if got := o.judge(c.pod, netip.MustParseAddr(c.src)); (got != "") != c.foreign {
			t.Errorf("%s from %s: judged %q, want foreign %v", c.pod, c.src, got, c.foreign)
		}
	}

	eips, nss, pods = ownFixture("t2") // ns1 served by the strict eip2
	o = ownOf(eips, nss, pods, gr, gr)
	if got := o.judge("ns1/p1", netip.MustParseAddr("172.18.0.11")); got == "" {
		t.Errorf("a strict EgressIP's pod from its node's address: judged its own")
	}
	if got := o.judge("ns1/p1", netip.MustParseAddr("172.18.0.13")); got != whyHolderGR {
		t.Errorf("a pod from its holder's gateway router address with holderGR: judged %q, want %q", got, whyHolderGR)
	}
	if got := o.judge("ns1/p2", netip.MustParseAddr("172.18.0.70")); got != "" {
		t.Errorf("ns1/p2 from eip2's address: judged %q", got)
	}
	if got := o.withoutHolderGR().judge("ns1/p1", netip.MustParseAddr("172.18.0.13")); got == "" || got == whyHolderGR {
		t.Errorf("without the documented moment: judged %q, want foreign", got)
	}

	// A pod of a zone that could not program (interconnect, local gateway mode): a gateway router address is the
	// documented open defect, counted apart; an own source stays its own; outside a window it is foreign.
	eips, nss, pods = ownFixture("t1")
	o = ownOf(eips, nss, pods, gr, nil)
	down := ownSources{}
	down.allow("ns1/p1", netip.MustParseAddr("172.18.0.23"), whyZoneDown)
	down.allow("ns1/p1", netip.MustParseAddr("172.18.0.60"), whyZoneDown)
	o.add(down)
	if got := o.judge("ns1/p1", netip.MustParseAddr("172.18.0.23")); got != whyZoneDown {
		t.Errorf("a zone-down pod from a gateway router address: judged %q, want %q", got, whyZoneDown)
	}
	if got := o.judge("ns1/p1", netip.MustParseAddr("172.18.0.60")); got != "" {
		t.Errorf("a zone-down pod from its EgressIP's address: judged %q, want its own", got)
	}
	if got := o.withoutHolderGR().judge("ns1/p1", netip.MustParseAddr("172.18.0.23")); got == "" || documented(got) {
		t.Errorf("outside a window: judged %q, want foreign", got)
	}
}

// TestWindowForeignSources: a probe inside a window is held to the own sources of every state of the window
// (before, after a change, after), one outside it to the converged state's only; a probe of the quiet time that
// ends in the next window is held to the converged state and the next window's, not the window before.
func TestWindowForeignSources(t *testing.T) {
	h := &harness{own: map[int]ownSources{}, pods: map[string]*podProbe{}}
	eips, nss, pods := ownFixture("t1") // ns1 served by eip1
	h.ownNow = ownOf(eips, nss, pods, gr, nil)
	h.expected = map[string][]netip.Addr{}
	eipsAfter, nssAfter, podsAfter := ownFixture("t2") // relabelled: served by eip2
	after := ownOf(eipsAfter, nssAfter, podsAfter, gr, nil)

	h.openWindow()
	probe := func(src string, inWindow bool, gen int) {
		h.record(probeResult{pod: "ns1/p1", start: time.Now(), src: netip.MustParseAddr(src), inWindow: inWindow, gen: gen})
	}
	probe("172.18.0.60", true, h.windows) // eip1's: the state before
	probe("172.18.0.70", true, h.windows) // eip2's: the state after
	probe("172.18.0.12", true, h.windows) // another node's: foreign
	h.closeWindow(verdict{own: after, sources: map[string][]netip.Addr{"ns1/p1": {netip.MustParseAddr("172.18.0.70")}}})
	if h.probes.foreignInside != 1 || h.probes.ok != 1 || h.probes.insideWindow != 2 {
		t.Fatalf("inside the window: %+v, want 1 foreign (node2's address), 1 ok, 2 unexpected", h.probes)
	}

	probe("172.18.0.60", false, h.windows) // the quiet time: eip1 no longer serves it
	if h.probes.foreignOutside != 1 || h.probes.outsideWindow != 1 {
		t.Fatalf("outside the window: %+v, want 1 foreign, 1 unexpected", h.probes)
	}
	gen := h.windows
	h.openWindow()
	probe("172.18.0.61", false, gen) // started in the quiet time, ended in the next window: eip1's before is not allowed
	h.closeWindow(verdict{own: after, sources: map[string][]netip.Addr{}})
	if h.probes.foreignInside != 2 {
		t.Errorf("a quiet probe ending in the next window from the previous window's state: %+v, want 2 foreign inside", h.probes)
	}
	if !strings.Contains(strings.Join(h.probes.foreign, "\n"), "172.18.0.12 is not its own") {
		t.Errorf("details %q do not name the foreign source", h.probes.foreign)
	}
}

// TestCompareExplain: a source explain does not list, and explain saying dropped while probes arrived, are
// disagreements; a pod none of whose probes arrived is not compared.
func TestCompareExplain(t *testing.T) {
	h := &harness{}
	h.explained = map[string]podExplained{
		"ns1/p1": {r: &master.PodReport{Sources: []string{"172.18.0.60", "172.18.0.61"}}},
		"ns1/p2": {r: &master.PodReport{Sources: []string{"172.18.0.60"}}},
		"ns1/p3": {r: &master.PodReport{Sources: []string{}}},
		"ns1/p4": {r: &master.PodReport{Sources: []string{"172.18.0.11"}}},
	}
	a := netip.MustParseAddr
	h.quietSeen = map[string]map[netip.Addr]int{"ns1/p1": {a("172.18.0.61"): 3}, "ns1/p2": {a("172.18.0.60"): 1, a("172.18.0.12"): 1},
		"ns1/p3": {a("172.18.0.13"): 2}}
	h.compareExplain()
	if h.explain.agree != 1 || h.explain.disagree != 2 || h.explain.none != 1 {
		t.Errorf("got %+v, want 1 agreeing, 2 disagreeing, 1 not compared", h.explain)
	}
	if h.explained != nil || h.quietSeen != nil {
		t.Errorf("the answers were not dropped after the comparison")
	}
}

// TestCloseWindowExplains: closing a window asks explain about every probing pod, with the input of the check's
// read, while the harness holds its lock; explain's Reachability is a set taken at the read, not a call back into
// the harness (which took the same lock: the first soak with explain hung in its setup).
func TestCloseWindowExplains(t *testing.T) {
	h := &harness{own: map[int]ownSources{}, pods: map[string]*podProbe{"ns1/p1": {}}, cut: map[string]bool{"node3": true}}
	eips, nss, pods := ownFixture("t1")
	labelled := map[string]string{annotations.EgressAssignableLabel: ""}
	nodes := []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node1", Labels: labelled}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node3", Labels: labelled}}}
	in, err := explainInput(context.Background(), gwmode.Shared, nil, h.isCut, eips, nodes, nss, pods)
	if err != nil {
		t.Fatal(err)
	}
	if in.Reachable.Reachable("node3") || !in.Reachable.Reachable("node1") {
		t.Errorf("explain's reachability: node3 (cut) %v, node1 %v", in.Reachable.Reachable("node3"), in.Reachable.Reachable("node1"))
	}
	h.openWindow()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.closeWindow(verdict{explain: in})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("closeWindow did not return in 30 s (explain calling back into the harness' lock)")
	}
	if e, ok := h.explained["ns1/p1"]; !ok || e.err != nil || e.r.ServedBy != "eip1" {
		t.Errorf("explained after the check: %+v", h.explained)
	}
}
