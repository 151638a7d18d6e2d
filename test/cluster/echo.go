package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// ServeEcho runs the external host's echo server on port (TCP and UDP, all addresses of the current network
// namespace): each TCP connection gets one line "tcp-peer=<source IP>\n" and is closed; each UDP datagram is answered
// with "udp-peer=<source IP>\n". It returns when ctx ends or a listener fails.
func ServeEcho(ctx context.Context, port int) error {
	addr := net.JoinHostPort("", strconv.Itoa(port))
	var lc net.ListenConfig
	tl, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	ul, err := lc.ListenPacket(ctx, "udp", addr)
	if err != nil {
		tl.Close()
		return err
	}
	go func() {
		<-ctx.Done()
		tl.Close()
		ul.Close()
	}()
	errc := make(chan error, 2)
	go func() {
		buf := make([]byte, 2048)
		for {
			_, from, err := ul.ReadFrom(buf)
			if err != nil {
				errc <- err
				return
			}
			if ua, ok := from.(*net.UDPAddr); ok {
				if _, err := ul.WriteTo([]byte(fmt.Sprintf("udp-peer=%s\n", ua.IP)), from); err != nil {
					fmt.Fprintf(os.Stderr, "echo: reply to %s: %v\n", from, err) // the peer sees no answer
				}
			}
		}
	}()
	go func() {
		for {
			conn, err := tl.Accept()
			if err != nil {
				errc <- err
				return
			}
			go func() {
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				if ta, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
					if _, err := conn.Write([]byte(fmt.Sprintf("tcp-peer=%s\n", ta.IP))); err != nil {
						fmt.Fprintf(os.Stderr, "echo: reply to %s: %v\n", ta, err) // the peer sees no answer
					}
				}
			}()
		}
	}()
	err = <-errc
	if ctx.Err() != nil && errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
