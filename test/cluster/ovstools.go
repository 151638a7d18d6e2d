package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// OVSDebianVersion is the version of Debian's source package openvswitch that contrib/build-ovs.sh builds (its V;
// TestOVSVersionMatchesBuildScript keeps the two equal).
const OVSDebianVersion = "4.0.0-2"

// EnvCache overrides the per-machine cache directory of the build scripts (contrib/build-*.sh).
const EnvCache = "OVN_EIP_CACHE"

// CacheDir is the per-machine cache of the build scripts: $OVN_EIP_CACHE, else /var/cache/ovn-egressip.
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	return "/var/cache/ovn-egressip"
}

// OVSTools are the Open vSwitch programs of the test bed's Open_vSwitch side in both layouts: the ovs-vswitchds
// (the root namespace's and, interconnect, every chassis'), the ovsdb-servers of their Open_vSwitch databases (and
// the ovsdb-tool that creates those, with the matching vswitch.ovsschema), and the ovs-vsctl, ovs-appctl, ovs-ofctl
// and ovs-dpctl that talk to them. OVN (ovn-northd, ovn-controller, the NB and SB ovsdb-servers) is always Debian's.
type OVSTools struct {
	Bin    string // directory of the programs; "" = Debian's, found in PATH
	Schema string // vswitch.ovsschema of the Open_vSwitch database
	Origin string // where they come from, for the log
}

// Path is the program prog (e.g. "ovs-vswitchd") of t: a path in t.Bin, or the bare name (looked up in PATH).
func (t OVSTools) Path(prog string) string {
	if t.Bin == "" {
		return prog
	}
	return filepath.Join(t.Bin, prog)
}

// ovsPrograms are the programs contrib/build-ovs.sh installs in its bin directory.
var ovsPrograms = []string{"ovs-vswitchd", "ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovs-appctl", "ovs-ofctl", "ovs-dpctl"}

// debianVswitchSchema is the schema Debian's openvswitch-common installs.
const debianVswitchSchema = "/usr/share/openvswitch/vswitch.ovsschema"

// ResolveOVSTools finds the Open vSwitch programs of the test bed: the ones contrib/build-ovs.sh built into
// CacheDir()/ovs-<OVSDebianVersion> (Debian's source package, whose userspace conntrack does not abort like
// bookworm's 3.1.0) when its bin/.stamp names that version and every program and the schema are there, else
// Debian's openvswitch-switch in PATH.
func ResolveOVSTools() OVSTools {
	dir := filepath.Join(CacheDir(), "ovs-"+OVSDebianVersion)
	bin := filepath.Join(dir, "bin")
	built := OVSTools{Bin: bin, Schema: filepath.Join(dir, "share", "openvswitch", "vswitch.ovsschema"),
		Origin: "built by contrib/build-ovs.sh from Debian source openvswitch " + OVSDebianVersion + " in " + bin}
	stamp, err := os.ReadFile(filepath.Join(bin, ".stamp"))
	if err != nil || strings.TrimSpace(string(stamp)) != OVSDebianVersion {
		return debianOVS(fmt.Sprintf("no build of openvswitch %s in %s", OVSDebianVersion, bin))
	}
	files := []string{built.Schema}
	for _, prog := range ovsPrograms {
		files = append(files, built.Path(prog))
	}
	for _, f := range files {
		if st, err := os.Stat(f); err != nil || st.IsDir() {
			return debianOVS(fmt.Sprintf("the build in %s lacks %s", bin, filepath.Base(f)))
		}
	}
	return built
}

func debianOVS(why string) OVSTools {
	return OVSTools{Schema: debianVswitchSchema,
		Origin: "Debian's openvswitch-switch in PATH (" + why + "; contrib/build-ovs.sh builds one)"}
}

// ovsTools is ResolveOVSTools, resolved once per process (every bring-up of a test binary uses the same programs).
var ovsTools = sync.OnceValue(ResolveOVSTools)

// ovs is the path of the test bed's Open vSwitch program prog (ovsTools).
func ovs(prog string) string { return ovsTools().Path(prog) }

// OVSProgram is the path of the test bed's Open vSwitch program prog ("ovs-appctl", "ovs-ofctl", ...), for the
// tests outside this package that talk to its ovs-vswitchds or Open_vSwitch databases.
func OVSProgram(prog string) string { return ovs(prog) }

// checkOVSTools reports a missing program of t.
func checkOVSTools(t OVSTools) error {
	for _, prog := range ovsPrograms {
		if _, err := exec.LookPath(t.Path(prog)); err != nil {
			return fmt.Errorf("%s not found (%s): run make install-deps", prog, t.Origin)
		}
	}
	if _, err := os.Stat(t.Schema); err != nil {
		return fmt.Errorf("schema of the Open_vSwitch database %s: %w: run make install-deps", t.Schema, err)
	}
	return nil
}

// ovsVersion is the first line of t's ovs-vswitchd --version (e.g. "ovs-vswitchd (Open vSwitch) 4.0.0").
func ovsVersion(t OVSTools) string {
	out, err := exec.Command(t.Path("ovs-vswitchd"), "--version").Output()
	if err != nil {
		return "ovs-vswitchd --version: " + err.Error()
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}
