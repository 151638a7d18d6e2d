// Package pki makes certificate authorities and certificates for tests
// (crypto/x509, ECDSA P-256), written as PEM files in a temp dir: what ovs-pki
// makes for OVN, without ovs-pki.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// CA is a certificate authority; CertFile is its certificate's PEM file.
type CA struct {
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	dir      string
}

// Pair is an issued certificate and its private key, as PEM files.
type Pair struct {
	CertFile, KeyFile string
}

// Cert describes a certificate to issue.
type Cert struct {
	// CommonName is the subject's Common Name; DNSNames its subjectAltName (none:
	// no subjectAltName, as ovs-pki's certificates).
	CommonName string
	DNSNames   []string
	// Server: for TLS servers (else clients).
	Server bool
}

// NewCA makes a self-signed CA named name in a temp dir of t.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir()}
	ca.CertFile = ca.write(t, name+"-cacert.pem", "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate signed by ca, and its key.
func (ca *CA) Issue(t testing.TB, c Cert) Pair {
	t.Helper()
	key := newKey(t)
	usage := x509.ExtKeyUsageClientAuth
	if c.Server {
		usage = x509.ExtKeyUsageServerAuth
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: c.CommonName},
		DNSNames:     c.DNSNames,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	name := ca.cert.Subject.CommonName + "-" + c.CommonName
	return Pair{
		CertFile: ca.write(t, name+"-cert.pem", "CERTIFICATE", der),
		KeyFile:  ca.write(t, name+"-privkey.pem", "PRIVATE KEY", keyDER),
	}
}

// write writes a new file named after name (a random part is added: two
// certificates of one name never share a file).
func (ca *CA) write(t testing.TB, name, kind string, der []byte) string {
	t.Helper()
	ext := filepath.Ext(name)
	f, err := os.CreateTemp(ca.dir, strings.TrimSuffix(name, ext)+"-*"+ext)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
