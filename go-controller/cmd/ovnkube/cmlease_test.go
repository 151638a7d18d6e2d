package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// TestClusterManagersShareOneLease (interconnect layout): two cluster managers (`--init-cluster-manager cm-a` and
// `cm-b`, no NB) run against one apiserver. Only the holder of the Lease assigns and writes EgressIP status: while
// cm-a holds it, cm-b has written nothing although cm-a wrote a status change; when cm-a stops, cm-b takes the Lease
// and writes the next change itself.
func TestClusterManagersShareOneLease(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	env := apiserver.Start(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	eips := egressipclientset.NewForConfigOrDie(env.Config)
	for i := 1; i <= 2; i++ {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node%d", i),
			Labels: map[string]string{annotations.EgressAssignableLabel: ""},
			Annotations: map[string]string{
				annotations.PrimaryIfAddr:               fmt.Sprintf(`{"ipv4":"172.18.0.1%d/16"}`, i),
				annotations.NodeID:                      fmt.Sprint(i + 1),
				annotations.NodeTransitSwitchPortIfAddr: fmt.Sprintf(`{"ipv4":"100.88.0.%d/16"}`, i+1),
				annotations.NodeSubnets:                 `{"default":["127.0.0.0/24"]}`,
			}}}
		apiserver.CreateReadyNode(ctx, t, admin, n)
	}
	createProdEgressIP(ctx, t, eips, "eip1", "172.18.0.33")
	cfg := func(node, metrics string) *config.Config {
		return withTestLease(&config.Config{
			InitClusterManager: true, ClusterManagerNode: node, EgressIPEnable: true, GatewayMode: gwmode.Shared,
			ClusterSubnets: mustPrefixes(t, "10.244.0.0/16"), JoinSubnets: mustPrefixes(t, "100.64.0.0/16"),
			ReachabilityInterval: 100 * time.Millisecond, ReachabilityTotalTimeout: time.Second,
			MetricsBindAddress: metrics,
		}, "default")
	}
	waitFor := func(what string, d time.Duration, f func() bool) {
		t.Helper()
		if err := waitfor.Until(ctx, d, 50*time.Millisecond, func() (bool, error) { return f(), nil }); err != nil {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
	holder := func() string {
		l, err := admin.CoordinationV1().Leases("default").Get(ctx, "ovn-egressip-master", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return leaseHolder(l)
	}
	status := func() string {
		e, err := eips.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		var parts []string
		for _, it := range e.Status.Items {
			parts = append(parts, it.EgressIP+"@"+it.Node)
		}
		return strings.Join(parts, " ")
	}
	statusUpdates := func(addr string) float64 { return scrape(addr, "ovnkube_master_egress_ip_status_updates_total") }

	aAddr, bAddr := freeAddr(t), freeAddr(t)
	aCtx, stopA := context.WithCancel(ctx)
	defer stopA()
	bCtx, stopB := context.WithCancel(ctx)
	defer stopB()
	aDone, bDone := make(chan error, 1), make(chan error, 1)
	go func() { aDone <- run(aCtx, cfg("cm-a", aAddr), env.Config) }()
	waitFor("cm-a holds the Lease", 30*time.Second, func() bool { return strings.HasPrefix(holder(), "cm-a_") })
	waitFor("cm-a assigns eip1", 30*time.Second, func() bool { return strings.HasPrefix(status(), "172.18.0.33@") })
	go func() { bDone <- run(bCtx, cfg("cm-b", bAddr), env.Config) }()
	waitFor("cm-b serves its metrics", 30*time.Second, func() bool { return scrape(bAddr, "go_goroutines") > 0 })

	// A change while cm-a leads: cm-a writes it, cm-b (running, not leading) writes nothing.
	before := statusUpdates(aAddr)
	e, err := eips.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.Spec.EgressIPs = append(e.Spec.EgressIPs, "172.18.0.44")
	if _, err := eips.K8sV1().EgressIPs().Update(ctx, e, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("cm-a writes the second IP's status", 30*time.Second, func() bool {
		return strings.Count(status(), "@") == 2 && statusUpdates(aAddr) > before
	})
	if got := statusUpdates(bAddr); got > 0 {
		t.Errorf("cm-b wrote %v status updates while cm-a held the Lease", got)
	}
	if h := holder(); !strings.HasPrefix(h, "cm-a_") {
		t.Errorf("Lease holder %q while cm-a runs", h)
	}

	// cm-a stops: cm-b takes the Lease and writes the next change.
	stopA()
	if err := <-aDone; err != nil {
		t.Errorf("cm-a: %v", err)
	}
	waitFor("cm-b holds the Lease", 30*time.Second, func() bool { return strings.HasPrefix(holder(), "cm-b_") })
	n, err := admin.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Labels, annotations.EgressAssignableLabel)
	if _, err := admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("cm-b writes status without node1", 30*time.Second, func() bool {
		s := status()
		return s != "" && !strings.Contains(s, "@node1") && statusUpdates(bAddr) > 0
	})
	stopB()
	if err := <-bDone; err != nil {
		t.Errorf("cm-b: %v", err)
	}
}

// leaseHolder is a Lease's holder identity ("" when none).
func leaseHolder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
