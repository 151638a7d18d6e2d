// Package crd proves the generated EgressIP CRD and typed clientset against a real
// kube-apiserver v1.37.2: admission validation as a user meets it through kubectl,
// and a create/get/list/watch/update-status round trip through the clientset.
package crd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	egressipv1 "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1"
	egressipclientset "github.com/ovn-egressip/ovn-egressip/go-controller/pkg/crd/egressip/v1/apis/clientset/versioned"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/repo"
)

func kubectl(t *testing.T, env *apiserver.Env, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(env.Kubectl, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func manifest(name string, ips []string, withNamespaceSelector bool) string {
	var b strings.Builder
	b.WriteString("apiVersion: k8s.ovn.org/v1\nkind: EgressIP\nmetadata:\n  name: " + name + "\nspec:\n")
	if ips == nil {
		b.WriteString("  egressIPs: []\n")
	} else {
		b.WriteString("  egressIPs:\n")
		for _, ip := range ips {
			b.WriteString("  - \"" + ip + "\"\n")
		}
	}
	if withNamespaceSelector {
		b.WriteString("  namespaceSelector:\n    matchLabels:\n      env: prod\n")
	}
	return b.String()
}

func TestEgressIPAdmissionThroughKubectl(t *testing.T) {
	env := apiserver.Start(t)
	root := repo.Root()

	// The shipped example applies as is, and kubectl get eip shows the printer columns.
	example := filepath.Join(root, "dist", "examples", "egressip.yaml")
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, env, string(data), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", example, err, out)
	}
	out, err := kubectl(t, env, "", "get", "eip")
	if err != nil {
		t.Fatalf("kubectl get eip: %v\n%s", err, out)
	}
	for _, col := range []string{"EGRESSIPS", "ASSIGNED NODE", "ASSIGNED EGRESSIPS", "ASSIGNED", "READY", "egressip-prod"} {
		if !strings.Contains(out, col) {
			t.Errorf("kubectl get eip output lacks %q:\n%s", col, out)
		}
	}
	// The node selector and strict example applies as is too.
	zoned := filepath.Join(root, "dist", "examples", "egressip-zone-strict.yaml")
	if data, err = os.ReadFile(zoned); err != nil {
		t.Fatal(err)
	}
	if out, err := kubectl(t, env, string(data), "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply %s: %v\n%s", zoned, err, out)
	}
	if out, err := kubectl(t, env, "", "get", "eip", "egressip-payments", "-o", "jsonpath={.spec.strict} {.spec.nodeSelector.matchLabels}"); err != nil ||
		!strings.Contains(out, "true") || !strings.Contains(out, "zone-a") {
		t.Errorf("egressip-payments as stored: %v %s", err, out)
	}

	tests := []struct {
		name     string
		manifest string
		want     []string // substrings of the API server's rejection
	}{
		{"not an IP", manifest("bad-ip", []string{"not-an-ip"}, true), []string{"spec.egressIPs[0]", "must be an IPv4 or IPv6 address"}},
		{"duplicate", manifest("dup", []string{"10.0.0.1", "10.0.0.1"}, true), []string{"spec.egressIPs[1]", "Duplicate value"}},
		{"empty list", manifest("empty", nil, true), []string{"spec.egressIPs", "should have at least 1 items"}},
		{"missing namespaceSelector", manifest("nosel", []string{"10.0.0.1"}, false), []string{"spec.namespaceSelector", "Required value"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := kubectl(t, env, tc.manifest, "apply", "-f", "-")
			if err == nil {
				t.Fatalf("the API server accepted an invalid EgressIP:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("rejection does not mention %q:\n%s", w, out)
				}
			}
		})
	}

	// Dual-stack and IPv6 entries are valid.
	if out, err := kubectl(t, env, manifest("dual", []string{"172.18.0.60", "fc00::60"}, true), "apply", "-f", "-"); err != nil {
		t.Fatalf("a dual-stack EgressIP was rejected: %v\n%s", err, out)
	}
}

func TestEgressIPClientsetRoundTrip(t *testing.T) {
	env := apiserver.Start(t)
	cs, err := egressipclientset.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eips := cs.K8sV1().EgressIPs()

	w, err := eips.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	in := &egressipv1.EgressIP{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip"},
		Spec: egressipv1.EgressIPSpec{
			EgressIPs:         []string{"172.18.0.33", "172.18.0.44"},
			NamespaceSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "environment", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"development"}}}},
			PodSelector:       metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		},
		// Status on create is dropped: status is a subresource.
		Status: egressipv1.EgressIPStatus{Items: []egressipv1.EgressIPStatusItem{{Node: "ignored", EgressIP: "172.18.0.33"}}},
	}
	created, err := eips.Create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(created.Status.Items) != 0 {
		t.Fatalf("status written through the main resource: %+v", created.Status)
	}
	got, err := eips.Get(ctx, "roundtrip", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.EgressIPs[1] != "172.18.0.44" || got.Spec.PodSelector.MatchLabels["app"] != "web" ||
		got.Spec.NamespaceSelector.MatchExpressions[0].Operator != metav1.LabelSelectorOpNotIn {
		t.Fatalf("spec did not round-trip: %+v", got.Spec)
	}
	list, err := eips.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("list: %v %d", err, len(list.Items))
	}
	got.Status.Items = []egressipv1.EgressIPStatusItem{{Node: "node1", EgressIP: "172.18.0.33"}, {Node: "node2", EgressIP: "172.18.0.44"}}
	updated, err := eips.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(updated.Status.Items) != 2 || updated.Status.Items[1].Node != "node2" {
		t.Fatalf("status did not round-trip: %+v", updated.Status)
	}

	seen := map[watch.EventType]bool{}
	timeout := time.After(10 * time.Second)
	for !(seen[watch.Added] && seen[watch.Modified]) {
		select {
		case ev := <-w.ResultChan():
			if e, ok := ev.Object.(*egressipv1.EgressIP); ok && e.Name == "roundtrip" {
				seen[ev.Type] = true
			}
		case <-timeout:
			t.Fatalf("watch saw %v, want ADDED and MODIFIED", seen)
		}
	}
}

// TestDeploymentManifestsValidate sends dist/manifests to a real API server with
// --dry-run=server: every object must pass the server's schema and admission.
func TestDeploymentManifestsValidate(t *testing.T) {
	env := apiserver.Start(t)
	files, err := filepath.Glob(filepath.Join(repo.Root(), "dist", "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in dist/manifests (%v)", err)
	}
	// Some of the objects of each manifest, as kubectl names them: a new manifest must be listed here.
	wants := map[string][]string{
		"ovnkube-egressip.yaml": {"deployment.apps/ovnkube-egressip-master", "daemonset.apps/ovnkube-egressip-node",
			"clusterrole.rbac.authorization.k8s.io/ovnkube-egressip-master",
			"role.rbac.authorization.k8s.io/ovnkube-egressip-master-lease",
			"rolebinding.rbac.authorization.k8s.io/ovnkube-egressip-master-lease"},
		"directconn.yaml": {"deployment.apps/directconn-provider", "deployment.apps/directconn-consumer",
			"clusterrole.rbac.authorization.k8s.io/ovn-egressip-directconn-provider",
			"clusterrole.rbac.authorization.k8s.io/ovn-egressip-directconn-consumer",
			"clusterrole.rbac.authorization.k8s.io/ovn-egressip-directconn-consumer-remote",
			"role.rbac.authorization.k8s.io/directconn-provider-lease",
			"role.rbac.authorization.k8s.io/directconn-consumer-lease"},
	}
	for _, f := range files {
		want, ok := wants[filepath.Base(f)]
		if !ok {
			t.Errorf("%s: not listed in this test; add the objects it must apply", f)
			continue
		}
		delete(wants, filepath.Base(f))
		// The namespace must exist for a server-side dry run of namespaced objects.
		if out, err := kubectl(t, env, "", "create", "namespace", "ovn-egressip"); err != nil && !strings.Contains(out, "AlreadyExists") {
			t.Fatalf("create namespace: %v\n%s", err, out)
		}
		out, err := kubectl(t, env, "", "apply", "--dry-run=server", "-f", f)
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server -f %s: %v\n%s", f, err, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w+" ") {
				t.Errorf("%s: %q not applied:\n%s", f, w, out)
			}
		}
	}
	for name := range wants {
		t.Errorf("dist/manifests/%s is missing", name)
	}
}
