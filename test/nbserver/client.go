package nbserver

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/client"
	"github.com/ovn-org/libovsdb/model"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/ovsdbaddr"
)

// NewClient builds (does not connect) a libovsdb client of dbm for the NB at address, the harnesses' one NB client
// builder: address is an --nb-address value (ovsdbaddr.ParseList: comma-separated, a RAFT cluster's members talk to
// the leader only, with ovsdbaddr.ClientOptions); libovsdb logs nowhere (its default logger is verbose and sets a
// global verbosity). extra options come last: Reconnect, or client.WithLogger for a logger of the caller's.
func NewClient(address string, dbm model.ClientDBModel, extra ...client.Option) (client.Client, error) {
	eps, err := ovsdbaddr.ParseList(address)
	if err != nil {
		return nil, fmt.Errorf("NB address %q: %w", address, err)
	}
	quiet := logr.Discard()
	return client.NewOVSDBClient(dbm, append(ovsdbaddr.ClientOptions(&quiet, eps, nil, true), extra...)...)
}

// Reconnect is libovsdb's reconnect option with an exponential backoff from initial to max between attempts that
// never gives up (libovsdb panics when the backoff stops); timeout bounds each attempt.
func Reconnect(timeout, initial, max time.Duration) client.Option {
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval, retry.MaxElapsedTime = initial, max, 0
	return client.WithReconnect(timeout, retry)
}

// Connect is NewClient connected within timeout (or ctx), closed at t's cleanup; it fails t when it cannot.
func Connect(ctx context.Context, t testing.TB, address string, dbm model.ClientDBModel, timeout time.Duration,
	extra ...client.Option) client.Client {
	t.Helper()
	c, err := NewClient(address, dbm, extra...)
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Connect(cctx); err != nil {
		t.Fatalf("connect to NB %s: %v", address, err)
	}
	t.Cleanup(c.Close)
	return c
}
