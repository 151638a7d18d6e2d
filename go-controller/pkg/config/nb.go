package config

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/ovsdbaddr"
)

// WaitNBReachable waits until at least one of the NB addresses accepts a connection,
// retrying every 200 ms for up to timeout. The error names --nb-address and every
// address with its last dial error.
func WaitNBReachable(ctx context.Context, addrs []string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var d net.Dialer
	last := map[string]error{}
	for {
		for _, a := range addrs {
			network, target := ovsdbaddr.DialTarget(a)
			c, err := d.DialContext(ctx, network, target)
			if err == nil {
				c.Close()
				return nil
			}
			last[a] = err
		}
		select {
		case <-ctx.Done():
			var parts []string
			for _, a := range addrs {
				parts = append(parts, fmt.Sprintf("%s (%v)", a, last[a]))
			}
			return fmt.Errorf("--%s unreachable after %s: %s", FlagNBAddress, timeout, strings.Join(parts, "; "))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
