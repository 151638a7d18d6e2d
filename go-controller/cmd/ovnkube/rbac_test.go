package main

import (
	"context"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// TestMasterWorksWithManifestRBAC applies dist/manifests/ovnkube-egressip.yaml to a
// real apiserver and runs the master as its ServiceAccount, with leader election
// in the manifest's namespace: it takes the Lease, assigns an egress IP, writes
// status and Events, and is never denied (no 403 at all).
func TestMasterWorksWithManifestRBAC(t *testing.T) {
	env := apiserver.Start(t)
	nb := nbserver.Start(t)
	root, err := apiserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(env.Kubectl, "--kubeconfig", env.Kubeconfig, "apply", "-f",
		filepath.Join(root, "dist", "manifests", "ovnkube-egressip.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)

	// An egress-assignable node. Its pod subnet is on loopback so that the legacy
	// health check (a TCP dial to port 9 of the management IP, "refused" = alive) succeeds.
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1",
		Labels: map[string]string{annotations.EgressAssignableLabel: ""},
		Annotations: map[string]string{
			annotations.PrimaryIfAddr:          `{"ipv4":"172.18.0.11/16"}`,
			annotations.GatewayRouterLRPIfAddr: `{"ipv4":"100.64.0.2/16"}`,
			annotations.NodeSubnets:            `{"default":["127.0.0.0/24"]}`,
		}}}
	created, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eips := egressipclientset.NewForConfigOrDie(env.Config)
	for _, e := range []*egressipv1.EgressIP{
		{ObjectMeta: metav1.ObjectMeta{Name: "eip1"}, Spec: egressipv1.EgressIPSpec{EgressIPs: []string{"172.18.0.33"},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "nowhere"}, Spec: egressipv1.EgressIPSpec{EgressIPs: []string{"10.99.0.1"},
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
	} {
		if _, err := eips.K8sV1().EgressIPs().Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The master as the manifest's ServiceAccount, every response status recorded.
	var mu sync.Mutex
	var denied []string
	rc := rest.CopyConfig(env.Config)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:ovn-egressip:ovnkube-egressip-master"}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode == http.StatusForbidden {
				mu.Lock()
				denied = append(denied, r.Method+" "+r.URL.Path)
				mu.Unlock()
			}
			return resp, err
		})
	})
	cfg := &config.Config{
		InitMaster: true, EgressIPEnable: true, GatewayMode: gwmode.Shared, NBAddresses: []string{nb.Addr},
		ClusterSubnets: mustPrefixes(t, "10.244.0.0/16"), JoinSubnets: mustPrefixes(t, "100.64.0.0/16"),
		HealthCheckPort: 0, ReachabilityInterval: 100 * time.Millisecond, ReachabilityTotalTimeout: time.Second,
		NBConnectTimeout: 5 * time.Second,
		LeaderElection:   true, LeaderElectionNamespace: "ovn-egressip", LeaderElectionName: "ovn-egressip-master",
		LeaderElectionLeaseDuration: 4 * time.Second, LeaderElectionRenewDeadline: 3 * time.Second,
		LeaderElectionRetryPeriod: 200 * time.Millisecond,
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, cfg, rc) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		e, err := eips.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(e.Status.Items) != 1 || e.Status.Items[0] != (egressipv1.EgressIPStatusItem{Node: "node1", EgressIP: "172.18.0.33"}) {
			return false, nil
		}
		evs, err := admin.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=nowhere"})
		return err == nil && len(evs.Items) > 0, err
	})
	if err != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the master as its ServiceAccount did not assign eip1 and report nowhere: %v (denied: %v)", err, denied)
	}
	lease, err := admin.CoordinationV1().Leases("ovn-egressip").Get(ctx, "ovn-egressip-master", metav1.GetOptions{})
	if err != nil || !strings.Contains(ptr.Deref(lease.Spec.HolderIdentity, ""), "_") {
		t.Errorf("Lease ovn-egressip/ovn-egressip-master: %v, holder %v", err, lease)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(denied) > 0 {
		t.Errorf("requests denied to the master's ServiceAccount: %v", denied)
	}
}
