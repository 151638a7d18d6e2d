package config

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/ovsdbaddr"
)

// WaitNBReachable waits until at least one of the NB addresses accepts a connection
// (for an ssl: address, a TLS session with tlsConf: see tlsAccepted), retrying
// every 200 ms for up to timeout. The error names --nb-address and every address
// with its last dial or TLS error.
func WaitNBReachable(ctx context.Context, addrs []string, tlsConf *tls.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := map[string]error{}
	for {
		for _, a := range addrs {
			network, target := ovsdbaddr.DialTarget(a)
			var d interface {
				DialContext(context.Context, string, string) (net.Conn, error)
			} = &net.Dialer{}
			if strings.HasPrefix(a, "ssl:") {
				d = &tls.Dialer{Config: tlsConf}
			}
			c, err := d.DialContext(ctx, network, target)
			if err == nil {
				if tc, ok := c.(*tls.Conn); ok {
					err = tlsAccepted(tc)
				}
				c.Close()
			}
			if err == nil {
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

// serverVerdict is how long tlsAccepted waits for the server to refuse the client.
const serverVerdict = 300 * time.Millisecond

// tlsAccepted tells whether the server kept a TLS session whose handshake just
// succeeded on the client's side. In TLS 1.3 the server checks the client's
// certificate after the client is done, and refuses it with an alert the client
// reads on its next read: it waits for one for serverVerdict (an OVSDB server
// sends nothing unasked, so silence is acceptance).
func tlsAccepted(c *tls.Conn) error {
	if err := c.SetReadDeadline(time.Now().Add(serverVerdict)); err != nil {
		return err
	}
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		return nil
	}
	return fmt.Errorf("the server ended the TLS session (is --%s signed by a CA it trusts?): %w", FlagNBClientCert, err)
}
