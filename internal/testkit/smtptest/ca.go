package smtptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority made up at run time, with one server
// certificate it issued for 127.0.0.1, ::1 and localhost. No system trusts
// it: a client verifies the server only when given the CA (CertPEM, Pool or
// WriteFile for HERALD_SMTP_CA_FILE), which is what tests of certificate
// verification need.
type CA struct {
	certPEM []byte
	pool    *x509.CertPool
	leaf    tls.Certificate
}

// NewCA makes a CA and its server certificate, both valid for a day from an
// hour ago (clock skew between test hosts is not a concern on loopback).
func NewCA() (*CA, error) {
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "smtptest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caKey, caDER, err := issue(caTmpl, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("CA %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}

	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	key, der, err := issue(tmpl, caCert, caKey)
	if err != nil {
		return nil, fmt.Errorf("server %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &CA{
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pool:    pool,
		leaf:    tls.Certificate{Certificate: [][]byte{der, caDER}, PrivateKey: key},
	}, nil
}

// issue makes a P-256 key and a certificate of tmpl for it, signed with
// parentKey as parent, or self-signed when parent is nil.
func issue(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("key: %w", err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, fmt.Errorf("certificate: %w", err)
	}
	return key, der, nil
}

// StartCA makes a CA for the test, failing it on error.
func StartCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCA()
	if err != nil {
		t.Fatalf("make test CA: %v", err)
	}
	return ca
}

// ServerTLS returns a server configuration that presents the certificate the
// CA issued, for WithStartTLS or WithTLS.
func (ca *CA) ServerTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{ca.leaf}, MinVersion: tls.VersionTLS12}
}

// CertPEM returns the CA certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte { return append([]byte(nil), ca.certPEM...) }

// Pool returns a pool holding the CA certificate alone.
func (ca *CA) Pool() *x509.CertPool { return ca.pool.Clone() }

// WriteFile writes the CA certificate as PEM to a file in the test's
// temporary directory and returns its path (for HERALD_SMTP_CA_FILE).
func (ca *CA) WriteFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "smtptest-ca.pem")
	if err := os.WriteFile(path, ca.certPEM, 0o600); err != nil {
		t.Fatalf("write CA file: %v", err)
	}
	return path
}
