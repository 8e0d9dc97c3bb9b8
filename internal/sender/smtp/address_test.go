package smtp_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// sendTo sends one email to to through the email channel's sender over an
// SMTP sender to srv.
func sendTo(t *testing.T, srv *smtptest.Server, to string) error {
	t.Helper()
	ms, err := mail.NewSender("Herald <herald@example.com>", newSender(t, smtp.Config{URL: srv.URL()}))
	require.NoError(t, err)
	return ms.Send(context.Background(), notify.Outgoing{NotificationID: "7", UserID: "u1", Channel: notify.ChannelEmail,
		To: to, Subject: "Hello", Body: "Hi."})
}

// A Unicode domain goes out in its IDNA form, envelope and header, to any
// server: no SMTPUTF8 needed.
func TestIDNADomainConverted(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	require.NoError(t, sendTo(t, srv, "Ann <ann@bücher.de>"))
	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, []string{"ann@xn--bcher-kva.de"}, msgs[0].To)
	require.Equal(t, `"Ann" <ann@xn--bcher-kva.de>`, msgs[0].Header.Get("To"))
	require.False(t, msgs[0].UTF8, "an ASCII envelope needs no SMTPUTF8")

	// An ASCII address is sent exactly as given.
	require.NoError(t, sendTo(t, srv, "Ann <Ann@Example.ORG>"))
	msgs = srv.Messages()
	require.Equal(t, []string{"Ann@Example.ORG"}, msgs[1].To)
	require.Equal(t, "Ann <Ann@Example.ORG>", msgs[1].Header.Get("To"))
}

// A non-ASCII local part needs SMTPUTF8: a server without it gets no MAIL
// FROM, and the message fails for good with that reason.
func TestNonASCIILocalPartWithoutSMTPUTF8IsPermanent(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	err := sendTo(t, srv, "jörg@bücher.de")
	require.Error(t, err)
	require.True(t, notify.IsPermanent(err), "permanent: %v", err)
	require.ErrorContains(t, err, "jörg@xn--bcher-kva.de has a non-ASCII local part and the server does not offer SMTPUTF8")
	require.Zero(t, srv.MailCommands(), "nothing was handed over")
	require.Empty(t, srv.Messages())

	// The session is still good: the next message goes through it.
	require.NoError(t, sendTo(t, srv, "ann@example.org"))
	require.Len(t, srv.Messages(), 1)
}

// A server that offers SMTPUTF8 gets the address with MAIL FROM ...
// SMTPUTF8, its domain in IDNA form and its local part as it is.
func TestNonASCIILocalPartWithSMTPUTF8(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithSMTPUTF8())
	require.NoError(t, sendTo(t, srv, "Jörg <jörg@bücher.de>"))
	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, []string{"jörg@xn--bcher-kva.de"}, msgs[0].To)
	require.True(t, msgs[0].UTF8, "MAIL FROM carried SMTPUTF8")
	require.Contains(t, msgs[0].Header.Get("To"), "<jörg@xn--bcher-kva.de>")

	// An ASCII address to the same server goes without the parameter.
	require.NoError(t, sendTo(t, srv, "ann@example.org"))
	require.False(t, srv.Messages()[1].UTF8)
}
