package config

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovn-egressip/ovn-egressip/test/pki"
)

// TestNBTLSBadInput: every missing, unreadable or wrong certificate file is one
// error line naming the flag and the file; an ssl: address without them names
// what is missing.
func TestNBTLSBadInput(t *testing.T) {
	kc := kubeconfig(t)
	ca := pki.NewCA(t, "ovn-ca")
	client := ca.Issue(t, pki.Cert{CommonName: "ovnkube"})
	other := ca.Issue(t, pki.Cert{CommonName: "other"})
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	unreadable := filepath.Join(t.TempDir(), "dir.pem")
	if err := os.Mkdir(unreadable, 0o700); err != nil {
		t.Fatal(err)
	}
	base := []string{"--init-master", "--egress-ip-enable", "--kubeconfig", kc, "--nb-address", "ssl:10.0.0.1:6641"}
	files := func(key, cert, cacert string) []string {
		return []string{"--nb-client-privkey", key, "--nb-client-cert", cert, "--nb-client-cacert", cacert}
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no certificates", nil, "NB address ssl:10.0.0.1:6641 is ssl: it needs --nb-client-privkey, --nb-client-cert, --nb-client-cacert"},
		{"no CA", []string{"--nb-client-privkey", client.KeyFile, "--nb-client-cert", client.CertFile}, "it needs --nb-client-cacert"},
		{"missing key file", files("/nonexistent/key.pem", client.CertFile, ca.CertFile), `invalid --nb-client-privkey "/nonexistent/key.pem": open /nonexistent/key.pem: no such file or directory`},
		{"missing cert file", files(client.KeyFile, "/nonexistent/cert.pem", ca.CertFile), `invalid --nb-client-cert "/nonexistent/cert.pem"`},
		{"missing CA file", files(client.KeyFile, client.CertFile, "/nonexistent/ca.pem"), `invalid --nb-client-cacert "/nonexistent/ca.pem"`},
		{"unreadable CA file", files(client.KeyFile, client.CertFile, unreadable), `invalid --nb-client-cacert "` + unreadable + `"`},
		{"CA file without a certificate", files(client.KeyFile, client.CertFile, garbage), `invalid --nb-client-cacert "` + garbage + `": no PEM certificate in it`},
		{"key of another certificate", files(other.KeyFile, client.CertFile, ca.CertFile), `invalid --nb-client-cert "` + client.CertFile + `" / --nb-client-privkey "` + other.KeyFile + `"`},
		{"cert file not PEM", files(client.KeyFile, garbage, ca.CertFile), `invalid --nb-client-cert "` + garbage + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantLoadError(t, append(append([]string{}, base...), tc.args...), tc.want)
		})
	}
	cfg, err := load(t, append(append([]string{}, base...), files(client.KeyFile, client.CertFile, ca.CertFile)...)...)
	if err != nil || cfg.NBTLS == nil || len(cfg.NBTLS.Certificates) != 1 {
		t.Fatalf("good files: %v %+v", err, cfg)
	}
	cfg, err = load(t, "--init-master", "--egress-ip-enable", "--kubeconfig", kc, "--nb-address", "tcp:10.0.0.1:6641")
	if err != nil || cfg.NBTLS != nil {
		t.Fatalf("tcp: address: %v, NBTLS %v; want no TLS", err, cfg.NBTLS)
	}
}

// TestNBTLSFromConfigFile: the [ovnnorth] keys of upstream OVN-Kubernetes' file are read; flags win.
func TestNBTLSFromConfigFile(t *testing.T) {
	kc := kubeconfig(t)
	ca := pki.NewCA(t, "ovn-ca")
	client := ca.Issue(t, pki.Cert{CommonName: "ovnkube"})
	ini := filepath.Join(t.TempDir(), "ovnkube.conf")
	content := "[ovnnorth]\naddress = ssl:10.0.0.1:6641\nclient-privkey = " + client.KeyFile + "\nclient-cert = " + client.CertFile +
		"\nclient-cacert = " + ca.CertFile + "\ncert-common-name = ovnnb\n"
	if err := os.WriteFile(ini, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := load(t, "--config-file", ini, "--init-master", "--egress-ip-enable", "--kubeconfig", kc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NBClientPrivKey != client.KeyFile || cfg.NBClientCert != client.CertFile || cfg.NBClientCACert != ca.CertFile ||
		cfg.NBCertCommonName != "ovnnb" || cfg.NBTLS == nil || cfg.NBTLS.ServerName != "ovnnb" {
		t.Fatalf("unexpected config: %+v", cfg)
	}
	cfg, err = load(t, "--config-file", ini, "--init-master", "--egress-ip-enable", "--kubeconfig", kc, "--nb-cert-common-name", "nb.example")
	if err != nil || cfg.NBTLS.ServerName != "nb.example" {
		t.Fatalf("the flag must win over the file: %v %+v", err, cfg)
	}
}

// TestNBServerNameChecks: with --nb-cert-common-name, a certificate with a
// subjectAltName is checked against it, one without (as ovs-pki makes them)
// against its Common Name; a certificate of another CA is refused either way.
func TestNBServerNameChecks(t *testing.T) {
	ca := pki.NewCA(t, "ovn-ca")
	other := pki.NewCA(t, "other-ca")
	client := ca.Issue(t, pki.Cert{CommonName: "ovnkube"})
	for _, tc := range []struct {
		name   string
		server pki.Pair
		want   string // "" = accepted
	}{
		{"subjectAltName matches", ca.Issue(t, pki.Cert{CommonName: "x", DNSNames: []string{"ovnnb"}, Server: true}), ""},
		{"subjectAltName does not match (its Common Name does)", ca.Issue(t, pki.Cert{CommonName: "ovnnb", DNSNames: []string{"other"}, Server: true}), `is not for "ovnnb"`},
		{"Common Name only, matches", ca.Issue(t, pki.Cert{CommonName: "ovnnb", Server: true}), ""},
		{"Common Name only, does not match", ca.Issue(t, pki.Cert{CommonName: "ovnsb", Server: true}), `has Common Name "ovnsb" and no subjectAltName, not "ovnnb"`},
		{"another CA", other.Issue(t, pki.Cert{CommonName: "ovnnb", Server: true}), "does not chain to --nb-client-cacert"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := tls.LoadX509KeyPair(tc.server.CertFile, tc.server.KeyFile)
			if err != nil {
				t.Fatal(err)
			}
			lis, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
			if err != nil {
				t.Fatal(err)
			}
			defer lis.Close()
			// The server side of the one connection: the client's error is what the case checks.
			srvErr := make(chan error, 1)
			go func() {
				c, err := lis.Accept()
				if err != nil {
					srvErr <- err
					return
				}
				err = c.(*tls.Conn).Handshake()
				c.Close()
				srvErr <- err
			}()
			cfg := &Config{NBClientPrivKey: client.KeyFile, NBClientCert: client.CertFile, NBClientCACert: ca.CertFile, NBCertCommonName: "ovnnb"}
			tc2, err := cfg.NBTLSFor([]string{"ssl:" + lis.Addr().String()})
			if err != nil {
				t.Fatal(err)
			}
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", lis.Addr().String(), tc2)
			if err == nil {
				c.Close()
			}
			if serr := <-srvErr; serr != nil {
				t.Logf("server side of the handshake: %v", serr)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestPprofDefaultsToLoopback: --enable-pprof alone serves on loopback only.
func TestPprofDefaultsToLoopback(t *testing.T) {
	kc := kubeconfig(t)
	cfg, err := load(t, "--init-node", "n1", "--kubeconfig", kc, "--enable-pprof")
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(cfg.PprofBindAddress)
	if err != nil || !cfg.EnablePprof || host != "127.0.0.1" {
		t.Fatalf("--enable-pprof: address %q (%v), want 127.0.0.1:PORT", cfg.PprofBindAddress, err)
	}
	if _, err := load(t, "--init-node", "n1", "--kubeconfig", kc, "--enable-pprof", "--pprof-bind-address", "6060"); err == nil ||
		!strings.Contains(err.Error(), `invalid --pprof-bind-address "6060"`) {
		t.Fatalf("want an error naming --pprof-bind-address, got %v", err)
	}
}
