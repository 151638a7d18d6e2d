package cluster

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"testing"
	"time"
)

func TestEchoServerReportsTheSourceAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeEcho(ctx, port) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for _, proto := range []string{"tcp", "udp"} {
		var line string
		err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
			c, err := net.DialTimeout(proto, addr, time.Second)
			if err != nil {
				return false, nil
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
			if proto == "udp" {
				if _, err := c.Write([]byte("?\n")); err != nil {
					return false, nil // not yet: the next try dials again
				}
			}
			line, err = bufio.NewReader(c).ReadString('\n')
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("%s: no answer: %v", proto, err)
		}
		if want := proto + "-peer=127.0.0.1\n"; line != want {
			t.Errorf("%s reply = %q, want %q", proto, line, want)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeEcho returned %v after cancel", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeEcho did not return after cancel")
	}
}
