package chaos

// The test binary (ovnkube built once), the processes' command lines and the initial objects.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/test/ports"
	"github.com/ovn-egressip/ovn-egressip/test/repo"
)

var ovnkubeBin string

func TestMain(m *testing.M) {
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Println("chaos: skipped: needs root (network namespaces, OVS); CI runs it as root")
		os.Exit(0)
	}
	repo.RunWithOvnkube(m, "chaos", "oeip-chaos-bin", *flagRace, &ovnkubeBin)
}

// startOvnkube starts the layout's processes with the local cluster's command lines (cluster.OvnkubeLeaderArgs,
// OvnkubeNodeArgs): the master (centralized) or cluster manager (interconnect), and one process per node in its
// netns: the node daemon, with the node's zone controller in the interconnect layout.
func (h *harness) startOvnkube() {
	master := &proc{name: h.leader, metrics: ports.FreeLoopbackAddr(h.t)}
	leader := h.c.Ovnkube(h.c.Kubeconfig(), "2", h.c.OvnkubeLeaderArgs()...)
	leader.Metrics = master.metrics
	if *flagReach > 0 {
		leader.Extra = []string{"--egressip-reachability-total-timeout", flagReach.String()}
	}
	master.argv = append([]string{ovnkubeBin}, leader.Args()...)
	if err := h.sup.add(master); err != nil {
		h.t.Fatal(err)
	}
	for i, n := range h.c.Nodes() {
		ns, err := h.c.NodeNetns(n.Name)
		if err != nil {
			h.t.Fatal(err)
		}
		p := &proc{name: "node-" + n.Name, netns: ns, metrics: fmt.Sprintf("127.0.0.1:%d", 29200+i)}
		daemon := h.c.Ovnkube(h.c.Kubeconfig(), "2", h.c.OvnkubeNodeArgs(n.Name)...)
		daemon.Metrics = p.metrics
		p.argv = append([]string{ovnkubeBin}, daemon.Args()...)
		if err := h.sup.add(p); err != nil {
			h.t.Fatal(err)
		}
	}
}

// setup: namespaces ns1..ns4 (team=t1..t4), two egress-assignable nodes, one EgressIP, four pods: two that eip1
// serves whatever its pod selector (ns1, app=web), on node1 (no egress node: in the interconnect layout a zone
// that reroutes over the transit switch) and node2 (an egress node), and two at random.
func (h *harness) setup() {
	h.openWindow() // the setup's own window: its probes are held to their own sources, not to a converged state
	for i := 1; i <= namespaces; i++ {
		h.must(h.ensureNamespace(fmt.Sprintf("ns%d", i), fmt.Sprintf("t%d", i)))
	}
	h.must(h.labelNode("node2", true))
	h.must(h.labelNode("node3", true))
	h.must(h.createEIP(1))
	h.must(h.addPodAt("node1", "ns1", "web"))
	h.must(h.addPodAt("node2", "ns1", "web"))
	for i := 0; i < 2; i++ {
		h.must(h.addPod())
	}
	h.must(h.noteState())
	start := time.Now()
	if v, ok := h.converge(false); !ok {
		h.t.Fatalf("the initial state did not converge in %s: %v", *flagConverge, v)
	}
	h.logf("setup converged in %.1fs", time.Since(start).Seconds())
}

func (h *harness) must(err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

// retry retries an API call while the apiserver is away (a restart injected by the harness itself).
func retry(ctx context.Context, f func() error) error {
	var err error
	for i := 0; i < 120; i++ {
		if err = f(); err == nil || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return err
}

func (h *harness) ensureNamespace(name, team string) error {
	return retry(h.ctx, func() error {
		ns, err := h.c.Client().CoreV1().Namespaces().Get(h.ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = h.c.Client().CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
				Name: name, Labels: map[string]string{"team": team}}}, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		ns.Labels = map[string]string{"team": team}
		_, err = h.c.Client().CoreV1().Namespaces().Update(h.ctx, ns, metav1.UpdateOptions{})
		return err
	})
}
