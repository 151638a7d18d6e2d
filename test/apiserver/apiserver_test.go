package apiserver

import (
	"context"
	"os/exec"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// clientset is a clientset of env's apiserver.
func clientset(t *testing.T, env *Env) *kubernetes.Clientset {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// createNamespace creates namespace name through cs.
func createNamespace(t *testing.T, cs *kubernetes.Clientset, name string) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
}

func TestStartListsNamespacesAndServesCRDs(t *testing.T) {
	env := Start(t)
	cs := clientset(t, env)
	ctx := context.Background()
	createNamespace(t, cs, "prod")
	nss, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list namespaces: %v", err)
	}
	names := map[string]bool{}
	for _, ns := range nss.Items {
		names[ns.Name] = true
	}
	for _, want := range []string{"default", "kube-system", "prod"} {
		if !names[want] {
			t.Errorf("namespace %q not listed; got %v", want, names)
		}
	}

	// The kubeconfig file and kubectl work, and the EgressIP CRD from dist/crds is served.
	out, err := exec.Command(env.Kubectl, "--kubeconfig", env.Kubeconfig, "get", "egressips", "-o", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get egressips: %v: %s", err, out)
	}
	if s := strings.TrimSpace(string(out)); s != "" && !strings.Contains(s, "No resources") {
		t.Errorf("kubectl get egressips on a fresh apiserver = %q, want nothing", s)
	}
}

func TestSeveralEnvsAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two control planes")
	}
	a, b := Start(t), Start(t)
	if a.Config.Host == b.Config.Host {
		t.Fatalf("two Envs share the apiserver %s", a.Config.Host)
	}
	csA, csB := clientset(t, a), clientset(t, b)
	ctx := context.Background()
	createNamespace(t, csA, "only-in-a")
	if _, err := csB.CoreV1().Namespaces().Get(ctx, "only-in-a", metav1.GetOptions{}); err == nil {
		t.Fatal("namespace created in Env a is visible in Env b: the Envs share storage")
	}
}

// TestRestart: objects survive a kube-apiserver restart and an apiserver + etcd
// restart (etcd's data kept), and the same client config works afterwards.
func TestRestart(t *testing.T) {
	env := Start(t)
	cs := clientset(t, env)
	ctx := context.Background()
	createNamespace(t, cs, "kept")
	env.RestartAPIServer(t, 0)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("after an apiserver restart: %v", err)
	}
	env.RestartControlPlane(t, 0)
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("after an apiserver + etcd restart: %v", err)
	}
}
