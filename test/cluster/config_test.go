package cluster

import (
	"testing"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
)

// The harness takes the gateway mode as ovnkube does (gwmode.Parse), shared when unset.
func TestConfigGatewayMode(t *testing.T) {
	for _, tc := range []struct {
		in   gwmode.Mode
		want gwmode.Mode
		err  string
	}{
		{"", gwmode.Shared, ""},
		{gwmode.Local, gwmode.Local, ""},
		{"hybrid", "", `cluster: gateway mode "hybrid" is neither "shared" nor "local"`},
	} {
		c := Config{StateDir: t.TempDir(), GatewayMode: tc.in}
		err := c.setDefaults()
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("gateway mode %q: err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || c.GatewayMode != tc.want {
			t.Errorf("gateway mode %q: got %q, %v; want %q", tc.in, c.GatewayMode, err, tc.want)
		}
	}
}
