package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ovn-org/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/nbdb"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

// upstreamRows are upstream's rows for EgressIP eip1 serving prod/web1 (10.244.1.5) through node1, written as the
// shared facts give them, and the topology they hang on. extra adds upstream reroutes of more pod IPs.
func upstreamRows(extra ...string) []model.Model {
	up := func(kv ...string) map[string]string {
		m := map[string]string{"k8s.ovn.org/owner-controller": "default-network-controller", "k8s.ovn.org/owner-type": "EgressIP"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	port := "k8s-node1"
	policies := []string{"reroute"}
	rows := []model.Model{
		&nbdb.LogicalRouterPolicy{UUID: "reroute", Priority: 100, Match: "ip4.src == 10.244.1.5", Action: "reroute", Nexthops: []string{"100.64.0.2"},
			ExternalIDs: up("k8s.ovn.org/name", "eip1_prod/web1", "priority", "100", "ip-family", "ip4", "network", "default",
				"k8s.ovn.org/id", "default-network-controller:EgressIP:100:eip1_prod/web1:ip4:default")},
		&nbdb.NAT{UUID: "snat", Type: "snat", ExternalIP: "172.18.0.33", LogicalIP: "10.244.1.5", LogicalPort: &port,
			ExternalIDs: up("k8s.ovn.org/name", "eip1_prod/web1", "ip-family", "ip4", "k8s.ovn.org/id", "default-network-controller:EgressIP:eip1_prod/web1:ip4")},
	}
	for i, ip := range extra {
		u := "extra" + string(rune('a'+i))
		policies = append(policies, u)
		rows = append(rows, &nbdb.LogicalRouterPolicy{UUID: u, Priority: 100, Match: "ip4.src == " + ip, Action: "reroute", Nexthops: []string{"100.64.0.2"},
			ExternalIDs: up("k8s.ovn.org/name", "eip1_prod/gone", "priority", "100", "ip-family", "ip4", "network", "default")})
	}
	return append(rows,
		&nbdb.LogicalRouter{UUID: "cr", Name: "ovn_cluster_router", Policies: policies},
		&nbdb.LogicalRouter{UUID: "gr", Name: "GR_node1", Nat: []string{"snat"}})
}

// TestMigrateCommand runs `ovnkube egressip migrate` against a real apiserver and libovsdb's in-memory NB: bad
// input and a refusal write nothing; a dry run writes nothing; --from-upstream is one transaction and a second run
// none; --to-upstream likewise.
func TestMigrateCommand(t *testing.T) {
	env := apiserver.Start(t)
	ctx := context.Background()
	admin, eips := seedNodeAndEgressIP(t, env)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"env": "prod"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts("prod").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := admin.CoreV1().Pods("prod").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web1"},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}}
	if _, err := admin.CoreV1().Pods("prod").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eip, err := eips.K8sV1().EgressIPs().Get(ctx, "eip1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eip.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "node1", EgressIP: "172.18.0.33"}} // as upstream wrote it
	if _, err := eips.K8sV1().EgressIPs().UpdateStatus(ctx, eip, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	run := func(nb *nbserver.Server, args ...string) (string, int, error) {
		before := nb.Transactions()
		app := newApp()
		var out bytes.Buffer
		app.Writer = &out
		full := append([]string{"ovnkube", "egressip", "migrate", "--kubeconfig", env.Kubeconfig, "--nb-address", nb.Addr,
			"--cluster-subnets", "10.244.0.0/16"}, args...)
		err := app.RunContext(ctx, normalizeArgs(full))
		return out.String(), nb.Transactions() - before, err
	}

	// Upstream serves a pod IP no pod has: refused, nothing written.
	stale := nbserver.StartInMemory(t)
	nbserver.Seed(t, stale.Client(t), upstreamRows("10.244.1.77")...)
	out, n, err := run(stale, "--from-upstream")
	if err == nil || !strings.Contains(err.Error(), "nothing written") || !strings.Contains(err.Error(), "10.244.1.77") || n != 0 {
		t.Errorf("unserved pod IP: err %v, %d transactions\n%s", err, n, out)
	}
	if _, n, err := run(stale, "--from-upstream", "--allow-unserved"); err != nil || n != 1 {
		t.Errorf("--allow-unserved: %v, %d transactions", err, n)
	}

	nb := nbserver.StartInMemory(t)
	nbserver.Seed(t, nb.Client(t), upstreamRows()...)
	for _, bad := range [][]string{
		{},
		{"--from-upstream", "--to-upstream"},
		{"--from-upstream", "--zone-nb-address", "node1"},
		{"--from-upstream", "--zone-nb-address", "node1=bogus:x"},
		{"--to-upstream", "--allow-unserved"},
		{"--from-upstream", "extra-argument"},
	} {
		if out, n, err := run(nb, bad...); err == nil || n != 0 {
			t.Errorf("%v: err %v, %d transactions\n%s", bad, err, n, out)
		}
	}
	out, n, err = run(nb, "--from-upstream", "--dry-run")
	if err != nil || n != 0 || !strings.Contains(out, "dry run: nothing written") || !strings.Contains(out, "delete upstream policy ovn_cluster_router 100 reroute") {
		t.Fatalf("dry run: %v, %d transactions\n%s", err, n, out)
	}
	out, n, err = run(nb, "--from-upstream")
	if err != nil || n != 1 || !strings.Contains(out, "committed in 1 transaction") {
		t.Fatalf("--from-upstream: %v, %d transactions\n%s", err, n, out)
	}
	out, n, err = run(nb, "--from-upstream")
	if err != nil || n != 0 || !strings.Contains(out, "nothing to do, no transaction") {
		t.Errorf("second --from-upstream: %v, %d transactions\n%s", err, n, out)
	}
	out, n, err = run(nb, "--to-upstream")
	if err != nil || n != 1 || !strings.Contains(out, "create upstream policy ovn_cluster_router 100 reroute \"ip4.src == 10.244.1.5\"") {
		t.Fatalf("--to-upstream: %v, %d transactions\n%s", err, n, out)
	}
	if out, n, err = run(nb, "--to-upstream"); err != nil || n != 0 {
		t.Errorf("second --to-upstream: %v, %d transactions\n%s", err, n, out)
	}
}
