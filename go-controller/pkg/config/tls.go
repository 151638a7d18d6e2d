package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// NBTLSFor builds the client TLS configuration for the NB addresses addrs from
// the --nb-client-* files (read when called: at start-up). It returns nil when no
// address is ssl:, and an error naming the flag and the file when a file is
// missing, unreadable or not what it should be. Load sets Config.NBTLS with it
// for --nb-address; explain calls it for --zone-nb-address.
func (cfg *Config) NBTLSFor(addrs []string) (*tls.Config, error) {
	var ssl []string
	for _, a := range addrs {
		if strings.HasPrefix(a, "ssl:") {
			ssl = append(ssl, a)
		}
	}
	if len(ssl) == 0 {
		return nil, nil
	}
	var missing []string
	for _, f := range []struct{ flag, value string }{
		{FlagNBClientPrivKey, cfg.NBClientPrivKey}, {FlagNBClientCert, cfg.NBClientCert}, {FlagNBClientCACert, cfg.NBClientCACert},
	} {
		if f.value == "" {
			missing = append(missing, "--"+f.flag)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("NB address %s is ssl: it needs %s (or [ovnnorth] client-privkey, client-cert, client-cacert in --%s)",
			strings.Join(ssl, ","), strings.Join(missing, ", "), FlagConfigFile)
	}
	certPEM, err := readPEM(FlagNBClientCert, cfg.NBClientCert)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readPEM(FlagNBClientPrivKey, cfg.NBClientPrivKey)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("invalid --%s %q / --%s %q: %w", FlagNBClientCert, cfg.NBClientCert, FlagNBClientPrivKey, cfg.NBClientPrivKey, err)
	}
	caPEM, err := readPEM(FlagNBClientCACert, cfg.NBClientCACert)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("invalid --%s %q: no PEM certificate in it", FlagNBClientCACert, cfg.NBClientCACert)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: roots, MinVersion: tls.VersionTLS12}
	if name := cfg.NBCertCommonName; name != "" {
		// Go's own check ignores a certificate's Common Name, which certificates made
		// by ovs-pki rely on (they carry no subjectAltName): verifyNBServer checks the
		// chain as Go does, then the name, against the subjectAltName when there is
		// one, else against the Common Name. InsecureSkipVerify only turns the
		// built-in check off; VerifyConnection runs on every handshake.
		tc.ServerName = name
		tc.InsecureSkipVerify = true //nolint:gosec // verifyNBServer replaces it
		tc.VerifyConnection = func(cs tls.ConnectionState) error { return verifyNBServer(cs, roots, name) }
	}
	// Without a name, crypto/tls verifies the chain and the host of each address
	// against the certificate's subjectAltName.
	return tc, nil
}

func readPEM(flag, path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("invalid --%s %q: %w", flag, path, err)
	}
	return b, nil
}

// verifyNBServer checks the NB server's certificate chain against roots and its
// name against name (--nb-cert-common-name).
func verifyNBServer(cs tls.ConnectionState, roots *x509.CertPool, name string) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("NB server sent no certificate")
	}
	leaf := cs.PeerCertificates[0]
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter}); err != nil {
		return fmt.Errorf("NB server certificate (subject %q) does not chain to --%s: %w", leaf.Subject.CommonName, FlagNBClientCACert, err)
	}
	hasSAN := len(leaf.DNSNames) > 0 || len(leaf.IPAddresses) > 0 || len(leaf.URIs) > 0 || len(leaf.EmailAddresses) > 0
	if hasSAN {
		if err := leaf.VerifyHostname(name); err != nil {
			return fmt.Errorf("NB server certificate is not for %q (--%s): %w", name, FlagNBCertCommonName, err)
		}
		return nil
	}
	if !strings.EqualFold(leaf.Subject.CommonName, name) {
		return fmt.Errorf("NB server certificate has Common Name %q and no subjectAltName, not %q (--%s)", leaf.Subject.CommonName, name, FlagNBCertCommonName)
	}
	return nil
}
