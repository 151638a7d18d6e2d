// Package chart proves the Helm chart dist/helm/ovnkube-egressip against a real kube-apiserver v1.37.2 with the
// CRDs installed: what `helm template` renders in each layout passes the server's schema, strict field validation
// and admission (`kubectl apply --dry-run=server`).
package chart

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

const namespace = "ovn-egressip"

type tools struct {
	env  *apiserver.Env
	helm string
	root string
}

func setup(t *testing.T) *tools {
	t.Helper()
	root, err := apiserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	helm, err := apiserver.Helm(root)
	if err != nil {
		t.Fatal(err)
	}
	env := apiserver.Start(t)
	tl := &tools{env: env, helm: helm, root: root}
	// As helm install --create-namespace does before the chart's objects: a server-side dry run of a namespaced
	// object needs its namespace.
	if out, err := tl.kubectl(nil, "create", "namespace", namespace); err != nil {
		t.Fatalf("kubectl create namespace: %v\n%s", err, out)
	}
	return tl
}

// template is `helm template` of the chart with the --set flags given.
func (tl *tools) template(t *testing.T, set ...string) []byte {
	t.Helper()
	args := []string{"template", "ovnkube-egressip", filepath.Join(tl.root, "dist", "helm", "ovnkube-egressip"),
		"--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(tl.helm, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes()
}

func (tl *tools) kubectl(stdin []byte, args ...string) (string, error) {
	cmd := exec.Command(tl.env.Kubectl, append([]string{"--kubeconfig", tl.env.Kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestChartAppliesOnAPIServer: helm template dist/helm/ovnkube-egressip --set layout=X | kubectl apply
// --dry-run=server -f -, in both layouts and both gateway modes; every object of the layout is accepted.
func TestChartAppliesOnAPIServer(t *testing.T) {
	tl := setup(t)
	access := []string{
		"serviceaccount/ovnkube-egressip-master", "serviceaccount/ovnkube-egressip-node",
		"clusterrole.rbac.authorization.k8s.io/ovnkube-egressip-master",
		"clusterrole.rbac.authorization.k8s.io/ovnkube-egressip-node",
		"clusterrolebinding.rbac.authorization.k8s.io/ovnkube-egressip-master",
		"clusterrolebinding.rbac.authorization.k8s.io/ovnkube-egressip-node",
		"role.rbac.authorization.k8s.io/ovnkube-egressip-master-lease",
		"rolebinding.rbac.authorization.k8s.io/ovnkube-egressip-master-lease",
		"validatingadmissionpolicy.admissionregistration.k8s.io/ovnkube-egressip-node-writes",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/ovnkube-egressip-node-writes",
		"configmap/ovnkube-config",
		"daemonset.apps/ovnkube-egressip-node",
	}
	cases := []struct {
		layout, mode string
		objects      []string
		args         []string // in the rendered text
	}{
		{"centralized", "shared", []string{"deployment.apps/ovnkube-egressip-master",
			"poddisruptionbudget.policy/ovnkube-egressip-master"}, []string{"- --init-master\n", "- --init-node=$(NODE_NAME)\n"}},
		{"centralized", "local", []string{"deployment.apps/ovnkube-egressip-master"}, []string{"mode = local\n"}},
		{"interconnect", "shared", []string{"deployment.apps/ovnkube-egressip-cluster-manager",
			"poddisruptionbudget.policy/ovnkube-egressip-cluster-manager"},
			[]string{"- --init-cluster-manager\n", "- --init-ovnkube-controller=$(NODE_NAME)\n", "- --init-node=$(NODE_NAME)\n",
				"- --nb-address=unix:/var/run/ovn/ovnnb_db.sock\n", "fieldPath: status.hostIP\n"}},
		{"interconnect", "local", []string{"deployment.apps/ovnkube-egressip-cluster-manager"}, []string{"mode = local\n"}},
	}
	for _, c := range cases {
		t.Run(c.layout+"/"+c.mode, func(t *testing.T) {
			manifest := tl.template(t, "layout="+c.layout, "gatewayMode="+c.mode)
			for _, a := range c.args {
				if !bytes.Contains(manifest, []byte(a)) {
					t.Errorf("helm template --set layout=%s: no %q in\n%s", c.layout, a, manifest)
				}
			}
			out, err := tl.kubectl(manifest, "apply", "--dry-run=server", "-f", "-")
			if err != nil {
				t.Fatalf("helm template --set layout=%s --set gatewayMode=%s | kubectl apply --dry-run=server -f -: %v\n%s",
					c.layout, c.mode, err, out)
			}
			for _, w := range append(append([]string{}, access...), c.objects...) {
				if !strings.Contains(out, w+" created (server dry run)") {
					t.Errorf("%s not accepted:\n%s", w, out)
				}
			}
			other := map[string]string{"centralized": "ovnkube-egressip-cluster-manager", "interconnect": "deployment.apps/ovnkube-egressip-master"}[c.layout]
			if strings.Contains(out, other) {
				t.Errorf("layout %s rendered %s:\n%s", c.layout, other, out)
			}
		})
	}
}

// TestChartDryRunRejectsInvalid: the same pipeline fails on a manifest the server refuses (a node selector key that
// is no label key passes the chart's schema, not the apiserver's validation), so the passing cases above mean
// something.
func TestChartDryRunRejectsInvalid(t *testing.T) {
	tl := setup(t)
	for _, layout := range []string{"centralized", "interconnect"} {
		manifest := tl.template(t, "layout="+layout, "nodeSelector.a/b/c=x")
		out, err := tl.kubectl(manifest, "apply", "--dry-run=server", "-f", "-")
		if err == nil {
			t.Fatalf("layout %s with nodeSelector a/b/c: kubectl apply --dry-run=server accepted it:\n%s", layout, out)
		}
		if !strings.Contains(out, "nodeSelector") {
			t.Errorf("layout %s: the error does not name the field:\n%s", layout, out)
		}
	}
}
