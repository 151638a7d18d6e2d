// Package ports finds free loopback TCP ports for the test harnesses' servers (etcd, ovsdb-server, ovnkube's metrics
// and pprof, ...).
package ports

import (
	"net"
	"testing"
)

// FreeLoopback returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreeLoopback() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeLoopbackAddr is FreeLoopback as "127.0.0.1:PORT"; t fails when there is none.
func FreeLoopbackAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
