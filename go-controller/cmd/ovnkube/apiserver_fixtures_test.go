package main

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// assignableNode1 is the node1 the master tests seed: egress-assignable, primary interface address 172.18.0.11/16,
// gateway router port 100.64.0.2/16 and, when podSubnets is not "", that node-subnets annotation (a subnet on
// loopback lets the legacy health check, a TCP dial to port 9 of the management IP, "refused" = alive, succeed).
func assignableNode1(podSubnets string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1",
		Labels: map[string]string{annotations.EgressAssignableLabel: ""},
		Annotations: map[string]string{
			annotations.PrimaryIfAddr:          `{"ipv4":"172.18.0.11/16"}`,
			annotations.GatewayRouterLRPIfAddr: `{"ipv4":"100.64.0.2/16"}`,
		}}}
	if podSubnets != "" {
		n.Annotations[annotations.NodeSubnets] = podSubnets
	}
	return n
}

// createProdEgressIP creates EgressIP name with egress IPs ips, serving the namespaces labelled env=prod.
func createProdEgressIP(ctx context.Context, t *testing.T, eips egressipclientset.Interface, name string, ips ...string) {
	t.Helper()
	if _, err := eips.K8sV1().EgressIPs().Create(ctx, &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: egressipv1.EgressIPSpec{EgressIPs: ips,
			NamespaceSelector: metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// testMasterConfig is the master (--init-master, shared gateway mode) of the apiserver tests, against NB nbAddr, with
// 100 ms reachability checks and leader election on Lease ovn-egressip-master in leaseNamespace (withTestLease).
func testMasterConfig(t *testing.T, nbAddr, leaseNamespace string) *config.Config {
	return withTestLease(&config.Config{
		InitMaster: true, EgressIPEnable: true, GatewayMode: gwmode.Shared, NBAddresses: []string{nbAddr},
		ClusterSubnets: mustPrefixes(t, "10.244.0.0/16"), JoinSubnets: mustPrefixes(t, "100.64.0.0/16"),
		ReachabilityInterval: 100 * time.Millisecond, ReachabilityTotalTimeout: time.Second,
		NBConnectTimeout: 5 * time.Second,
	}, leaseNamespace)
}

// withTestLease turns on cfg's leader election on Lease ovn-egressip-master in namespace, with short timings (4 s
// lease, 3 s renew deadline, 200 ms retries) so that a lost or released Lease shows within seconds.
func withTestLease(cfg *config.Config, namespace string) *config.Config {
	cfg.LeaderElection, cfg.LeaderElectionNamespace, cfg.LeaderElectionName = true, namespace, "ovn-egressip-master"
	cfg.LeaderElectionLeaseDuration, cfg.LeaderElectionRenewDeadline = 4*time.Second, 3*time.Second
	cfg.LeaderElectionRetryPeriod = 200 * time.Millisecond
	return cfg
}
