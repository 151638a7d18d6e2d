package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
)

// upstreamPorts are the ports upstream OVN-Kubernetes' daemons bind on the host
// (its dist/images/ovnkube.sh defaults): the master / cluster manager's metrics
// (9409), ovnkube-node's (9410), the OVN metrics (9476) and the OVS metrics
// exporter (9310). The egress IP health check port 9107 is upstream's on
// purpose: it belongs to whichever egress IP controller runs.
var upstreamPorts = map[int]string{9409: "ovnkube-master metrics", 9410: "ovnkube-node metrics", 9476: "OVN metrics", 9310: "OVS metrics exporter"}

// TestPortsAvoidUpstream: no port the manifests open on the host, nor the
// profiles' default, is one upstream's daemons bind (both run with hostNetwork).
func TestPortsAvoidUpstream(t *testing.T) {
	root, err := apiserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	// Both layouts, rendered from the chart (make manifests).
	for _, f := range []string{"ovnkube-egressip.yaml", filepath.Join("interconnect", "ovnkube-egressip.yaml")} {
		manifest, err := os.ReadFile(filepath.Join(root, "dist", "manifests", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, re := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^\s*(?:containerPort|port|hostPort):\s*(\d+)\s*$`),
			regexp.MustCompile(`(?m)[="](?:[0-9.]+|\[[0-9a-f:]*\]):(\d+)"?\s*$`), // --flag=0.0.0.0:PORT or "0.0.0.0:PORT" in a command
		} {
			for _, m := range re.FindAllSubmatch(manifest, -1) {
				p, err := strconv.Atoi(string(m[1]))
				if err != nil {
					t.Fatalf("%s: port %q: %v", f, m[1], err)
				}
				seen[p] = true
			}
		}
	}
	_, pp, err := net.SplitHostPort(config.DefaultPprofBindAddress)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(pp)
	if err != nil {
		t.Fatal(err)
	}
	seen[p] = true
	if len(seen) < 3 {
		t.Fatalf("found only ports %v in the manifest: the patterns no longer match it", seen)
	}
	for p := range seen {
		if what, ok := upstreamPorts[p]; ok {
			t.Errorf("port %d is upstream OVN-Kubernetes' %s", p, what)
		}
	}
	t.Logf("ports: %v", seen)
}
