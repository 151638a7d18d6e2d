package apiserver

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// ApplyManifests applies <repo>/dist/manifests/ovnkube-egressip.yaml (namespace, ServiceAccounts, RBAC, admission
// policies, workloads) to e with its kubectl, failing t when kubectl does.
func (e *Env) ApplyManifests(t testing.TB) {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(e.Kubectl, "--kubeconfig", e.Kubeconfig, "apply", "-f",
		filepath.Join(root, "dist", "manifests", "ovnkube-egressip.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// CreateReadyNode creates n as admin cs and then, as a kubelet does, writes its status: the Ready condition and
// addrs (if any). It returns the Node as the status update left it, failing t on an error.
func CreateReadyNode(ctx context.Context, t testing.TB, cs kubernetes.Interface, n *corev1.Node, addrs ...corev1.NodeAddress) *corev1.Node {
	t.Helper()
	created, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	created.Status.Addresses = addrs
	updated, err := cs.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}

// PolicyRefusal retries the write try (a dry run, so that an allowed one changes nothing) every 50 ms for up to
// 30 s until the apiserver refuses it with an error naming the admission policy: the apiserver loads policies
// asynchronously, so a policy just applied may not be enforced yet. It returns that refusal's message, or an error
// (with try's last answer) when the policy did not refuse the write in time.
func PolicyRefusal(ctx context.Context, policy string, try func(context.Context) error) (refusal string, err error) {
	var last error
	err = waitfor.Until(ctx, 30*time.Second, 50*time.Millisecond, func() (bool, error) {
		last = try(ctx)
		return last != nil && strings.Contains(last.Error(), policy), nil
	})
	if err == nil {
		return last.Error(), nil
	}
	// try's last answer (nil when the write was allowed) and the timeout.
	return "", fmt.Errorf("policy %s did not refuse the write: %w", policy, errors.Join(last, err))
}

// ResyncsWriteNothing resets w, then calls sync for each of names, resyncs times over, and fails t when a sync fails
// (a Conflict means that a write changed the object) or when any write to resource (plural name, as Writes.Of takes
// it) was sent: a controller must leave alone what is already as it wants it.
func ResyncsWriteNothing(t testing.TB, w *Writes, resource string, resyncs int, names []string, sync func(name string) error) {
	t.Helper()
	w.Reset()
	for range resyncs {
		for _, name := range names {
			if err := sync(name); err != nil {
				t.Errorf("resync of %s: %v", name, err)
			}
		}
	}
	if sent := w.Of(resource); len(sent) > 0 {
		t.Errorf("%d resyncs of unchanged objects sent %d writes of %s, want none: %q", resyncs, len(sent), resource, sent)
	}
}
