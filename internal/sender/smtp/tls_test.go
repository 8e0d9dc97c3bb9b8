package smtp_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

const (
	user = "herald"
	pass = "s3cret-pw"
)

// requireNoCredentials fails when anything that reveals the credentials
// crossed the wire readable: the password, the PLAIN or LOGIN blobs, or an
// AUTH command at all.
func requireNoCredentials(t *testing.T, wire []byte) {
	t.Helper()
	require.NotEmpty(t, wire, "nothing captured")
	b64 := base64.StdEncoding.EncodeToString
	for _, secret := range []string{
		pass,
		b64([]byte(pass)),
		b64([]byte(user)),
		b64([]byte("\x00" + user + "\x00" + pass)),
		"\nAUTH ",
		"MAIL FROM",
		"Subject:",
	} {
		require.False(t, bytes.Contains(wire, []byte(secret)), "%q crossed the wire in clear", secret)
	}
}

// The provider set-up of port 587: STARTTLS required, AUTH after it, a
// certificate from a CA that HERALD_SMTP_CA_FILE trusts. Delivered, and a
// capture of the wire shows the dialogue in clear up to STARTTLS and
// nothing of the credentials or the message.
func TestSendStartTLSAuth(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	caFile := ca.WriteFile(t)
	for _, mechs := range [][]string{{sasl.Plain, sasl.Login}, {sasl.Login}} {
		t.Run(mechs[0], func(t *testing.T) {
			t.Parallel()
			srv := smtptest.Start(t, smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithRequireTLS(),
				smtptest.WithAuth(user, pass), smtptest.WithAuthMechanisms(mechs...), smtptest.WithWireCapture())
			s := newSender(t, smtp.Config{URL: "smtp://" + user + ":" + pass + "@" + srv.Addr(), CAFile: caFile})
			require.NoError(t, s.Send(context.Background(), email("starttls")))
			require.Equal(t, 1, srv.CountByMessageID()["<starttls@example.com>"])
			require.Equal(t, 1, srv.AuthAttempts())

			wire := srv.Wire()
			require.Contains(t, string(wire), "\r\nSTARTTLS\r\n", "the capture saw the clear part")
			requireNoCredentials(t, wire)
		})
	}
}

// Credentials set and the server offers no STARTTLS (though it would take
// AUTH in clear): refused with a clear error, nothing sent.
func TestSendRefusesCredentialsWithoutStartTLS(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithAuth(user, pass), smtptest.WithWireCapture())
	s := newSender(t, smtp.Config{URL: "smtp://" + user + ":" + pass + "@" + srv.Addr()})
	err := s.Send(context.Background(), email("clear"))
	require.Error(t, err)
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.Contains(t, err.Error(), "does not offer STARTTLS")
	require.Contains(t, err.Error(), "credentials")
	require.NotContains(t, err.Error(), pass)
	require.Zero(t, srv.MailCommands(), "the server saw a MAIL")
	require.Zero(t, srv.AuthAttempts(), "the server saw an AUTH")
	require.Zero(t, srv.Count())
	requireNoCredentials(t, srv.Wire())

	// Probe says the same.
	err = s.Probe(context.Background())
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.Contains(t, err.Error(), "STARTTLS")
}

// Certificate verification is always on: a server whose CA is unknown is
// refused; the CA file makes it trusted. Same over implicit TLS.
func TestSendVerifiesCertificates(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	caFile := ca.WriteFile(t)
	for _, tc := range []struct {
		name string
		srv  *smtptest.Server
		url  func(*smtptest.Server) string
	}{
		{"starttls", smtptest.Start(t, smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithAuth(user, pass)),
			func(s *smtptest.Server) string { return "smtp://" + user + ":" + pass + "@" + s.Addr() }},
		{"smtps", smtptest.Start(t, smtptest.WithTLS(ca.ServerTLS()), smtptest.WithAuth(user, pass)),
			func(s *smtptest.Server) string { return "smtps://" + user + ":" + pass + "@" + s.Addr() }},
		{"starttls without credentials", smtptest.Start(t, smtptest.WithStartTLS(ca.ServerTLS())),
			func(s *smtptest.Server) string { return "smtp://" + s.Addr() + "?tls=required" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			untrusted := newSender(t, smtp.Config{URL: tc.url(tc.srv), Timeout: 5 * time.Second})
			err := untrusted.Send(context.Background(), email("untrusted"))
			require.Error(t, err)
			require.True(t, notify.IsSenderDown(err), "error %v", err)
			require.Contains(t, err.Error(), "certificate")
			require.Contains(t, err.Error(), "HERALD_SMTP_CA_FILE")
			require.Zero(t, tc.srv.MailCommands())

			trusted := newSender(t, smtp.Config{URL: tc.url(tc.srv), CAFile: caFile})
			require.NoError(t, trusted.Send(context.Background(), email("trusted")))
			require.Equal(t, 1, tc.srv.CountByMessageID()["<trusted@example.com>"])
			require.Zero(t, tc.srv.CountByMessageID()["<untrusted@example.com>"])
		})
	}
}

// The name verified is the URL's host: a certificate for 127.0.0.1 does not
// do for another name.
func TestSendVerifiesHostName(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	srv := smtptest.Start(t, smtptest.WithTLS(ca.ServerTLS()))
	s := newSender(t, smtp.Config{URL: srv.URL(), CAFile: ca.WriteFile(t)})
	require.NoError(t, s.Send(context.Background(), email("ip")))

	other := newSender(t, smtp.Config{URL: srv.URL(), CAFile: ca.WriteFile(t), TLSConfig: tlsServerName("mail.example.com")})
	err := other.Send(context.Background(), email("other"))
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.Contains(t, err.Error(), "mail.example.com")
	require.Equal(t, 1, srv.Count())
}

// tls= decides STARTTLS on smtp:// without credentials.
func TestSendTLSModes(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	caFile := ca.WriteFile(t)
	withTLS := smtptest.Start(t, smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithWireCapture())
	plain := smtptest.Start(t, smtptest.WithWireCapture())

	send := func(srv *smtptest.Server, query, id string) error {
		s := newSender(t, smtp.Config{URL: "smtp://" + srv.Addr() + query, CAFile: caFile})
		return s.Send(context.Background(), email(id))
	}
	// Default (opportunistic): TLS where offered, clear where not.
	require.NoError(t, send(withTLS, "", "opp-tls"))
	require.NoError(t, send(plain, "", "opp-plain"))
	require.Contains(t, string(withTLS.Wire()), "STARTTLS")
	require.NotContains(t, string(withTLS.Wire()), "opp-tls@example.com")
	require.Contains(t, string(plain.Wire()), "opp-plain@example.com")

	// none: clear even where TLS is offered.
	require.NoError(t, send(withTLS, "?tls=none", "none"))
	require.Contains(t, string(withTLS.Wire()), "none@example.com")

	// required: nothing goes out without TLS.
	err := send(plain, "?tls=required", "required")
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.Contains(t, err.Error(), "does not offer STARTTLS")
	require.Equal(t, 1, plain.MailCommands())
	require.Equal(t, 2, withTLS.Count())
}

// A server that demands STARTTLS (530 to MAIL) of a sender that did not do
// it is down for this configuration, named as such: nothing is
// dead-lettered for it.
func TestSendMustIssueStartTLS(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	srv := smtptest.Start(t, smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithRequireTLS())
	s := newSender(t, smtp.Config{URL: "smtp://" + srv.Addr() + "?tls=none"})
	err := s.Send(context.Background(), email("530"))
	require.Error(t, err)
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.False(t, notify.IsPermanent(err))
	require.Contains(t, err.Error(), "STARTTLS")
	require.Contains(t, err.Error(), "530")
	require.Zero(t, srv.Count())
}
