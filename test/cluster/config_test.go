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

// The interconnect layout runs with or without kubelets, and with one standalone NB per zone only.
func TestConfigLayout(t *testing.T) {
	for _, tc := range []struct {
		layout, nb string
		kubelets   bool
		err        string
	}{
		{"", "", false, ""},
		{LayoutInterconnect, "", false, ""},
		{LayoutInterconnect, "", true, ""},
		{LayoutCentralized, NBRaft, true, ""},
		{LayoutInterconnect, NBRaft, false, `cluster: the interconnect layout runs one standalone NB per zone`},
		{"zones", "", false, `cluster: layout "zones" is neither "centralized" nor "interconnect"`},
	} {
		c := Config{StateDir: t.TempDir(), Layout: tc.layout, NB: tc.nb, Kubelets: tc.kubelets}
		err := c.setDefaults()
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("layout %q NB %q kubelets %v: err = %v, want %q", tc.layout, tc.nb, tc.kubelets, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("layout %q NB %q kubelets %v: %v", tc.layout, tc.nb, tc.kubelets, err)
		}
	}
}
