package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{nil, "unknown"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "9ae8c24a1b2c3d4e5f60718293a4b5c6d7e8f901"}}, "9ae8c24a1b2c"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "9ae8c24a1b2c3d4e"}, {Key: "vcs.modified", Value: "true"}}, "9ae8c24a1b2c-dirty"},
		{[]debug.BuildSetting{{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "false"}}, "abc"},
		{[]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, "unknown"},
	} {
		if got := fromBuildInfo(tc.settings); got != tc.want {
			t.Errorf("fromBuildInfo(%v) = %q, want %q", tc.settings, got, tc.want)
		}
	}
}
