package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeLoopback(t *testing.T) {
	p, err := FreeLoopback()
	if err != nil || p <= 0 {
		t.Fatalf("FreeLoopback = %d, %v", p, err)
	}
	l, err := net.Listen("tcp", FreeLoopbackAddr(t))
	if err != nil {
		t.Fatalf("FreeLoopbackAddr is not free: %v", err)
	}
	l.Close()
	if _, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err != nil {
		t.Logf("port %d taken since (possible, not an error): %v", p, err)
	}
}
