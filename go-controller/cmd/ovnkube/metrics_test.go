package main

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
)

// nonLoopbackIPv4 is an address of this machine other than loopback ("" if none).
func nonLoopbackIPv4(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() && !p.Addr().IsLoopback() {
			return p.Addr().String()
		}
	}
	return ""
}

// TestPprofServedOnItsOwnLoopbackAddress: with --enable-pprof the profiles are
// served on --pprof-bind-address only, never on the metrics address (which the
// manifests open on every address of the host), and that address takes no
// connection on another address of the host.
func TestPprofServedOnItsOwnLoopbackAddress(t *testing.T) {
	get := func(url string) (int, error) {
		resp, err := (&http.Client{Timeout: 2 * time.Second}).Get(url)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	_, metricsPort, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	pprofAddr := freeAddr(t)
	for _, enable := range []bool{false, true} {
		cfg := &config.Config{InitNode: "node1", MetricsBindAddress: "0.0.0.0:" + metricsPort, EnablePprof: enable, PprofBindAddress: pprofAddr}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		// The node role with the feature off touches neither the API nor the host.
		go func() { done <- run(ctx, cfg, &rest.Config{Host: "http://127.0.0.1:1"}) }()
		metrics := "http://127.0.0.1:" + metricsPort
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			code, err := get(metrics + "/healthz")
			return err == nil && code == http.StatusOK, nil
		}); err != nil {
			t.Fatalf("enable-pprof=%v: metrics not served: %v", enable, err)
		}
		for _, path := range []string{"/debug/pprof/heap", "/debug/pprof/goroutine"} {
			if code, err := get(metrics + path); err != nil || code != http.StatusNotFound {
				t.Errorf("enable-pprof=%v: metrics address GET %s: %d %v, want 404", enable, path, code, err)
			}
			code, err := get("http://" + pprofAddr + path)
			switch {
			case enable && (err != nil || code != http.StatusOK):
				t.Errorf("pprof address GET %s: %d %v, want 200", path, code, err)
			case !enable && err == nil:
				t.Errorf("without --enable-pprof, %s answers GET %s: %d", pprofAddr, path, code)
			}
		}
		if ip := nonLoopbackIPv4(t); enable && ip != "" {
			_, port, err := net.SplitHostPort(pprofAddr)
			if err != nil {
				t.Fatal(err)
			}
			if c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, port), time.Second); err == nil {
				c.Close()
				t.Errorf("the profiles' port takes connections on %s", ip)
			} else {
				t.Logf("dial %s:%s: %v (refused, as it should be)", ip, port, err)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
	}
}
