package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Binaries are the paths of the control plane programs.
type Binaries struct {
	APIServer string // kube-apiserver v1.37.2
	Kubectl   string // kubectl v1.37.2
	Etcd      string // etcd (Debian's etcd-server 3.4 works)
}

// Environment overrides for ResolveBinaries.
const (
	// EnvKubeBinDir names a directory holding kube-apiserver and kubectl; contrib/build-kube.sh is then not run.
	EnvKubeBinDir = "OVN_EIP_KUBE_BIN"
	// EnvEtcd is the path of the etcd binary (default: etcd on PATH, then /usr/bin/etcd).
	EnvEtcd = "OVN_EIP_ETCD"
)

// ResolveBinaries finds kube-apiserver and kubectl (from $OVN_EIP_KUBE_BIN, else by running
// <repoRoot>/contrib/build-kube.sh, which prints the cache directory and builds into it on first use) and etcd.
// Errors name the missing piece and how to get it.
func ResolveBinaries(repoRoot string) (Binaries, error) {
	dir := os.Getenv(EnvKubeBinDir)
	if dir == "" {
		var err error
		if dir, err = cachedBinDir(repoRoot, "build-kube.sh"); err != nil {
			return Binaries{}, err
		}
	}
	b := Binaries{APIServer: filepath.Join(dir, "kube-apiserver"), Kubectl: filepath.Join(dir, "kubectl")}
	for _, p := range []string{b.APIServer, b.Kubectl} {
		if err := executable(p); err != nil {
			return Binaries{}, err
		}
	}
	etcd, err := findEtcd()
	if err != nil {
		return Binaries{}, err
	}
	b.Etcd = etcd
	return b, nil
}

// Helm returns the path of the helm CLI that <repoRoot>/contrib/build-helm.sh builds from the Go module proxy
// (once per machine; it prints the cache directory).
func Helm(repoRoot string) (string, error) {
	dir, err := cachedBinDir(repoRoot, "build-helm.sh")
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "helm")
	return p, executable(p)
}

// cachedBinDir runs the build script contrib/<script>, which builds into its per-machine cache on first use and
// prints the bin directory.
func cachedBinDir(repoRoot, script string) (string, error) {
	path := filepath.Join(repoRoot, "contrib", script)
	var out, errb bytes.Buffer
	cmd := exec.Command("bash", path)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s failed: %w: %s", path, err, strings.TrimSpace(errb.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

func findEtcd() (string, error) {
	if p := os.Getenv(EnvEtcd); p != "" {
		return p, executable(p)
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if err := executable("/usr/bin/etcd"); err != nil {
		return "", errors.New("etcd not found (install Debian's etcd-server: make install-deps, or set " + EnvEtcd + ")")
	}
	return "/usr/bin/etcd", nil
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("binary %s: %w", p, err)
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("binary %s is not executable", p)
	}
	return nil
}

// RepoRoot returns the root of the ovn-egressip checkout: the nearest directory above the working directory (go test
// runs in the package directory) whose go.mod declares our module, else the one above this source file.
func RepoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		starts = append(starts, filepath.Dir(file))
	}
	for _, d := range starts {
		for {
			if isOurModule(filepath.Join(d, "go.mod")) {
				return d, nil
			}
			parent := filepath.Dir(d)
			if parent == d {
				break
			}
			d = parent
		}
	}
	return "", errors.New("cannot find the ovn-egressip repository root (a go.mod declaring " + modulePath + ")")
}

const modulePath = "github.com/ovn-egressip/ovn-egressip"

func isOurModule(gomod string) bool {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == modulePath
		}
	}
	return false
}
