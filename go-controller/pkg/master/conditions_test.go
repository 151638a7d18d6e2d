package master

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/conditions"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// expectCondition waits until EgressIP name has condition typ with status and reason.
func (e *env) expectCondition(name, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	e.t.Helper()
	return e.expectConditionSaying(name, typ, status, reason, "")
}

// expectConditionSaying is expectCondition, and the message contains says.
func (e *env) expectConditionSaying(name, typ string, status metav1.ConditionStatus, reason, says string) metav1.Condition {
	e.t.Helper()
	var got metav1.Condition
	e.eventually(fmt.Sprintf("%s condition %s=%s/%s saying %q", name, typ, status, reason, says), func() error {
		eip, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(eip.Status.Conditions, typ)
		if c == nil {
			return fmt.Errorf("no condition %s in %+v", typ, eip.Status.Conditions)
		}
		got = *c
		if c.Status != status || c.Reason != reason || !strings.Contains(c.Message, says) {
			return fmt.Errorf("%s is %s/%s (%s)", typ, c.Status, c.Reason, c.Message)
		}
		if c.ObservedGeneration != eip.Generation {
			return fmt.Errorf("%s observedGeneration %d, object generation %d", typ, c.ObservedGeneration, eip.Generation)
		}
		return nil
	})
	return got
}

// quietSync makes the master sync once for a change that cannot matter (an
// unrelated node annotation) and returns the status writes it made.
func (e *env) quietSync() float64 {
	e.t.Helper()
	e.settle()
	before, syncs := e.metric(metricStatusUpdateTotal), e.syncs.Load()
	e.updateNode("node3", func(n *corev1.Node) { n.Annotations["example.com/unrelated"] = time.Now().String() })
	e.waitSyncs(syncs + 1)
	e.settle()
	return e.metric(metricStatusUpdateTotal) - before
}

// TestConditions: Ready and per-IP conditions follow assignment (a reason while
// unassigned, Ready once every IP is assigned and programmed), and a sync with
// nothing changed writes no status.
func TestConditions(t *testing.T) {
	e := cluster(t, nbserver.Start, gwmode.Shared)
	// Two assignable nodes, three IPs: the third cannot be placed.
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44", "172.18.0.55"}, prodNS, web))
	e.expectStatus("eip-prod", "172.18.0.33@node1", "172.18.0.44@node2")
	e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionFalse, conditions.ReasonNotAssigned)
	e.expectCondition("eip-prod", "Assigned-172.18.0.33", metav1.ConditionTrue, conditions.ReasonAssigned)
	e.expectCondition("eip-prod", "Assigned-172.18.0.55", metav1.ConditionFalse, "NoCapacity")
	if n := e.quietSync(); n != 0 {
		t.Errorf("a sync with nothing changed wrote status %v times", n)
	}

	e.updateNode("node3", labelAssignable)
	e.expectStatus("eip-prod", "172.18.0.33@node1", "172.18.0.44@node2", "172.18.0.55@node3")
	ready := e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed)
	if !strings.HasPrefix(ready.Message, "3/3") {
		t.Errorf("Ready message %q", ready.Message)
	}
	eip, err := e.eip.K8sV1().EgressIPs().Get(context.Background(), "eip-prod", metav1.GetOptions{})
	if err != nil || eip.Status.Assigned != "3/3" {
		t.Errorf("status.assigned %q (%v), want 3/3", eip.Status.Assigned, err)
	}
	if n := e.quietSync(); n != 0 {
		t.Errorf("a sync with nothing changed wrote status %v times", n)
	}

	// Every holder NotReady or unreachable: each IP says so.
	for _, n := range []string{"node1", "node2", "node3"} {
		e.reach.set(n, false)
	}
	e.expectCondition("eip-prod", "Assigned-172.18.0.33", metav1.ConditionFalse, "CandidatesUnreachable")
	e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionFalse, conditions.ReasonNotAssigned)
	got, err := e.status("eip-prod")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("status items %v with every node unreachable", got)
	}
}

// TestConditionsLocalGateway: in local gateway mode an assigned IP is programmed
// only once its holder lists it ready.
func TestConditionsLocalGateway(t *testing.T) {
	e := cluster(t, nbserver.Start, gwmode.Local)
	for _, n := range []string{"node1", "node2", "node3"} {
		e.updateNode(n, ready())
	}
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33"}, prodNS, web))
	e.expectStatus("eip-prod", "172.18.0.33@node1")
	// First "rows not written yet" (the status written before NB), then, once NB
	// is written, the annotation the holder has yet to list the IP in.
	e.expectConditionSaying("eip-prod", conditions.TypeReady, metav1.ConditionFalse, conditions.ReasonNotProgrammed, "egress-ips-ready")
	e.updateNode("node1", ready("172.18.0.33"))
	e.expectCondition("eip-prod", conditions.TypeReady, metav1.ConditionTrue, conditions.ReasonProgrammed)
}

// TestConditionsRealAPIServer: conditions pass the apiserver's validation, kubectl
// wait --for=condition=Ready returns once programmed, the printer columns show
// assigned/requested and Ready, and quiet syncs write nothing.
func TestConditionsRealAPIServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	e := populate(newAPIServerEnv(t, nbserver.Start, gwmode.Shared))
	e.create(egressIP("eip-prod", 0, []string{"172.18.0.33", "172.18.0.44", "172.18.0.55"}, prodNS, web))
	e.expectCondition("eip-prod", "Assigned-172.18.0.55", metav1.ConditionFalse, "NoCapacity")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait := exec.CommandContext(ctx, e.api.Kubectl, "--kubeconfig", e.api.Kubeconfig, "wait", "--for=condition=Ready", "--timeout=25s", "eip/eip-prod")
	var out strings.Builder
	wait.Stdout, wait.Stderr = &out, &out
	if err := wait.Start(); err != nil {
		t.Fatal(err)
	}
	e.updateNode("node3", labelAssignable)
	if err := wait.Wait(); err != nil {
		t.Fatalf("kubectl wait: %v\n%s", err, out.String())
	}
	// Ready is written after the NB commit: the rows are there when wait returns.
	snats := strings.Join(e.snats(), "\n")
	if want := sn("node3", "172.18.0.55", "10.244.1.5", "eip-prod"); !strings.Contains(snats, want) {
		t.Errorf("kubectl wait returned, but NB lacks %s:\n%s", want, snats)
	}
	get, err := exec.Command(e.api.Kubectl, "--kubeconfig", e.api.Kubeconfig, "get", "eip", "eip-prod").CombinedOutput()
	if err != nil || !strings.Contains(string(get), "3/3") || !strings.Contains(string(get), "True") {
		t.Errorf("kubectl get eip: %v\n%s", err, get)
	}
	t.Logf("kubectl get eip:\n%s", get)
	if n := e.quietSync(); n != 0 {
		t.Errorf("a sync with nothing changed wrote status %v times", n)
	}
}
