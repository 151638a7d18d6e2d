package main

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

// TestRunBothModes wires both modes from their kubeconfig files against two real apiservers: the consumer in A
// reflects an EndpointSlice into B, and B's provider turns the shadow into an EndpointSlice.
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
	for _, k := range []kubernetes.Interface{ka, kb} {
		if _, err := k.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "demo"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
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
	for _, o := range []options{
		{mode: modeConsumer, clusterID: "cluster-a", kubeconfig: a.Kubeconfig, workers: 1,
			providers: []providerFlag{{clusterID: "cluster-b", kubeconfig: b.Kubeconfig}}, namespaces: []string{"demo"}},
		{mode: modeProvider, clusterID: "cluster-b", kubeconfig: b.Kubeconfig, workers: 1},
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
}

func TestRunBadKubeconfig(t *testing.T) {
	err := run(context.Background(), options{mode: modeProvider, clusterID: "b", kubeconfig: "/nonexistent", workers: 1})
	if err == nil {
		t.Fatal("run with a missing kubeconfig succeeded")
	}
}
