package podrun

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/test/repo"
)

func TestSetINI(t *testing.T) {
	conf := "[default]\ncluster-subnets = 10.244.0.0/16\n\n[ovnnorth]\naddress = tcp:ovnkube-db:6641\n\n[gateway]\nmode = shared\n"
	got := SetINI(conf, map[string]string{"ovnnorth.address": "tcp:172.18.0.1:6641", "gateway.mode": "local", "logging.loglevel": "4"})
	want := "[default]\ncluster-subnets = 10.244.0.0/16\n\n[ovnnorth]\naddress = tcp:172.18.0.1:6641\n\n[gateway]\nmode = local\n\n[logging]\nloglevel = 4\n"
	if got != want {
		t.Fatalf("SetINI:\n%s\nwant:\n%s", got, want)
	}
}

func TestExpand(t *testing.T) {
	vals := map[string]string{"NODE_NAME": "node1"}
	for in, want := range map[string]string{
		"--init-node=$(NODE_NAME)": "--init-node=node1",
		"$(UNSET) stays":           "$(UNSET) stays",
		"$$(NODE_NAME) escaped":    "$(NODE_NAME) escaped",
		"plain $HOME":              "plain $HOME",
	} {
		if got := expand(in, vals); got != want {
			t.Errorf("expand(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestManifestPodSpecs builds the runtime spec of every pod of dist/manifests/ovnkube-egressip.yaml as the runtime
// does and checks what the manifests say arrives: command, NODE_NAME, user, capabilities, mounts, CPU shares.
func TestManifestPodSpecs(t *testing.T) {
	m, err := LoadManifests(filepath.Join(repo.Root(), "dist", "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	pl := Placement{Namespace: "ovn-egressip", PodName: "p", NodeName: "node1", HostIP: "172.18.0.11", PodIP: "172.18.0.11",
		Netns: "/var/run/netns/oeip-node1", APIServerHost: "172.18.0.1", APIServerPort: "6443"}

	node, err := m.Workload("DaemonSet", "ovn-egressip", "ovnkube-egressip-node")
	if err != nil {
		t.Fatal(err)
	}
	vols := map[string]string{"config": "/tmp/cfg", "xtables-lock": "/run/xtables.lock"}
	s, err := ContainerSpec(node.Template.Spec, node.Template.Spec.Containers[0], ImageConfig{User: "0:0", Env: []string{"PATH=/usr/sbin:/usr/bin"}},
		"/rootfs", pl, vols, "/sa")
	if err != nil {
		t.Fatal(err)
	}
	if s.Process.User.UID != 0 {
		t.Errorf("node user %d, want 0", s.Process.User.UID)
	}
	env := strings.Join(s.Process.Env, " ")
	for _, w := range []string{"NODE_NAME=node1", "KUBERNETES_SERVICE_HOST=172.18.0.1", "PATH=/usr/sbin:/usr/bin"} {
		if !strings.Contains(env, w) {
			t.Errorf("node env %q lacks %s", env, w)
		}
	}
	if !strings.Contains(strings.Join(s.Process.Args, " "), "--init-node") {
		t.Errorf("node args %q", s.Process.Args)
	}
	for _, c := range []string{"CAP_NET_ADMIN", "CAP_NET_RAW"} {
		if !contains(s.Process.Capabilities.Effective, c) {
			t.Errorf("node capabilities %v lack %s", s.Process.Capabilities.Effective, c)
		}
	}
	mounts := map[string]string{}
	for _, mt := range s.Mounts {
		mounts[mt.Destination] = mt.Source
	}
	for dst, src := range map[string]string{"/etc/ovnkube": "/tmp/cfg", "/run/xtables.lock": "/run/xtables.lock", ServiceAccountMountPath: "/sa"} {
		if mounts[dst] != src {
			t.Errorf("node mount %s from %q, want %q", dst, mounts[dst], src)
		}
	}
	var netns string
	for _, n := range s.Linux.Namespaces {
		if n.Type == "network" {
			netns = n.Path
		}
	}
	if netns != pl.Netns {
		t.Errorf("node netns %q, want %q", netns, pl.Netns)
	}
	if s.Linux.Resources.CPU.Shares == nil || *s.Linux.Resources.CPU.Shares <= 2 {
		t.Errorf("node CPU shares %v: the manifest's CPU request did not arrive", s.Linux.Resources.CPU.Shares)
	}

	master, err := m.Workload("Deployment", "ovn-egressip", "ovnkube-egressip-master")
	if err != nil {
		t.Fatal(err)
	}
	s, err = ContainerSpec(master.Template.Spec, master.Template.Spec.Containers[0], ImageConfig{User: "65532:65532"}, "/rootfs",
		Placement{Namespace: "ovn-egressip", PodName: "m"}, map[string]string{"config": "/tmp/cfg"}, "/sa")
	if err != nil {
		t.Fatal(err)
	}
	if s.Process.User.UID != 65532 || len(s.Process.Capabilities.Effective) != 0 {
		t.Errorf("master runs as %d with effective capabilities %v, want 65532 with none", s.Process.User.UID, s.Process.Capabilities.Effective)
	}
	if want := []string{"/usr/bin/ovnkube", "--init-master"}; !reflect.DeepEqual(s.Process.Args[:2], want) {
		t.Errorf("master args %q", s.Process.Args)
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
