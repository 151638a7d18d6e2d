package main

import (
	"bytes"
	"context"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/egressip/gwmode"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
)

func TestHelpListsEveryFlag(t *testing.T) {
	app := newApp()
	var out bytes.Buffer
	app.Writer = &out
	if err := app.Run([]string{"ovnkube", "--help"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"--init-master", "--init-node", "--egress-ip-enable", "--gateway-mode", "--gateway-interface",
		"--nb-address", "--kubeconfig", "--cluster-subnets", "--join-subnet", "--egressip-node-healthcheck-port",
		"--egressip-reachability-total-timeout", "--metrics-bind-address", "--loglevel", "--config-file"} {
		if !strings.Contains(out.String(), f+" ") && !strings.Contains(out.String(), f+",") {
			t.Errorf("--help does not list %s", f)
		}
	}
}

func TestBadGatewayModeFailsNamingTheFlag(t *testing.T) {
	err := newApp().Run(config.NormalizeArgs([]string{"ovnkube", "--init-master", "--gateway-mode", "bogus"}))
	if err == nil || !strings.Contains(err.Error(), "--gateway-mode") || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("err = %v, want it to name --gateway-mode and the value", err)
	}
}

// requestLog records the API paths a client asked for.
type requestLog struct {
	mu    sync.Mutex
	paths []string
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.paths = append(l.paths, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

func (l *requestLog) egressIPWatches() (n int, all []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.paths {
		if strings.Contains(p, "/egressips") && strings.Contains(p, "watch=true") {
			n++
		}
	}
	return n, append([]string(nil), l.paths...)
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// runFor runs ovnkube's roles for d against env and returns the requests made.
func runFor(t *testing.T, env *apiserver.Env, cfg *config.Config, d time.Duration) *requestLog {
	t.Helper()
	log := &requestLog{}
	rc := rest.CopyConfig(env.Config)
	rc.Wrap(log.wrap)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := run(ctx, cfg, rc); err != nil && ctx.Err() == nil {
		t.Fatalf("run: %v", err)
	}
	return log
}

func TestEgressIPDisabledStartsNoEgressIPWatch(t *testing.T) {
	env := apiserver.Start(t)
	nb := nbserver.Start(t)
	base := config.Config{
		InitMaster: true, GatewayMode: gwmode.Shared, NBAddresses: []string{nb.Addr},
		HealthCheckPort: 9107, ReachabilityInterval: 100 * time.Millisecond, NBConnectTimeout: 5 * time.Second,
	}
	base.ClusterSubnets = mustPrefixes(t, "10.244.0.0/16")
	base.JoinSubnets = mustPrefixes(t, "100.64.0.0/16")

	off := base
	off.InitNode = "node1" // the node role too: with the feature off it must not touch the host or the API
	log := runFor(t, env, &off, 2*time.Second)
	if n, all := log.egressIPWatches(); n != 0 || len(all) != 0 {
		t.Fatalf("with --egress-ip-enable off, ovnkube made %d EgressIP watches and these requests: %v", n, all)
	}

	on := base
	on.EgressIPEnable = true
	log = runFor(t, env, &on, 4*time.Second)
	if n, all := log.egressIPWatches(); n == 0 {
		t.Fatalf("with --egress-ip-enable on, the master should watch EgressIPs; requests: %v", all)
	}
}

func mustPrefixes(t *testing.T, s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, v := range s {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func TestNormalizeExplainArgs(t *testing.T) {
	got := normalizeArgs([]string{"ovnkube", "egressip", "explain", "prod", "-o", "json", "--probe", "--kubeconfig=/k", "--pod", "ns/p"})
	want := []string{"ovnkube", "egressip", "explain", "-o", "json", "--probe", "--kubeconfig=/k", "--pod", "ns/p", "prod"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("normalizeArgs = %v, want %v", got, want)
	}
}
