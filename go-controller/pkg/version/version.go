// Package version says which build of ovn-egressip is running: `ovnkube --version` and the start-up log line.
package version

import (
	"runtime/debug"
)

// gitVersion is set at link time by the project's builds (make build, make image):
// -ldflags "-X github.com/ovn-egressip/ovn-egressip/go-controller/pkg/version.gitVersion=$(git describe --tags --always --dirty)".
// It is never assigned at run time.
var gitVersion string

// String is the link-time git version when set; otherwise what the Go toolchain recorded of the VCS
// (a commit, "-dirty" when the tree had changes), else "unknown".
func String() string {
	if gitVersion != "" {
		return gitVersion
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return fromBuildInfo(bi.Settings)
}

// fromBuildInfo renders the vcs.revision (12 characters) and vcs.modified settings.
func fromBuildInfo(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
