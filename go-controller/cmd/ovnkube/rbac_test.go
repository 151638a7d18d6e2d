package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
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
	env.ApplyManifests(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)

	// An egress-assignable node. Its pod subnet is on loopback so that the legacy
	// health check (a TCP dial to port 9 of the management IP, "refused" = alive) succeeds.
	apiserver.CreateReadyNode(ctx, t, admin, assignableNode1(`{"default":["127.0.0.0/24"]}`))
	eips := egressipclientset.NewForConfigOrDie(env.Config)
	createProdEgressIP(ctx, t, eips, "eip1", "172.18.0.33")
	createProdEgressIP(ctx, t, eips, "nowhere", "10.99.0.1")

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
	cfg := testMasterConfig(t, nb.Addr, "ovn-egressip")
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(runCtx, cfg, rc) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
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
