package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion: the project's builds stamp the git version at link time (make build, make image), and
// `ovnkube --version` prints it.
func TestVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds ovnkube")
	}
	bin := filepath.Join(t.TempDir(), "ovnkube")
	const stamp = "v0.0.0-test-1-gabcdef0"
	build := exec.Command("go", "build", "-ldflags", "-X github.com/ovn-egressip/ovn-egressip/go-controller/pkg/version.gitVersion="+stamp,
		"-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("ovnkube --version: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "ovnkube version "+stamp {
		t.Errorf("ovnkube --version printed %q, want %q", got, "ovnkube version "+stamp)
	}
}
