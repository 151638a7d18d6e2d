package cluster

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestNodeObjectAnnotations(t *testing.T) {
	a := addrsMust(t, 2, FamilyIPv4)
	n := nodeObject(a)
	var subnets map[string][]string
	if err := json.Unmarshal([]byte(n.Annotations["k8s.ovn.org/node-subnets"]), &subnets); err != nil ||
		len(subnets["default"]) != 1 || subnets["default"][0] != "10.244.2.0/24" {
		t.Errorf("node-subnets = %q", n.Annotations["k8s.ovn.org/node-subnets"])
	}
	var lrp map[string]string
	if err := json.Unmarshal([]byte(n.Annotations["k8s.ovn.org/node-gateway-router-lrp-ifaddr"]), &lrp); err != nil ||
		lrp["ipv4"] != "100.64.0.3/16" {
		t.Errorf("node-gateway-router-lrp-ifaddr = %q", n.Annotations["k8s.ovn.org/node-gateway-router-lrp-ifaddr"])
	}
	if _, ok := n.Annotations["k8s.ovn.org/node-primary-ifaddr"]; ok {
		t.Error("node-primary-ifaddr is the node daemon's to write")
	}
	if n.Labels[HarnessKey] != "true" {
		t.Errorf("labels = %v", n.Labels)
	}
}

func TestRegisterNodesAndReadiness(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	nodes := testNodes(t, 2)
	if err := registerNodes(ctx, cs, nodes, false, LayoutCentralized); err != nil {
		t.Fatal(err)
	}
	// registering again (cluster-up on a running cluster) is fine
	if err := registerNodes(ctx, cs, nodes, false, LayoutCentralized); err != nil {
		t.Fatalf("second registration: %v", err)
	}
	if err := setNodeReady(ctx, cs, "node2", false); err != nil {
		t.Fatal(err)
	}
	if err := heartbeat(ctx, cs); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]corev1.ConditionStatus{"node1": corev1.ConditionTrue, "node2": corev1.ConditionFalse} {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(n.Status.Conditions) != 1 || n.Status.Conditions[0].Status != want {
			t.Errorf("%s conditions = %+v, want Ready=%s kept by the heartbeat", name, n.Status.Conditions, want)
		}
		if len(n.Status.Addresses) == 0 || n.Status.Addresses[0].Address != nodes[0].NodeIP.String() && name == "node1" {
			t.Errorf("%s addresses = %+v", name, n.Status.Addresses)
		}
	}
}

func TestEnsureServiceAccountIsIdempotent(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	for i := 0; i < 2; i++ {
		if err := ensureServiceAccount(ctx, cs, "prod"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts("prod").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A dual-stack node: both pod subnets (IPv4 first), both join IPs, the gateway router's MAC and both external
// addresses in l3-gateway-config, and one InternalIP per family.
func TestNodeObjectDualStack(t *testing.T) {
	a := addrsMust(t, 2, FamilyDual)
	n := nodeObject(a)
	if got := n.Annotations["k8s.ovn.org/node-subnets"]; got != `{"default":["10.244.2.0/24","fd00:10:244:2::/64"]}` {
		t.Errorf("node-subnets = %s", got)
	}
	if got := n.Annotations["k8s.ovn.org/node-gateway-router-lrp-ifaddr"]; got != `{"ipv4":"100.64.0.3/16","ipv6":"fd98::3/64"}` {
		t.Errorf("node-gateway-router-lrp-ifaddr = %s", got)
	}
	var gw map[string]struct {
		MAC string   `json:"mac-address"`
		IPs []string `json:"ip-addresses"`
	}
	if err := json.Unmarshal([]byte(n.Annotations["k8s.ovn.org/l3-gateway-config"]), &gw); err != nil ||
		gw["default"].MAC != a.GatewayMAC || len(gw["default"].IPs) != 2 || gw["default"].IPs[1] != "fc00:f853:ccd:e793::22/64" {
		t.Errorf("l3-gateway-config = %s (%v)", n.Annotations["k8s.ovn.org/l3-gateway-config"], err)
	}
	st := nodeStatus(a, metav1.Now())
	if len(st.Addresses) != 3 || st.Addresses[0].Address != "172.18.0.12" || st.Addresses[1].Address != "fc00:f853:ccd:e793::12" ||
		st.Addresses[1].Type != corev1.NodeInternalIP {
		t.Errorf("status.addresses = %+v", st.Addresses)
	}
}
