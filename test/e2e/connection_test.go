package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/test/cluster"
	"github.com/ovn-egressip/ovn-egressip/test/waitfor"
)

// linePort is the port of the line echo server on the external host.
const linePort = 9200

// lineServer runs on the external host: it echoes every line of every connection
// back, and records the source address of each connection it accepted and every
// error a connection ended with (a reset from the egress side shows up here).
type lineServer struct {
	ln    net.Listener
	mu    sync.Mutex
	peers []netip.Addr
	errs  []error
	conns []net.Conn // accepted, closed at cleanup: a peer that vanished (reset elsewhere) never sends EOF
	wg    sync.WaitGroup
}

func startLineServer(t *testing.T) *lineServer {
	t.Helper()
	ln, err := cluster.ListenIn(cluster.ExternalNetns, "tcp", ":"+strconv.Itoa(linePort))
	if err != nil {
		t.Fatal(err)
	}
	s := &lineServer{ln: ln}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.peers = append(s.peers, c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err == nil {
						_, err = io.WriteString(c, l)
					}
					if err != nil {
						if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
							s.mu.Lock()
							s.errs = append(s.errs, err)
							s.mu.Unlock()
						}
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// take returns the sources of the connections accepted and the errors recorded
// since the last call, and forgets them.
func (s *lineServer) take() ([]netip.Addr, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	peers, errs := s.peers, s.errs
	s.peers, s.errs = nil, nil
	return peers, errs
}

// heldConn is one TCP connection from a pod to the line server: a writer sends a
// numbered line every interval, a reader checks each echo and records when it
// arrived.
type heldConn struct {
	conn    net.Conn
	stopW   chan struct{} // closed: the writer stops
	mu      sync.Mutex
	sent    int
	echoes  []time.Time
	err     error
	closing bool
	once    sync.Once
	wg      sync.WaitGroup
}

func holdConn(e *env, ns, pod string, fam int, interval time.Duration) *heldConn {
	e.t.Helper()
	conn, err := cluster.DialFrom(cluster.PodNetnsName(ns, pod), "tcp",
		netip.AddrPortFrom(cluster.ExternalHost(fam), linePort).String(), 3*time.Second)
	if err != nil {
		e.t.Fatal(err)
	}
	h := &heldConn{conn: conn, stopW: make(chan struct{})}
	e.t.Cleanup(func() {
		if _, err := h.finish(); err != nil {
			e.t.Logf("held connection: %v", err)
		}
	})
	h.wg.Add(2)
	go func() {
		defer h.wg.Done()
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for n := 0; ; n++ {
			_ = conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := fmt.Fprintf(conn, "line %d\n", n); err != nil {
				h.fail(fmt.Errorf("write line %d: %w", n, err))
				return
			}
			h.mu.Lock()
			h.sent++
			h.mu.Unlock()
			select {
			case <-h.stopW:
				return
			case <-tk.C:
			}
		}
	}()
	go func() {
		defer h.wg.Done()
		r := bufio.NewReader(conn)
		for n := 0; ; n++ {
			_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			l, err := r.ReadString('\n')
			if err != nil {
				h.fail(fmt.Errorf("read echo of line %d: %w", n, err))
				return
			}
			if got := strings.TrimSpace(l); got != "line "+strconv.Itoa(n) {
				h.fail(fmt.Errorf("echo %q, want line %d", got, n))
				return
			}
			h.mu.Lock()
			h.echoes = append(h.echoes, time.Now())
			h.mu.Unlock()
		}
	}()
	return h
}

func (h *heldConn) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil && !h.closing {
		h.err = err
	}
}

// finish stops sending, waits (up to 5 s) for the echoes of every line sent,
// closes the connection and returns the echo arrival times and the first error.
func (h *heldConn) finish() ([]time.Time, error) {
	h.once.Do(func() {
		close(h.stopW)
		deadline := time.Now().Add(5 * time.Second)
		werr := waitfor.Until(context.Background(), 0, 20*time.Millisecond, func() (bool, error) { // until done
			h.mu.Lock()
			defer h.mu.Unlock()
			done := len(h.echoes) >= h.sent || h.err != nil
			if !done && time.Now().After(deadline) {
				h.err = fmt.Errorf("%d lines sent, %d echoed 5s after sending stopped", h.sent, len(h.echoes))
				done = true
			}
			if done {
				h.closing = true
			}
			return done, nil
		})
		h.conn.Close()
		h.wg.Wait()
		if werr != nil { // no timeout and a condition with no error: not expected
			h.mu.Lock()
			h.err = errors.Join(h.err, werr)
			h.mu.Unlock()
		}
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]time.Time(nil), h.echoes...), h.err
}

// echoGap is the longest time, from failAt on, without an echo (from failAt to
// the first echo after it, then between consecutive echoes).
func echoGap(echoes []time.Time, failAt time.Time) time.Duration {
	last, longest := failAt, time.Duration(0)
	for _, at := range echoes {
		if at.Before(failAt) {
			continue
		}
		if d := at.Sub(last); d > longest {
			longest = d
		}
		last = at
	}
	return longest
}
