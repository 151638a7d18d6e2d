// Package chart proves the Helm chart dist/helm/ovnkube-egressip against a real kube-apiserver v1.37.2 with the
// CRDs installed: what `helm template` renders in each layout passes the server's schema, strict field validation
// and admission (`kubectl apply --dry-run=server`).
package chart

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

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
	root := mustRoot(t)
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
	out, err := tl.tryTemplate(set...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tryTemplate is template that returns helm's failure (with its stderr) instead of failing the test.
func (tl *tools) tryTemplate(set ...string) ([]byte, error) {
	args := []string{"template", "ovnkube-egressip", filepath.Join(tl.root, "dist", "helm", "ovnkube-egressip"),
		"--namespace", namespace}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var out, errb bytes.Buffer
	cmd := exec.Command(tl.helm, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.Bytes(), nil
}

// podSpecs decodes the Deployment and the DaemonSet of a rendered manifest: their pod templates by object name.
func podSpecs(t *testing.T, manifest []byte) map[string]corev1.PodSpec {
	t.Helper()
	specs := map[string]corev1.PodSpec{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return specs
		}
		if err != nil {
			t.Fatal(err)
		}
		var obj struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
			Spec     struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := utilyaml.Unmarshal(doc, &obj); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if obj.Kind == "Deployment" || obj.Kind == "DaemonSet" {
			specs[obj.Metadata.Name] = obj.Spec.Template.Spec
		}
	}
}

func (tl *tools) kubectl(stdin []byte, args ...string) (string, error) {
	cmd := exec.Command(tl.env.Kubectl, append([]string{"--kubeconfig", tl.env.Kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestChartOnAPIServer runs the cases below against one kube-apiserver (each start costs about 7 s).
func TestChartOnAPIServer(t *testing.T) {
	tl := setup(t)
	t.Run("applies", func(t *testing.T) { testApplies(t, tl) })
	t.Run("rejects-invalid", func(t *testing.T) { testDryRunRejectsInvalid(t, tl) })
	t.Run("nb-tls", func(t *testing.T) { testNBTLS(t, tl) })
}

// testApplies: helm template dist/helm/ovnkube-egressip --set layout=X | kubectl apply
// --dry-run=server -f -, in both layouts and both gateway modes; every object of the layout is accepted.
func testApplies(t *testing.T, tl *tools) {
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

// testDryRunRejectsInvalid: the same pipeline fails on a manifest the server refuses (a node selector key that
// is no label key passes the chart's schema, not the apiserver's validation), so the passing cases above mean
// something.
func testDryRunRejectsInvalid(t *testing.T, tl *tools) {
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

// TestChartZoneNB: in the interconnect layout the zone controller's NB is, by default, the socket an OVN-Kubernetes
// node has: its single-node-zone pods mount the host's /var/run/openvswitch at /var/run/ovn, so the pod mounts that
// host directory (read-only, once it exists) at /var/run/ovn and connects to /var/run/ovn/ovnnb_db.sock. A tcp: zone
// NB mounts nothing; a unix: socket outside /var/run/ovn/ fails the install, naming the value.
func TestChartZoneNB(t *testing.T) {
	tl := &tools{root: mustRoot(t)}
	var err error
	if tl.helm, err = apiserver.Helm(tl.root); err != nil {
		t.Fatal(err)
	}
	node := podSpecs(t, tl.template(t, "layout=interconnect"))["ovnkube-egressip-node"]
	if len(node.Containers) != 1 {
		t.Fatalf("node DaemonSet: %d containers", len(node.Containers))
	}
	c := node.Containers[0]
	if !slices.Contains(c.Command, "--nb-address=unix:/var/run/ovn/ovnnb_db.sock") {
		t.Errorf("zone controller command %v: no --nb-address=unix:/var/run/ovn/ovnnb_db.sock", c.Command)
	}
	mount := volumeMount(c, "/var/run/ovn")
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("no read-only mount at /var/run/ovn: %+v", c.VolumeMounts)
	}
	v := volume(node, mount.Name)
	if v == nil || v.HostPath == nil || v.HostPath.Path != "/var/run/openvswitch" || v.HostPath.Type == nil ||
		*v.HostPath.Type != corev1.HostPathDirectory {
		t.Errorf("volume %s: %+v, want hostPath /var/run/openvswitch of type Directory", mount.Name, v)
	}

	node = podSpecs(t, tl.template(t, "layout=interconnect", "zone.nbAddress=tcp:$(NODE_IP):6641"))["ovnkube-egressip-node"]
	if m := volumeMount(node.Containers[0], "/var/run/ovn"); m != nil {
		t.Errorf("tcp: zone NB: the pod still mounts %s at /var/run/ovn", m.Name)
	}
	if _, err := tl.tryTemplate("layout=interconnect", "zone.nbAddress=unix:/run/ovn/ovnnb_db.sock"); err == nil ||
		!strings.Contains(err.Error(), `zone.nbAddress "unix:/run/ovn/ovnnb_db.sock"`) {
		t.Errorf("a zone socket outside /var/run/ovn/: %v", err)
	}
}

// testNBTLS: with an ssl: NB and nbTLS.secretName, the process that connects to NB (the master; the zone
// controller) gets the Secret's files read-only at /ovn-cert and the flags naming them, the others get neither, and the
// whole passes the apiserver's dry run; an ssl: NB without a Secret fails the install, naming nbTLS.secretName.
func testNBTLS(t *testing.T, tl *tools) {
	cases := []struct {
		layout, addr, user, other string
	}{
		{"centralized", "nbAddress=ssl:ovnkube-db.ovn-kubernetes.svc:6641", "ovnkube-egressip-master", "ovnkube-egressip-node"},
		{"interconnect", "zone.nbAddress=ssl:$(NODE_IP):6641", "ovnkube-egressip-node", "ovnkube-egressip-cluster-manager"},
	}
	for _, c := range cases {
		t.Run(c.layout, func(t *testing.T) {
			if _, err := tl.tryTemplate("layout="+c.layout, c.addr); err == nil || !strings.Contains(err.Error(), "set nbTLS.secretName") {
				t.Errorf("ssl: NB without nbTLS.secretName: %v", err)
			}
			manifest := tl.template(t, "layout="+c.layout, c.addr, "nbTLS.secretName=ovn-nb-client",
				"nbTLS.privkeyKey=key.pem", "nbTLS.certCommonName=ovnnb")
			specs := podSpecs(t, manifest)
			user, other := specs[c.user], specs[c.other]
			if len(user.Containers) != 1 || len(other.Containers) != 1 {
				t.Fatalf("%s, %s: not one container each in %v", c.user, c.other, specs)
			}
			cmd := user.Containers[0].Command
			for _, f := range []string{"--nb-client-privkey=/ovn-cert/client-privkey.pem", "--nb-client-cert=/ovn-cert/client-cert.pem",
				"--nb-client-cacert=/ovn-cert/ca-cert.pem", "--nb-cert-common-name=ovnnb"} {
				if !slices.Contains(cmd, f) {
					t.Errorf("%s: no %s in %v", c.user, f, cmd)
				}
			}
			mount := volumeMount(user.Containers[0], "/ovn-cert")
			if mount == nil || !mount.ReadOnly {
				t.Fatalf("%s: no read-only mount at /ovn-cert: %+v", c.user, user.Containers[0].VolumeMounts)
			}
			v := volume(user, mount.Name)
			if v == nil || v.Secret == nil || v.Secret.SecretName != "ovn-nb-client" {
				t.Fatalf("%s: volume %s is not the Secret ovn-nb-client: %+v", c.user, mount.Name, v)
			}
			want := map[string]string{"key.pem": "client-privkey.pem", "tls.crt": "client-cert.pem", "ca.crt": "ca-cert.pem"}
			got := map[string]string{}
			for _, it := range v.Secret.Items {
				got[it.Key] = it.Path
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s: Secret items %v, want %v", c.user, got, want)
			}
			if c.layout == "centralized" && (user.SecurityContext == nil || user.SecurityContext.FSGroup == nil || *user.SecurityContext.FSGroup != 65532) {
				t.Errorf("master: no fsGroup 65532 (the image's group) to read the 0440 files: %+v", user.SecurityContext)
			}
			if volumeMount(other.Containers[0], "/ovn-cert") != nil || slices.ContainsFunc(other.Containers[0].Command, func(a string) bool {
				return strings.HasPrefix(a, "--nb-client-")
			}) {
				t.Errorf("%s, which does not connect to NB, got the NB client files: %v", c.other, other.Containers[0].Command)
			}
			if out, err := tl.kubectl(manifest, "apply", "--dry-run=server", "-f", "-"); err != nil {
				t.Fatalf("kubectl apply --dry-run=server: %v\n%s", err, out)
			}
		})
	}
}

func mustRoot(t *testing.T) string {
	t.Helper()
	root, err := apiserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func volumeMount(c corev1.Container, path string) *corev1.VolumeMount {
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

func volume(p corev1.PodSpec, name string) *corev1.Volume {
	for i := range p.Volumes {
		if p.Volumes[i].Name == name {
			return &p.Volumes[i]
		}
	}
	return nil
}
