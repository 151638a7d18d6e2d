package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/annotations"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

const (
	nodeSANamespace = "ovn-egressip"
	nodeSA          = "ovnkube-egressip-node"
	policyName      = "ovnkube-egressip-node-writes"
)

func annotationPatch(set map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": set}})
	return b
}

// TestNodePolicyLimitsNodeDaemonToOwnNodeAnnotations applies the shipped manifests to a real apiserver and checks
// what the node daemon's ServiceAccount may write with a token bound to node1 (as a kubelet issues it), and with a
// token bound to no node.
func TestNodePolicyLimitsNodeDaemonToOwnNodeAnnotations(t *testing.T) {
	env := apiserver.Start(t)
	env.ApplyManifests(t)
	ctx := context.Background()
	admin := kubernetes.NewForConfigOrDie(env.Config)

	for _, name := range []string{"node1", "node2"} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
			Labels:      map[string]string{"kubernetes.io/hostname": name},
			Annotations: map[string]string{annotations.NodeSubnets: `{"default":["10.244.1.0/24"]}`}}}
		if _, err := admin.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tok1, err := apiserver.ServiceAccountToken(ctx, admin, nodeSANamespace, nodeSA, "node1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	unboundTok, err := apiserver.ServiceAccountToken(ctx, admin, nodeSANamespace, nodeSA, "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	node1 := kubernetes.NewForConfigOrDie(apiserver.TokenConfig(env.Config, tok1))
	unbound := kubernetes.NewForConfigOrDie(apiserver.TokenConfig(env.Config, unboundTok))
	node1EIP := egressipclientset.NewForConfigOrDie(apiserver.TokenConfig(env.Config, tok1))

	// The apiserver loads policies asynchronously: wait until it enforces this one (a dry-run write it must deny).
	probe := annotationPatch(map[string]any{annotations.PrimaryIfAddr: `{"ipv4":"172.18.0.12/16"}`})
	if _, err := apiserver.PolicyRefusal(ctx, policyName, func(ctx context.Context) error {
		_, err := node1.CoreV1().Nodes().Patch(ctx, "node2", types.MergePatchType, probe, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}); err != nil {
		t.Fatalf("policy %s not enforced: node1 patching node2: %v", policyName, err)
	}

	ownPatch := annotationPatch(map[string]any{
		annotations.PrimaryIfAddr:  `{"ipv4":"172.18.0.11/16"}`,
		annotations.HostCIDRs:      `["172.18.0.11/16"]`,
		annotations.EgressIPsReady: `["172.18.0.33"]`,
	})
	strategic := func(v any) []byte { b, _ := json.Marshal(v); return b }
	cases := []struct {
		name   string
		do     func() error
		denied string // "" = allowed; else a part of the error message
	}{
		{"node1 publishes its egress facts and readiness", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, ownPatch, metav1.PatchOptions{})
			return err
		}, ""},
		{"node1 removes its readiness annotation", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType,
				annotationPatch(map[string]any{annotations.EgressIPsReady: nil}), metav1.PatchOptions{})
			return err
		}, ""},
		{"node1 patches node2's egress annotations", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node2", types.MergePatchType, ownPatch, metav1.PatchOptions{})
			return err
		}, "ovnkube-egressip-node of node node1 may change only its own Node, not node node2"},
		{"node1 labels itself egress-assignable", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType,
				strategic(map[string]any{"metadata": map[string]any{"labels": map[string]string{annotations.EgressAssignableLabel: ""}}}), metav1.PatchOptions{})
			return err
		}, "not its labels, finalizers, owner references, spec (taints) or status"},
		{"node1 taints itself", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.StrategicMergePatchType,
				strategic(map[string]any{"spec": map[string]any{"taints": []corev1.Taint{{Key: "x", Effect: corev1.TaintEffectNoSchedule}}}}), metav1.PatchOptions{})
			return err
		}, "not its labels, finalizers, owner references, spec (taints) or status"},
		{"node1 changes an annotation it does not own", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType,
				annotationPatch(map[string]any{annotations.NodeSubnets: `{"default":["10.244.9.0/24"]}`}), metav1.PatchOptions{})
			return err
		}, "not k8s.ovn.org/node-subnets"},
		{"node1 removes an annotation it does not own", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType,
				annotationPatch(map[string]any{annotations.NodeSubnets: nil}), metav1.PatchOptions{})
			return err
		}, "not k8s.ovn.org/node-subnets"},
		{"node1 adds a foreign annotation beside its own", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType,
				annotationPatch(map[string]any{annotations.HostCIDRs: `[]`, "example.com/x": "y"}), metav1.PatchOptions{})
			return err
		}, "not example.com/x"},
		{"node1 writes its status (RBAC)", func() error {
			_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType,
				strategic(map[string]any{"status": map[string]any{"capacity": map[string]string{"pods": "1"}}}), metav1.PatchOptions{}, "status")
			return err
		}, `cannot patch resource "nodes/status"`},
		{"node1 deletes node2 (RBAC)", func() error {
			return node1.CoreV1().Nodes().Delete(ctx, "node2", metav1.DeleteOptions{})
		}, `cannot delete resource "nodes"`},
		{"node1 creates a Node (RBAC)", func() error {
			_, err := node1.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node9"}}, metav1.CreateOptions{})
			return err
		}, `cannot create resource "nodes"`},
		{"node1 labels a namespace (RBAC)", func() error {
			_, err := node1.CoreV1().Namespaces().Patch(ctx, "default", types.MergePatchType,
				strategic(map[string]any{"metadata": map[string]any{"labels": map[string]string{"a": "b"}}}), metav1.PatchOptions{})
			return err
		}, `cannot patch resource "namespaces"`},
		{"node1 writes EgressIP status (RBAC)", func() error {
			_, err := node1EIP.K8sV1().EgressIPs().Create(ctx, &egressipv1.EgressIP{ObjectMeta: metav1.ObjectMeta{Name: "e"},
				Spec: egressipv1.EgressIPSpec{EgressIPs: []string{"172.18.0.33"}}}, metav1.CreateOptions{})
			return err
		}, `cannot create resource "egressips"`},
		{"a token bound to no node patches node1's egress annotations", func() error {
			_, err := unbound.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, ownPatch, metav1.PatchOptions{})
			return err
		}, "may write a Node only with a token bound to that Node"},
		{"the ServiceAccount impersonated without any user extra patches node1's egress annotations", func() error {
			cfg := rest.CopyConfig(env.Config)
			cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + nodeSANamespace + ":" + nodeSA}
			_, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, ownPatch, metav1.PatchOptions{})
			return err
		}, "may write a Node only with a token bound to that Node"},
		{"node1 reads node2", func() error {
			_, err := node1.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
			return err
		}, ""},
		{"an admin still labels node1", func() error {
			_, err := admin.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType,
				strategic(map[string]any{"metadata": map[string]any{"labels": map[string]string{annotations.EgressAssignableLabel: ""}}}), metav1.PatchOptions{})
			return err
		}, ""},
	}
	for _, tc := range cases {
		err := tc.do()
		switch {
		case tc.denied == "" && err != nil:
			t.Errorf("%s: denied: %v", tc.name, err)
		case tc.denied != "" && err == nil:
			t.Errorf("%s: allowed, want denied with %q", tc.name, tc.denied)
		case tc.denied != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.denied)):
			t.Errorf("%s: error %v, want Forbidden with %q", tc.name, err, tc.denied)
		default:
			t.Logf("%s: %v", tc.name, err)
		}
	}

	// In a cluster the DaemonSet's pods use the kubelet's projected token, bound to the pod: the apiserver adds the
	// name of the pod's node to it, so the same rules hold.
	pod, err := admin.CoreV1().Pods(nodeSANamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ovnkube-egressip-node-x"},
		Spec: corev1.PodSpec{NodeName: "node1", ServiceAccountName: nodeSA,
			Containers: []corev1.Container{{Name: "ovnkube-node", Image: "ovn-egressip:latest"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	podTok, err := admin.CoreV1().ServiceAccounts(nodeSANamespace).CreateToken(ctx, nodeSA, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{
			Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inPod := kubernetes.NewForConfigOrDie(apiserver.TokenConfig(env.Config, podTok.Status.Token))
	hostCIDRs := annotationPatch(map[string]any{annotations.HostCIDRs: `["172.18.0.11/16"]`})
	if _, err := inPod.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, hostCIDRs, metav1.PatchOptions{}); err != nil {
		t.Errorf("pod-bound token of a pod on node1 patching node1's egress annotations: %v", err)
	}
	if _, err := inPod.CoreV1().Nodes().Patch(ctx, "node2", types.MergePatchType, hostCIDRs, metav1.PatchOptions{}); err == nil ||
		!strings.Contains(err.Error(), "of node node1 may change only its own Node, not node node2") {
		t.Errorf("pod-bound token of a pod on node1 patching node2: %v, want denied by the policy", err)
	}

	// The policy holds even where RBAC grants more (a broader role bound by mistake): writes of node1's status,
	// deleting node1.
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "too-broad"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes", "nodes/status"}, Verbs: []string{"patch", "delete"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "too-broad"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "too-broad"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: nodeSANamespace, Name: nodeSA}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	statusPatch := strategic(map[string]any{"status": map[string]any{"capacity": map[string]string{"pods": "1"}}})
	refusal, err := apiserver.PolicyRefusal(ctx, policyName, func(ctx context.Context) error {
		_, err := node1.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, statusPatch, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		return err
	})
	if err != nil || !strings.Contains(refusal, "may only update metadata.annotations of its Node: refused UPDATE of nodes/status") {
		t.Errorf("node1 patching its status with RBAC allowing it: %q, %v", refusal, err)
	}
	err = node1.CoreV1().Nodes().Delete(ctx, "node1", metav1.DeleteOptions{})
	if err == nil || !strings.Contains(err.Error(), "may only update metadata.annotations of its Node: refused DELETE of nodes") {
		t.Errorf("node1 deleting itself with RBAC allowing it: %v", err)
	}

	// What node1 was allowed to write is there; node2 is untouched.
	n1, err := admin.CoreV1().Nodes().Get(ctx, "node1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n1.Annotations[annotations.PrimaryIfAddr] != `{"ipv4":"172.18.0.11/16"}` || n1.Annotations[annotations.NodeSubnets] == "" ||
		slices.ContainsFunc(n1.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "x" }) {
		t.Errorf("node1 after the writes: annotations %v taints %v", n1.Annotations, n1.Spec.Taints)
	}
	if _, ok := n1.Annotations[annotations.EgressIPsReady]; ok {
		t.Errorf("node1 still carries %s after node1 removed it", annotations.EgressIPsReady)
	}
	n2, err := admin.CoreV1().Nodes().Get(ctx, "node2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := n2.Annotations[annotations.PrimaryIfAddr]; ok {
		t.Errorf("node2 carries node1's write: %v", n2.Annotations)
	}
}
