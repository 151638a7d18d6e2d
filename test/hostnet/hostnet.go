// Package hostnet builds throwaway network namespaces for root-only tests: named
// namespaces with a unique prefix (deleted at cleanup), veth pairs between them,
// running Go code inside one (Do), running commands inside one (Exec), and a TCP
// echo server that answers with the source address it saw.
package hostnet

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// RequireRoot skips the test unless it runs as root with the ip command available.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipped: needs root (creates network namespaces, veths, addresses and iptables rules); CI runs it as root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipped: the ip command (iproute2) is not installed")
	}
}

var counter atomic.Int64

// NS is a named network namespace that lives for one test.
type NS struct {
	Name   string
	handle netns.NsHandle
}

// NewNS creates the namespace <prefix>-<name>, where prefix is unique to this
// process and call, brings its loopback up, and deletes it at cleanup.
func NewNS(t testing.TB, name string) *NS {
	t.Helper()
	full := fmt.Sprintf("eipt%d-%d-%s", os.Getpid(), counter.Add(1), name)
	if out, err := exec.Command("ip", "netns", "add", full).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", full, err, out)
	}
	h, err := netns.GetFromName(full)
	if err != nil {
		derr := exec.Command("ip", "netns", "del", full).Run()
		t.Fatalf("open netns %s: %v", full, errors.Join(err, derr))
	}
	ns := &NS{Name: full, handle: h}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("close netns %s: %v", full, err)
		}
		if out, err := exec.Command("ip", "netns", "del", full).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", full, err, out)
		}
	})
	ns.Exec(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Do runs fn on an OS thread locked into the namespace, then restores the
// thread. Sockets opened and processes started by fn belong to the namespace;
// goroutines started by fn do not.
func (n *NS) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("get current netns: %w", err)
	}
	defer orig.Close()
	if err := netns.Set(n.handle); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter netns %s: %w", n.Name, err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Leave the thread locked: it dies with the goroutine instead of being reused.
		//nolint:errorlint // ferr is fn's result, often nil, printed for the record: the cause is the failed restore
		return fmt.Errorf("restore netns after %s: %w (fn: %v)", n.Name, err, ferr)
	}
	runtime.UnlockOSThread()
	return ferr
}

// TryExec runs a command inside the namespace and returns its combined output.
func (n *NS) TryExec(args ...string) (string, error) {
	full := append([]string{"netns", "exec", n.Name}, args...)
	out, err := exec.Command("ip", full...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s (in %s): %w: %s", strings.Join(args, " "), n.Name, err, out)
	}
	return string(out), nil
}

// Exec is TryExec that fails the test on error.
func (n *NS) Exec(t testing.TB, args ...string) string {
	t.Helper()
	out, err := n.TryExec(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Veth connects namespace a (interface aIf) and b (interface bIf) with a veth
// pair, both ends up, and TX checksum offload off on both ends.
func Veth(t testing.TB, a *NS, aIf string, b *NS, bIf string) {
	t.Helper()
	if out, err := exec.Command("ip", "-n", a.Name, "link", "add", aIf, "type", "veth",
		"peer", "name", bIf, "netns", b.Name).CombinedOutput(); err != nil {
		t.Fatalf("veth %s/%s - %s/%s: %v: %s", a.Name, aIf, b.Name, bIf, err, out)
	}
	for _, e := range []struct {
		ns *NS
		If string
	}{{a, aIf}, {b, bIf}} {
		e.ns.Exec(t, "ip", "link", "set", e.If, "up")
		if _, err := exec.LookPath("ethtool"); err == nil {
			if _, err := e.ns.TryExec("ethtool", "-K", e.If, "tx", "off"); err != nil {
				t.Logf("checksum offload stays on: %v", err)
			}
		}
	}
}

// EchoServer listens on TCP [::]:port (IPv4 and IPv6) inside ns; each connection
// gets one line, the source IP it came from, and is closed. Stopped at cleanup.
func EchoServer(t testing.TB, ns *NS, port int) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf("[::]:%d", port))
		return err
	}); err != nil {
		t.Fatalf("echo server in %s: %v", ns.Name, err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = fmt.Fprintf(c, "%s\n", c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap())
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
}

// SourceSeen connects from ns, bound to source src, to the echo server at dst
// and returns the source address the server saw.
func SourceSeen(ns *NS, src netip.Addr, dst netip.AddrPort, timeout time.Duration) (netip.Addr, error) {
	var line string
	err := ns.Do(func() error {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: timeout}
		c, err := d.Dial("tcp", dst.String())
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(timeout))
		line, err = bufio.NewReader(c).ReadString('\n')
		return err
	})
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s -> %s: %w", src, dst, err)
	}
	return netip.ParseAddr(strings.TrimSpace(line))
}
