// Package repo is the test harnesses' view of the repository: where its root is, and the ovnkube they build from it.
package repo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Root is the repository's root directory (found from this source file's place in it).
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// BuildOvnkube builds ./go-controller/cmd/ovnkube (with the race detector when race) into a new temporary directory
// named after prefix and returns the binary's path: the test binaries of test/e2e and test/chaos run it as their
// processes. Remove its directory (filepath.Dir of it) when done.
func BuildOvnkube(prefix string, race bool) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "ovnkube")
	args := []string{"build", "-o", bin, "./go-controller/cmd/ovnkube"}
	if race {
		args = []string{"build", "-race", "-o", bin, "./go-controller/cmd/ovnkube"}
	}
	build := exec.Command("go", args...)
	build.Dir = Root()
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("%w\n%s", err, out)
	}
	return bin, nil
}

// RunWithOvnkube is a TestMain of a package whose tests run ovnkube as processes: it builds ovnkube (BuildOvnkube;
// the temporary directory is prefix, name says whose it is in a failure), sets *bin to it, runs the tests, removes
// the binary and exits with the tests' code. It exits 1 when the build fails.
func RunWithOvnkube(m *testing.M, name, prefix string, race bool, bin *string) {
	b, err := BuildOvnkube(prefix, race)
	if err != nil {
		fmt.Printf("%s: building ovnkube failed: %v\n", name, err)
		os.Exit(1)
	}
	*bin = b
	code := m.Run()
	os.RemoveAll(filepath.Dir(b))
	os.Exit(code)
}
