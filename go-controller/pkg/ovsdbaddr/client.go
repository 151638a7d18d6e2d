package ovsdbaddr

import (
	"crypto/tls"

	"github.com/go-logr/logr"
	"github.com/ovn-org/libovsdb/client"
)

// ClientOptions are the libovsdb client options that reach the database at addrs (checked entries, as ParseList
// returns them): logger for libovsdb's log, one endpoint per address in order, leader only when leaderOnly is set
// and there are several (a RAFT cluster's members), and tlsConf when it is not nil (required for ssl: addresses).
// Callers add the rest (reconnect, ...). It is the one builder of these options: the master's NB client, explain,
// migrate and the test harness (test/nbserver) all use it.
func ClientOptions(logger *logr.Logger, addrs []string, tlsConf *tls.Config, leaderOnly bool) []client.Option {
	opts := []client.Option{client.WithLogger(logger)}
	for _, a := range addrs {
		opts = append(opts, client.WithEndpoint(a))
	}
	if leaderOnly && len(addrs) > 1 {
		opts = append(opts, client.WithLeaderOnly(true))
	}
	if tlsConf != nil {
		opts = append(opts, client.WithTLSConfig(tlsConf))
	}
	return opts
}
