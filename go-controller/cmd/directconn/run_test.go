package main

import (
	"context"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

// TestRunBothModes wires both modes from their kubeconfig files against two real apiservers: the consumer in A
// reflects an EndpointSlice into B, and B's provider turns the shadow into an EndpointSlice. Both run with leader
// election (each Lease in its own cluster) and with only the permissions dist/manifests/directconn.yaml grants:
// the kubeconfigs impersonate its ServiceAccounts, and the consumer's kubeconfig for B a user bound in B to the
// manifest's ClusterRole ovn-egressip-directconn-consumer-remote.
func TestRunBothModes(t *testing.T) {
	var a, b *apiserver.Env
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a = apiserver.Start(t) }()
	go func() { defer wg.Done(); b = apiserver.Start(t) }()
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ctx := context.Background()
	ka, kb := kubernetes.NewForConfigOrDie(a.Config), kubernetes.NewForConfigOrDie(b.Config)
	applyManifest(t, a)
	applyManifest(t, b)
	if _, err := kb.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "directconn-consumer-cluster-a"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "ovn-egressip-directconn-consumer-remote"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "cluster-a-consumer"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []kubernetes.Interface{ka, kb} {
		if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ka.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a-node1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ka.DiscoveryV1().EndpointSlices("demo").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "demo", Name: "web-1", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"10.244.1.5"}, NodeName: ptr.To("a-node1")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	var runs sync.WaitGroup
	t.Cleanup(func() { cancel(); runs.Wait() })
	elect := func(mode string) election {
		return election{enabled: true, namespace: manifestNamespace, leaseName: "ovn-egressip-directconn-" + mode,
			identity: mode + "-1", leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, retryPeriod: 200 * time.Millisecond}
	}
	for _, o := range []options{
		{mode: modeConsumer, clusterID: "cluster-a", kubeconfig: kubeconfigAs(t, a, consumerSA), workers: 1,
			providers:  []providerFlag{{clusterID: "cluster-b", kubeconfig: kubeconfigAs(t, b, "cluster-a-consumer")}},
			namespaces: []string{"demo"}, election: elect(modeConsumer)},
		{mode: modeProvider, clusterID: "cluster-b", kubeconfig: kubeconfigAs(t, b, providerSA), workers: 1, election: elect(modeProvider)},
	} {
		runs.Add(1)
		go func() {
			defer runs.Done()
			if err := run(runCtx, o); err != nil {
				t.Errorf("run %s: %v", o.mode, err)
			}
		}()
	}

	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := kb.DiscoveryV1().EndpointSlices("demo").Get(ctx, "web-1", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil && len(s.Endpoints) == 1 && s.Endpoints[0].Addresses[0] == "10.244.1.5", err
	})
	if err != nil {
		t.Fatalf("B never got EndpointSlice demo/web-1: %v", err)
	}
	for _, c := range []struct {
		k    kubernetes.Interface
		name string
	}{{ka, "ovn-egressip-directconn-consumer"}, {kb, "ovn-egressip-directconn-provider"}} {
		l, err := c.k.CoordinationV1().Leases(manifestNamespace).Get(ctx, c.name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("Lease %s: %v", c.name, err)
		} else if h := ptr.Deref(l.Spec.HolderIdentity, ""); !strings.HasSuffix(h, "-1") {
			t.Errorf("Lease %s is held by %q", c.name, h)
		}
	}
}

// kubeconfigAs writes a copy of env's admin kubeconfig that impersonates user, and returns its path.
func kubeconfigAs(t *testing.T, env *apiserver.Env, user string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunBadKubeconfig(t *testing.T) {
	err := run(context.Background(), options{mode: modeProvider, clusterID: "b", kubeconfig: "/nonexistent", workers: 1})
	if err == nil {
		t.Fatal("run with a missing kubeconfig succeeded")
	}
}
