package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the control plane's key material, written as PEM files in one directory:
// ca.crt/ca.key, apiserver.crt/.key (serving; SANs = APIServerIP, APIServerIP6, loopback, kubernetes.default.svc names),
// admin.crt/.key (client, O=system:masters), sa.key (service account signing key, also its verification key).
type pki struct{ dir string }

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// generatePKI writes a fresh CA, serving, admin and service-account keys (ECDSA P-256, one year).
func generatePKI(dir string) (pki, error) {
	p := pki{dir: dir}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ovn-egressip-local-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return p, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, err
	}
	if err := writeCertKey(p, "ca", caDER, caKey); err != nil {
		return p, err
	}
	leaf := func(name string, serial int64, subj pkix.Name, usage x509.ExtKeyUsage, ips []net.IP, dns []string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      subj,
			NotBefore:    now,
			NotAfter:     now.Add(365 * 24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
			DNSNames:     dns,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		return writeCertKey(p, name, der, key)
	}
	if err := leaf("apiserver", 2, pkix.Name{CommonName: "kube-apiserver"}, x509.ExtKeyUsageServerAuth,
		[]net.IP{net.ParseIP(APIServerIP), net.ParseIP(APIServerIP6), net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1"), net.ParseIP("fd00:10:96::1")},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"}); err != nil {
		return p, err
	}
	if err := leaf("admin", 3, pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return p, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	return p, writeKey(p.path("sa.key"), saKey)
}

func writeCertKey(p pki, name string, der []byte, key *ecdsa.PrivateKey) error {
	if err := os.WriteFile(p.path(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return writeKey(p.path(name+".key"), key)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// kubeconfig renders an admin kubeconfig for server with the credentials inline (the file can be copied anywhere).
func (p pki) kubeconfig(server string) ([]byte, error) {
	read := func(n string) ([]byte, error) { return os.ReadFile(p.path(n)) }
	ca, err := read("ca.crt")
	if err != nil {
		return nil, err
	}
	crt, err := read("admin.crt")
	if err != nil {
		return nil, err
	}
	key, err := read("admin.key")
	if err != nil {
		return nil, err
	}
	b64 := func(b []byte) string { return base64Std(b) }
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: ovn-egressip
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    client-certificate-data: %s
    client-key-data: %s
contexts:
- name: ovn-egressip
  context: {cluster: ovn-egressip, user: admin}
current-context: ovn-egressip
`, server, b64(ca), b64(crt), b64(key))), nil
}

func base64Std(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
