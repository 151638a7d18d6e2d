package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// TestUpstreamCommandLineStartsMaster runs the ovnkube command line as upstream
// OVN-Kubernetes writes it (--init-master NODE, --enable-egress-ip): the master
// takes its Lease under that node's name and assigns an egress IP.
func TestUpstreamCommandLineStartsMaster(t *testing.T) {
	env := apiserver.Start(t)
	nb := nbserver.Start(t)
	ctx := context.Background()
	admin, eips := seedNodeAndEgressIP(t, env)

	args := []string{"ovnkube", "--init-master", "node1", "--enable-egress-ip", "--kubeconfig", env.Kubeconfig,
		"--nb-address", nb.Addr, "--cluster-subnets", "10.244.0.0/16", "--egressip-reachability-total-timeout", "0",
		"--leader-elect-namespace", "ovn-kubernetes"}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- newApp().RunContext(runCtx, config.NormalizeArgs(args)) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ovnkube %s: %v", strings.Join(args[1:], " "), err)
		}
	}()
	if err := pollWhileRunning(ctx, t, "ovnkube", done, eip1OnNode1(eips)); err != nil {
		t.Fatalf("the master started by %v did not assign eip1: %v", args, err)
	}
	// explain, as an operator types it (flags after the NAME), reads the same.
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	if err := app.RunContext(ctx, normalizeArgs([]string{"ovnkube", "egressip", "explain", "eip1", "-o", "json", "--probe",
		"--kubeconfig", env.Kubeconfig, "--nb-address", nb.Addr})); err != nil {
		t.Fatalf("explain: %v\n%s", err, out.String())
	}
	var r master.EgressIPReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || len(r.IPs) != 1 || r.IPs[0].Holder != "node1" || r.NB == nil {
		t.Errorf("explain eip1: %v %+v\n%s", err, r, out.String())
	}
	lease, err := admin.CoordinationV1().Leases("ovn-kubernetes").Get(ctx, "ovn-egressip-master", metav1.GetOptions{})
	if err != nil || !strings.HasPrefix(ptr.Deref(lease.Spec.HolderIdentity, ""), "node1_") {
		t.Errorf("Lease: %v, holder %v; want it held as node1_<pid>", err, lease)
	}
}

// seedNodeAndEgressIP creates namespace ovn-kubernetes, a Ready egress-assignable
// node1 and EgressIP eip1 (172.18.0.33) that node1 can host.
func seedNodeAndEgressIP(t *testing.T, env *apiserver.Env) (kubernetes.Interface, egressipclientset.Interface) {
	t.Helper()
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ovn-kubernetes"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apiserver.CreateReadyNode(ctx, t, admin, assignableNode1(""))
	eips := egressipclientset.NewForConfigOrDie(env.Config)
	createProdEgressIP(ctx, t, eips, "eip1", "172.18.0.33")
	return admin, eips
}

// pollWhileRunning polls cond every 50 ms for up to 30 s, failing the test at once if the
// process whose exit done reports (named what) ends meanwhile.
func pollWhileRunning(ctx context.Context, t *testing.T, what string, done chan error, cond wait.ConditionWithContextFunc) error {
	t.Helper()
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("%s exited: %v", what, err)
		default:
		}
		return cond(ctx)
	})
}

// eip1OnNode1 is true once EgressIP eip1's status holds one item, on node1.
func eip1OnNode1(eips egressipclientset.Interface) wait.ConditionWithContextFunc {
	return func(ctx context.Context) (bool, error) {
		e, err := eips.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(e.Status.Items) == 1 && e.Status.Items[0].Node == "node1", nil
	}
}
