package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egressip/ovn-egressip/go-controller/internal/leaderelect"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/nbstate"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/metrics"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// scrape returns the value of an unlabelled counter from a /metrics endpoint (-1 when absent or unreachable).
func scrape(addr, name string) float64 {
	m, err := metrics.Scrape(context.Background(), nil, metrics.URL(addr))
	if err != nil {
		return -1
	}
	if v, ok := m.Value(name); ok {
		return v
	}
	return -1
}

// scrapeSum is the sum of a metric's series (every label set) at addr's /metrics, or -1.
func scrapeSum(addr, name string) float64 {
	m, err := metrics.Scrape(context.Background(), nil, metrics.URL(addr))
	if err != nil {
		return -1
	}
	return m.Sum(name)
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestMasterLeaseAcrossAPIServerRestart: a master with leader election loses its
// Lease when kube-apiserver is away longer than the renew deadline, and then
// exits with a *leaderelect.LostError (what kube-controller-manager and
// controller-runtime managers do: the kubelet restarts it clean), leaving every
// NB row in place. Started again once the apiserver is back (the kubelet's
// restart), it takes the Lease and its start-up sync writes nothing: no NB
// transaction, no status update.
func TestMasterLeaseAcrossAPIServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	env := apiserver.Start(t)
	nb := nbserver.Start(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)
	apiserver.CreateReadyNode(ctx, t, admin, assignableNode1(`{"default":["127.0.0.0/24"]}`))
	eips := egressipclientset.NewForConfigOrDie(env.Config)
	createProdEgressIP(ctx, t, eips, "eip1", "172.18.0.33")
	cfg := func(metrics string) *config.Config {
		c := testMasterConfig(t, nb.Addr, "default")
		c.MetricsBindAddress = metrics
		return c
	}
	nbc := nb.Client(t)
	rows := func() []string {
		cur, err := nbstate.ReadCurrent(ctx, nbc)
		if err != nil {
			t.Fatal(err)
		}
		return nbstate.Dump(cur.Rows)
	}
	waitFor := func(what string, d time.Duration, f func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, d, true,
			func(context.Context) (bool, error) { return f(), nil }); err != nil {
			t.Fatalf("%s: not within %s", what, d)
		}
	}
	assigned := func() bool {
		e, err := eips.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
		return err == nil && len(e.Status.Items) == 1 && e.Status.Items[0].Node == "node1"
	}

	first := freeAddr(t)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(runCtx, cfg(first), env.Config) }()
	waitFor("eip1 assigned", 30*time.Second, assigned)
	waitFor("NB rows written", 30*time.Second, func() bool { return scrape(first, "ovnkube_master_egress_ip_nb_transactions_total") > 0 })
	before := rows()
	if len(before) == 0 {
		t.Fatal("no NB rows of ours")
	}

	// The apiserver is away for 5 s: longer than the 3 s renew deadline.
	restarted := make(chan struct{})
	go func() { defer close(restarted); env.RestartAPIServer(t, 5*time.Second) }()
	select {
	case err := <-done:
		var lost *leaderelect.LostError
		if !errors.As(err, &lost) {
			t.Fatalf("run returned %v, want a *leaderelect.LostError", err)
		}
		t.Logf("the master exited: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the master still runs 60 s after the apiserver went away")
	}
	<-restarted
	if got := rows(); !slices.Equal(got, before) {
		t.Errorf("NB rows changed while the apiserver was away:\n got  %v\n want %v", got, before)
	}
	if !assigned() {
		t.Error("eip1 lost its assignment across the apiserver restart")
	}

	// The kubelet's restart: same identity (hostname_pid), so the Lease is retaken at once.
	second := freeAddr(t)
	go func() { done <- run(runCtx, cfg(second), env.Config) }()
	waitFor("the restarted master's start-up sync", 60*time.Second, func() bool {
		return scrape(second, "ovnkube_master_egress_ip_syncs_total") >= 1
	})
	// A marker: a Namespace no EgressIP selects makes the master sync once more, and writes nothing. Syncs run one
	// at a time, in order, so once as many syncs have ended as had begun when it was created, plus one, any sync that
	// an event of the restart asked for has ended too, and its writes show in the counters below.
	begun := scrape(second, "ovnkube_master_egress_ip_syncs_total")
	if begun < 1 {
		t.Fatalf("ovnkube_master_egress_ip_syncs_total = %v after the start-up sync", begun)
	}
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "marker",
		Labels: map[string]string{"env": "none"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("a sync after the marker Namespace", 30*time.Second, func() bool {
		return scrapeSum(second, "ovnkube_master_egress_ip_sync_duration_seconds_count") >= begun+1
	})
	tx, st := scrape(second, "ovnkube_master_egress_ip_nb_transactions_total"), scrape(second, "ovnkube_master_egress_ip_status_updates_total")
	if tx != 0 || st != 0 {
		t.Errorf("the restarted master wrote: %v NB transactions, %v status updates; want none", tx, st)
	}
	if got := rows(); !slices.Equal(got, before) {
		t.Errorf("NB rows changed across the master restart:\n got  %v\n want %v", got, before)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", fmt.Errorf("second master: %w", err))
	}
}
