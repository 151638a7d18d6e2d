package node

import (
	"fmt"
	"testing"
)

// waitHost waits until the host's last state holds addrs addresses (any number when addrs < 0) and the SNAT
// rules snat, in snatPods' form ("podIP>egressIP,...").
func (f *fixture) waitHost(t *testing.T, what string, addrs int, snat string) {
	t.Helper()
	waitFor(t, what, func() (bool, string) {
		st, _ := f.host.last()
		return (addrs < 0 || len(st.Addresses) == addrs) && snatPods(st) == snat,
			fmt.Sprintf("%d addresses, SNAT %s", len(st.Addresses), snatPods(st))
	})
}
