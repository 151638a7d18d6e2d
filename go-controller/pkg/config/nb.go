package config

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

func splitHostPort(hp string) (string, int, error) {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n <= 0 || n > 65535 {
		return "", 0, fmt.Errorf("bad port %q", port)
	}
	return host, n, nil
}

// dialTarget turns an OVSDB address (tcp:H:P, ssl:H:P, unix:PATH) into a net.Dial network and address.
func dialTarget(addr string) (network, target string) {
	scheme, rest, _ := strings.Cut(addr, ":")
	if scheme == "unix" {
		return "unix", rest
	}
	return "tcp", rest
}

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
			network, target := dialTarget(a)
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
