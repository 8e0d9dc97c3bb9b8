package smtp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/smtptest"
)

// selfSigned returns a server certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "smtptest"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

func TestSendImplicitTLS(t *testing.T) {
	t.Parallel()
	cert, pool := selfSigned(t)
	srv := smtptest.Start(t,
		smtptest.WithTLS(&tls.Config{Certificates: []tls.Certificate{cert}}),
		smtptest.WithAuth("herald", "pw"))
	require.Equal(t, "smtps://"+srv.Addr(), srv.URL())

	t.Run("trusted", func(t *testing.T) {
		s := newSender(t, smtp.Config{URL: "smtps://herald:pw@" + srv.Addr(), TLSConfig: &tls.Config{RootCAs: pool}})
		require.NoError(t, s.Send(context.Background(), email("tls")))
		require.Equal(t, 1, srv.CountByMessageID()["<tls@example.com>"])
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		// Without the pool the system roots do not know the certificate:
		// no credentials may go out.
		s := newSender(t, smtp.Config{URL: "smtps://herald:pw@" + srv.Addr(), Timeout: 5 * time.Second})
		err := s.Send(context.Background(), email("untrusted"))
		require.Error(t, err)
		require.False(t, notify.IsPermanent(err))
		require.Zero(t, srv.CountByMessageID()["<untrusted@example.com>"])
	})
}
