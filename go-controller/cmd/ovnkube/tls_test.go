package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/config"
	"github.com/ovn-egressip/ovn-egressip/go-controller/pkg/master"
	"github.com/ovn-egressip/ovn-egressip/test/apiserver"
	"github.com/ovn-egressip/ovn-egressip/test/nbserver"
	"github.com/ovn-egressip/ovn-egressip/test/pki"
)

// TestNBOverTLS runs the master, a zone controller and explain against a real ovsdb-server serving
// pssl: with certificates made here: with the right CA, client certificate and
// server name both work; a client certificate of another CA, a CA that did not
// sign the server's certificate and a wrong server name are each refused with an
// error saying so.
func TestNBOverTLS(t *testing.T) {
	ca := pki.NewCA(t, "ovn-ca")
	server := ca.Issue(t, pki.Cert{CommonName: "ovnnb", DNSNames: []string{"ovnnb.test"}, Server: true})
	client := ca.Issue(t, pki.Cert{CommonName: "ovnkube"})
	other := pki.NewCA(t, "other-ca")
	otherClient := other.Issue(t, pki.Cert{CommonName: "ovnkube"})
	nb := nbserver.StartSSL(t, nbserver.SSL{PrivateKey: server.KeyFile, Certificate: server.CertFile, CACert: ca.CertFile})
	env := apiserver.Start(t)
	_, eips := seedNodeAndEgressIP(t, env)
	ctx := context.Background()

	tlsFlags := func(key, cert, cacert, name string) []string {
		out := []string{"--nb-address", nb.SSLAddr, "--nb-client-privkey", key, "--nb-client-cert", cert, "--nb-client-cacert", cacert}
		if name != "" {
			out = append(out, "--nb-cert-common-name", name)
		}
		return out
	}
	good := tlsFlags(client.KeyFile, client.CertFile, ca.CertFile, "ovnnb.test")
	master1 := []string{"ovnkube", "--init-master", "node1", "--enable-egress-ip", "--kubeconfig", env.Kubeconfig,
		"--egressip-reachability-total-timeout", "0", "--leader-elect=false", "--nb-connect-timeout", "3s"}

	// A client certificate the server's CA did not sign: the master does not start (after --nb-connect-timeout).
	start := time.Now()
	err := newApp().RunContext(ctx, config.NormalizeArgs(append(append([]string(nil), master1...), tlsFlags(otherClient.KeyFile, otherClient.CertFile, ca.CertFile, "ovnnb.test")...)))
	t.Logf("master with another CA's client certificate (%s): %v", time.Since(start).Round(time.Millisecond), err)
	if err == nil || !strings.Contains(err.Error(), "--nb-address unreachable") || !strings.Contains(err.Error(), "the server ended the TLS session") {
		t.Errorf("master with a client certificate of another CA: err = %v, want the NB named unreachable because the server ended the TLS session", err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- newApp().RunContext(runCtx, config.NormalizeArgs(append(append([]string(nil), master1...), good...)))
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("master over ssl: %v", err)
		}
	}()
	// The master connects to NB before it starts its informers: an assignment means it reached NB over ssl.
	if err := pollWhileRunning(ctx, t, "ovnkube", done, eip1OnNode1(eips)); err != nil {
		t.Fatalf("the master on %s did not assign eip1: %v", nb.SSLAddr, err)
	}

	// The zone controller (interconnect layout) over ssl: it is ready only after a sync, which follows its NB
	// connection.
	metrics := freeAddr(t)
	zoneCtx, stopZone := context.WithCancel(ctx)
	zoneDone := make(chan error, 1)
	zoneArgs := append([]string{"ovnkube", "--init-ovnkube-controller", "node1", "--enable-egress-ip", "--kubeconfig", env.Kubeconfig,
		"--metrics-bind-address", metrics}, good...)
	go func() { zoneDone <- newApp().RunContext(zoneCtx, config.NormalizeArgs(zoneArgs)) }()
	err = pollWhileRunning(ctx, t, "zone controller", zoneDone, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + metrics + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	stopZone()
	if zerr := <-zoneDone; err != nil || zerr != nil {
		t.Fatalf("zone controller on %s: not ready: %v (exit: %v)", nb.SSLAddr, err, zerr)
	}

	explain := func(flags []string) (*master.EgressIPReport, error) {
		app := newApp()
		var out bytes.Buffer
		app.Writer = &out
		args := append([]string{"ovnkube", "egressip", "explain", "eip1", "-o", "json", "--kubeconfig", env.Kubeconfig, "--timeout", "5s"}, flags...)
		if err := app.RunContext(ctx, normalizeArgs(args)); err != nil {
			return nil, err
		}
		var r master.EgressIPReport
		return &r, json.Unmarshal(out.Bytes(), &r)
	}
	r, err := explain(good)
	if err != nil || r.NB == nil || len(r.IPs) != 1 || r.IPs[0].Holder != "node1" {
		t.Fatalf("explain over ssl: %v %+v", err, r)
	}
	t.Logf("explain over %s: holder %s, NB read", nb.SSLAddr, r.IPs[0].Holder)

	for _, tc := range []struct {
		name  string
		flags []string
		want  string
	}{
		{"client certificate of another CA", tlsFlags(otherClient.KeyFile, otherClient.CertFile, ca.CertFile, "ovnnb.test"), "connect to OVN Northbound"},
		{"CA that did not sign the server's certificate", tlsFlags(client.KeyFile, client.CertFile, other.CertFile, "ovnnb.test"), "does not chain to --nb-client-cacert"},
		{"wrong server name", tlsFlags(client.KeyFile, client.CertFile, ca.CertFile, "ovnsb.test"), `not for "ovnsb.test" (--nb-cert-common-name)`},
		{"no server name: the address' IP is checked", tlsFlags(client.KeyFile, client.CertFile, ca.CertFile, ""), "127.0.0.1"},
		{"no certificates", []string{"--nb-address", nb.SSLAddr}, "it needs --nb-client-privkey, --nb-client-cert, --nb-client-cacert"},
	} {
		_, err := explain(tc.flags)
		t.Logf("%s: %v", tc.name, err)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("explain with %s: err = %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
