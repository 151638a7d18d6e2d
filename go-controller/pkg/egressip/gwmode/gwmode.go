// Package gwmode is the gateway mode (ovnkube --gateway-mode, [gateway] mode in the
// config file): its one type, its values and the one check of a value. The
// config, the master, the node daemon and the test harness all use it.
package gwmode

import "fmt"

// Mode is a gateway mode: it decides where a served pod's traffic is rerouted
// and who translates its source address.
type Mode string

const (
	// Shared: pods are rerouted to the holder's gateway router join IP, and the
	// gateway router GR_<node> SNATs to the egress IP (the master writes those rows;
	// the node daemon only publishes egress facts).
	Shared Mode = "shared"
	// Local: pods are rerouted to the holder's management port IP, and the node
	// daemon SNATs to the egress IP on the host.
	Local Mode = "local"
)

// Parse returns the Mode s names, exactly "shared" or "local"; any other value
// (the empty string too) is an error that quotes it and names both.
func Parse(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Shared, Local:
		return m, nil
	default:
		return "", fmt.Errorf("gateway mode %q is neither %q nor %q", s, Shared, Local)
	}
}
