package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// explain runs `ovnkube egressip explain args... -o json` and decodes its report into v.
func (e *env) explain(v any, args ...string) string {
	e.t.Helper()
	out, _ := e.explainWith(v, e.explainNB(), args...)
	return out
}

// explainWith is explain with the NB flags nb; it also returns what explain wrote to stderr.
func (e *env) explainWith(v any, nb []string, args ...string) (string, string) {
	e.t.Helper()
	argv := append([]string{"egressip", "explain"}, args...)
	argv = append(append(argv, "-o", "json", "--probe", "--kubeconfig", e.c.Kubeconfig(), "--gateway-mode", string(e.mode)), nb...)
	cmd := exec.Command(ovnkubeBin, argv...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("ovnkube %s: %v\n%s%s", strings.Join(argv, " "), err, out, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		e.t.Fatalf("explain output: %v\n%s", err, out)
	}
	return string(out), stderr.String()
}

// explainNB are explain's NB flags: the NB, or (interconnect layout) every zone's.
func (e *env) explainNB() []string {
	if !e.interconnect() {
		return []string{"--nb-address", e.c.NBAddress()}
	}
	var out []string
	for _, n := range e.c.Nodes() {
		out = append(out, "--zone-nb-address", n.Name+"="+e.c.ZoneNBAddress(n.Name))
	}
	return out
}

// explainText runs explain in plain text (logged, for docs).
func (e *env) explainText(args ...string) string {
	e.t.Helper()
	argv := append([]string{"egressip", "explain"}, args...)
	argv = append(append(argv, "--probe", "--kubeconfig", e.c.Kubeconfig(), "--gateway-mode", string(e.mode)), e.explainNB()...)
	out, err := exec.Command(ovnkubeBin, argv...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("ovnkube %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	e.t.Logf("$ ovnkube egressip explain %s\n%s", strings.Join(args, " "), out)
	return string(out)
}

// servedByOneHolder lists what an explain report of an EgressIP with one IP, serving only pod, says that is not so:
// the IP held, the pod served and Ready computed True. Each item names the field and its value (the report's pointer
// fields printed with %+v are addresses, which say nothing).
func servedByOneHolder(r master.EgressIPReport, pod string) []string {
	var bad []string
	if len(r.IPs) != 1 || r.IPs[0].Holder == "" {
		bad = append(bad, fmt.Sprintf("ips %+v, want one with a holder", r.IPs))
	}
	if len(r.Served) != 1 || r.Served[0].Pod != pod {
		bad = append(bad, fmt.Sprintf("served %+v, want only %s", r.Served, pod))
	}
	switch {
	case r.Computed == nil:
		bad = append(bad, "no computed Ready")
	case r.Computed.Status != metav1.ConditionTrue:
		bad = append(bad, fmt.Sprintf("computed Ready %s (%s: %s)", r.Computed.Status, r.Computed.Reason, r.Computed.Message))
	}
	return bad
}

// nbDiff says how an explain report's NB rows differ from what they should be ("" when as desired).
func nbDiff(r master.EgressIPReport) string {
	switch {
	case r.NB == nil:
		return "no nb report"
	case len(r.NB.Missing)+len(r.NB.Extra) != 0:
		return fmt.Sprintf("nb missing %q, extra %q", r.NB.Missing, r.NB.Extra)
	}
	return ""
}

func (e *env) podIP(ns, name string) netip.Addr {
	e.t.Helper()
	p, err := e.c.Client().CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return netip.MustParseAddr(p.Status.PodIP)
}

// waitCondition waits until EgressIP name has condition typ with reason.
func (e *env) waitCondition(name, typ, reason string) metav1.Condition {
	e.t.Helper()
	var last []metav1.Condition
	var found metav1.Condition
	if waitfor.Until(context.Background(), 20*time.Second, 100*time.Millisecond, func() (bool, error) {
		eip, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = eip.Status.Conditions
		if c := meta.FindStatusCondition(last, typ); c != nil && c.Reason == reason {
			found = *c
			return true, nil
		}
		return false, nil
	}) == nil {
		return found
	}
	e.t.Fatalf("EgressIP %s: condition %s never had reason %s; conditions %+v", name, typ, reason, last)
	return metav1.Condition{}
}

// podServer serves, inside pod ns/name, one line "tcp-peer=<source>" per connection
// on port 9100 (what test/cluster's echo server says), for pod-to-pod requests.
func (e *env) podServer(ns, name string) string {
	e.t.Helper()
	addr := net.JoinHostPort(e.podIP(ns, name).String(), "9100")
	l, err := cluster.ListenIn(cluster.PodNetnsName(ns, name), "tcp", addr)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			host := c.RemoteAddr().(*net.TCPAddr).IP.String()
			w := bufio.NewWriter(c)
			fmt.Fprintf(w, "tcp-peer=%s\n", host)
			_ = w.Flush()
			c.Close()
		}
	}()
	return addr
}

// runOperatorCases: conditions and kubectl wait, explain against what the echo
// server sees, node selection, strict egress. The EgressIP "prod" (eipA, pods
// app=web of env=prod) is assigned when they start and when they end.
func runOperatorCases(t *testing.T, e *env, mode gwmode.Mode) {
	if !ipv4Only(t, e) {
		return
	}
	eipA, eipB := eipA[4], eipB[4]
	egressA, egressB := netip.MustParseAddr(eipA), netip.MustParseAddr(eipB)
	node1 := e.nodeSource("node1")
	second := func(strict bool, nodeSel string, ips ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata:\n  name: second\nspec:\n  strict: %v\n  egressIPs:\n", strict)
		for _, ip := range ips {
			fmt.Fprintf(&b, "  - %q\n", ip)
		}
		b.WriteString("  namespaceSelector:\n    matchLabels:\n      env: prod\n")
		if nodeSel != "" {
			fmt.Fprintf(&b, "  nodeSelector:\n    matchLabels:\n      zone: %s\n", nodeSel)
		}
		return b.String()
	}

	t.Run("9-ready-wait-and-explain", func(t *testing.T) {
		e.t = t
		// "second" selects every pod of prod: it serves db1; web1 and web3 stay with
		// the older "prod", which has an assigned IP.
		e.kubectl(second(false, "", eipB), "apply", "-f", "-")
		start := time.Now()
		e.kubectl("", "wait", "--for=condition=Ready", "--timeout=20s", "eip/second")
		t.Logf("kubectl wait --for=condition=Ready eip/second returned after %s", time.Since(start).Round(time.Millisecond))
		e.eventually("prod", "db1", egressB)
		e.kubectl("", "wait", "--for=condition=Ready", "--timeout=5s", "eip/prod")
		t.Logf("kubectl get eip:\n%s", e.kubectl("", "get", "eip"))

		var r master.EgressIPReport
		report := e.explain(&r, "second")
		if bad := servedByOneHolder(r, "prod/db1"); len(bad) > 0 {
			t.Errorf("explain second, once Ready: %s\n%s", strings.Join(bad, "; "), report)
		}
		// Its rows as desired in every zone, at once. In the interconnect layout in shared gateway mode a zone whose
		// node released an egress IP keeps serving that IP, for any EgressIP that asks for it, until a grace after the
		// linger end it published (eipB was prod's, on another node, in case 2): explain reads that end too.
		if diff := nbDiff(r); diff != "" {
			t.Errorf("explain second, once Ready: %s\n%s", diff, report)
			e.explainText("second")
		}
		if e.interconnect() {
			// One zone's NB given as --nb-address (a zone controller's own config): explain
			// tells it is a zone's by its transit switch and compares it as that zone's.
			var z master.EgressIPReport
			out, stderr := e.explainWith(&z, []string{"--nb-address", e.c.ZoneNBAddress("node1")}, "second")
			if diff := nbDiff(z); diff != "" || !strings.Contains(stderr, "is zone node1's") {
				t.Errorf("explain second --nb-address <zone node1's NB>: %q, stderr %q\n%s", diff, stderr, out)
			}
		}
		servedOther := map[string]string{}
		for _, p := range r.ServedOther {
			servedOther[p.Pod] = p.ServedBy
		}
		if servedOther["prod/web1"] != "prod" || servedOther["prod/web3"] != "prod" {
			t.Errorf("explain second: selected but served by another: %v", servedOther)
		}
		for _, n := range r.IPs[0].Nodes {
			if n.Verdict == "Unreachable" {
				t.Errorf("explain --probe: node %s unreachable while the master holds IPs on it", n.Node)
			}
		}
		if slices.ContainsFunc(r.Notes, func(s string) bool { return strings.Contains(s, "not probed") }) {
			t.Errorf("explain --probe still says it did not probe: %v", r.Notes)
		}
		// Each pod's source as explain says, against what the echo server sees.
		for _, p := range [][2]string{{"prod", "db1"}, {"prod", "web1"}, {"dev", "web1"}} {
			var pr master.PodReport
			e.explain(&pr, "--pod", p[0]+"/"+p[1])
			got, err := e.source(p[0], p[1])
			if err != nil || !slices.Contains(pr.Sources, got.String()) {
				t.Errorf("%s/%s: echo saw %v (%v); explain says %v (%s)", p[0], p[1], got, err, pr.Sources, pr.Why)
			}
		}

		// Unassigned IPs, one per reason admission cannot see.
		nodeIP := e.mustNode("node2").NodeIP.String()
		e.kubectl(second(false, "", eipB, "10.99.0.1", nodeIP, eipA), "apply", "-f", "-")
		want := map[string]string{"10.99.0.1": "NoNodeWithMatchingNetwork", nodeIP: "EqualsNodeAddress", eipA: "ClaimedByOtherEgressIP"}
		for ip, reason := range want {
			e.waitCondition("second", "Assigned-"+ip, reason)
		}
		e.waitCondition("second", "Ready", "NotAllAssigned")
		e.explain(&r, "second")
		for _, ip := range r.IPs {
			if w, ok := want[ip.IP]; ok && (ip.Holder != "" || ip.Reason != w) {
				t.Errorf("explain second: %s: %+v, want reason %s", ip.IP, ip, w)
			}
		}
		t.Logf("kubectl describe eip second:\n%s", e.kubectl("", "describe", "eip", "second"))
		e.kubectl(second(false, "", eipB), "apply", "-f", "-")
		e.waitCondition("second", "Ready", "Programmed")

		// A row removed behind the master's back: explain reports it before the
		// master repairs it (the master is stopped meanwhile; in the interconnect
		// layout, the zone controller of db1's node, node1, in its zone's NB).
		nb := e.c.NBAddress()
		stopWriter, startWriter := func() { e.stopMaster("master-a", syscall.SIGTERM) }, func() { e.startMaster("master-a", "127.0.0.1:29101") }
		if e.interconnect() {
			nb = e.c.ZoneNBAddress("node1")
			stopWriter, startWriter = func() { e.stopNode("node1", syscall.SIGTERM) }, func() { e.startNode("node1") }
		}
		stopWriter()
		writerDown := true
		defer func() {
			if writerDown { // this case failed meanwhile: the cases after it need the writer
				startWriter()
			}
		}()
		dbIP := e.podIP("prod", "db1").String()
		out, err := exec.Command("ovn-nbctl", "--db="+nb, "--no-leader-only", "--bare", "--columns=_uuid", "find",
			"Logical_Router_Policy", `external_ids:"k8s.ovn.org/pod"="prod/db1"`).CombinedOutput()
		uuid := strings.TrimSpace(string(out))
		if err != nil || uuid == "" {
			t.Fatalf("find the reroute row of prod/db1: %v %s", err, out)
		}
		if out, err := exec.Command("ovn-nbctl", "--db="+nb, "--no-leader-only", "remove", "Logical_Router",
			"ovn_cluster_router", "policies", uuid).CombinedOutput(); err != nil {
			t.Fatalf("remove the row: %v %s", err, out)
		}
		e.explain(&r, "second")
		if len(r.NB.Missing) != 1 || !strings.Contains(r.NB.Missing[0], dbIP) || r.Computed.Status != metav1.ConditionFalse {
			t.Errorf("explain after the row went: missing %v, computed Ready %+v", r.NB.Missing, r.Computed)
		}
		var pr master.PodReport
		e.explain(&pr, "--pod", "prod/db1")
		got := e.eventually("prod", "db1", e.nodeSource("node1"))
		if !slices.Contains(pr.Sources, got.String()) {
			t.Errorf("row gone: echo saw %v, explain --pod prod/db1 says %v (%s)", got, pr.Sources, pr.Why)
		}
		e.explainText("second")
		startWriter()
		writerDown = false
		e.eventually("prod", "db1", egressB)
		e.explain(&r, "second")
		if len(r.NB.Missing) != 0 {
			t.Errorf("after the master's repair: missing %v", r.NB.Missing)
		}
	})

	t.Run("10-node-selector", func(t *testing.T) {
		e.t = t
		e.kubectl("", "label", "node", "node2", "zone=a", "--overwrite")
		e.kubectl("", "label", "node", "node3", "zone=b", "--overwrite")
		defer e.kubectl("", "label", "node", "node2", "node3", "zone-")
		e.kubectl(second(false, "b", eipB), "apply", "-f", "-")
		e.kubectl("", "patch", "eip", "prod", "--type=merge", "-p", `{"spec":{"nodeSelector":{"matchLabels":{"zone":"a"}}}}`)
		e.waitStatus("prod", "on node2", func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, eipA) == "node2" })
		e.waitStatus("second", "on node3", func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, eipB) == "node3" })
		e.eventually("prod", "web1", egressA)
		e.eventually("prod", "db1", egressB)

		// Move prod to node3 while web1 sends requests: every answer shows eipA.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		seen := map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				got, err := e.source("prod", "web1")
				mu.Lock()
				if err != nil {
					seen["error"]++
				} else {
					seen[got.String()]++
				}
				mu.Unlock()
				//nolint:forbidigo // the prober's pace: one request every 20 ms across the move is the traffic checked
				time.Sleep(20 * time.Millisecond)
			}
		}()
		e.kubectl("", "patch", "eip", "prod", "--type=merge", "-p", `{"spec":{"nodeSelector":{"matchLabels":{"zone":"b"}}}}`)
		e.waitStatus("prod", "moved to node3", func(it []egressipv1.EgressIPStatusItem) bool { return holder(it, eipA) == "node3" })
		e.waitCondition("prod", "Ready", "Programmed")
		if mode == gwmode.Local {
			waitHostClean(t, e, "node2", eipA)
		}
		//nolint:forbidigo // the prober's window: a few more requests after the move are part of what is checked
		time.Sleep(300 * time.Millisecond)
		close(stop)
		wg.Wait()
		t.Logf("sources seen by the echo server across the selector edit: %v", seen)
		for src, n := range seen {
			if src != eipA && src != "error" {
				t.Errorf("%d requests left with %s during the move, want only %s", n, src, eipA)
			}
		}
		if seen[eipA] == 0 {
			t.Errorf("no request got through during the move: %v", seen)
		}
		e.kubectl("", "patch", "eip", "prod", "--type=json", "-p", `[{"op":"remove","path":"/spec/nodeSelector"}]`)
		e.kubectl(second(false, "", eipB), "apply", "-f", "-")
	})

	t.Run("11-strict-egress", func(t *testing.T) {
		e.t = t
		web3 := e.podServer("prod", "web3")
		dbIP := e.podIP("prod", "db1")
		e.kubectl(second(true, "", eipB), "apply", "-f", "-")
		e.eventually("prod", "db1", egressB)
		e.labelAssignable("node2", false)
		e.labelAssignable("node3", false)
		defer e.labelAssignable("node3", true)
		defer e.labelAssignable("node2", true)
		e.waitCondition("second", "Assigned-"+eipB, "CandidatesNotLabelled")
		// node2 and node3 may both be in a release linger of eipB now (it moved node2 -> node3, then had no node):
		// until the last published linger end, db1 is rerouted to them and may still leave with eipB. Explain reads
		// those ends: once it says dropped, the traffic must be dropped.
		var pr master.PodReport
		if err := waitfor.Until(context.Background(), 30*time.Second, 200*time.Millisecond, func() (bool, error) {
			e.explain(&pr, "--pod", "prod/db1")
			return len(pr.Sources) == 0, nil
		}); err != nil {
			t.Fatalf("explain --pod prod/db1 under strict: sources %v, want none (dropped) once the lingers end: %s", pr.Sources, pr.Why)
		}
		// Strict: to the external host, nothing; to another pod, as usual.
		if waitfor.Until(context.Background(), 20*time.Second, 100*time.Millisecond, func() (bool, error) {
			_, err := e.source("prod", "db1")
			if err != nil {
				t.Logf("strict, no holder: request from prod/db1 to the external host: %v", err)
			}
			return err != nil, nil
		}) != nil {
			t.Fatal("strict EgressIP with no holder: prod/db1 still reaches the external host")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := cluster.RequestFrom(ctx, cluster.PodNetnsName("prod", "db1"), "tcp", web3, 2*time.Second)
		cancel()
		if err != nil || got != dbIP {
			t.Errorf("strict: prod/db1 -> prod/web3 (%s): saw %v (%v), want the pod's own %v", web3, got, err, dbIP)
		}
		e.explain(&pr, "--pod", "prod/db1")
		if len(pr.Sources) != 0 {
			t.Errorf("explain --pod prod/db1 under strict, after the request failed: sources %v, want none (dropped): %s", pr.Sources, pr.Why)
		}
		// Strict off (default): it leaves with its node's (shared: gateway router's) address.
		e.kubectl(second(false, "", eipB), "apply", "-f", "-")
		e.eventually("prod", "db1", node1)
		// Relabel: the egress IP again.
		e.labelAssignable("node2", true)
		e.labelAssignable("node3", true)
		e.eventually("prod", "db1", egressB)
		e.eventually("prod", "web1", egressA)
		e.kubectl("", "delete", "eip", "second")
		e.eventually("prod", "db1", node1)
	})
}
