package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// The version ResolveOVSTools looks for is the one contrib/build-ovs.sh builds.
func TestOVSVersionMatchesBuildScript(t *testing.T) {
	script, err := os.ReadFile(filepath.Join("..", "..", "contrib", "build-ovs.sh"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^V=(\S+)$`).FindSubmatch(script)
	if m == nil {
		t.Fatal("contrib/build-ovs.sh has no V=<version> line")
	}
	if string(m[1]) != OVSDebianVersion {
		t.Fatalf("contrib/build-ovs.sh builds openvswitch %s, OVSDebianVersion is %s", m[1], OVSDebianVersion)
	}
}

// ResolveOVSTools takes the build in $OVN_EIP_CACHE only when its stamp names the version and every program and the
// schema are there; otherwise Debian's programs in PATH.
func TestResolveOVSTools(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)
	if got := ResolveOVSTools(); got.Bin != "" || got.Schema != debianVswitchSchema || got.Path("ovs-vsctl") != "ovs-vsctl" {
		t.Fatalf("empty cache: %+v, want Debian's", got)
	}
	dir := filepath.Join(cache, "ovs-"+OVSDebianVersion)
	bin := filepath.Join(dir, "bin")
	write := func(f, data string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, prog := range ovsPrograms {
		write(filepath.Join(bin, prog), "#!/bin/sh\n", 0o755)
	}
	schema := filepath.Join(dir, "share", "openvswitch", "vswitch.ovsschema")
	write(schema, "{}", 0o644)
	if got := ResolveOVSTools(); got.Bin != "" {
		t.Fatalf("no stamp: %+v, want Debian's", got)
	}
	write(filepath.Join(bin, ".stamp"), "3.5.0-1\n", 0o644)
	if got := ResolveOVSTools(); got.Bin != "" {
		t.Fatalf("stamp of another version: %+v, want Debian's", got)
	}
	write(filepath.Join(bin, ".stamp"), OVSDebianVersion+"\n", 0o644)
	got := ResolveOVSTools()
	if got.Bin != bin || got.Schema != schema || got.Path("ovs-vswitchd") != filepath.Join(bin, "ovs-vswitchd") {
		t.Fatalf("stamped build: %+v, want the programs in %s", got, bin)
	}
	if err := checkOVSTools(got); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(bin, "ovs-dpctl")); err != nil {
		t.Fatal(err)
	}
	if got := ResolveOVSTools(); got.Bin != "" {
		t.Fatalf("build without ovs-dpctl: %+v, want Debian's", got)
	}
}
