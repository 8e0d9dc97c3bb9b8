package mail_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// The email channel's sender makes the email of a notify.Outgoing as the
// worker always did (From the configured address, Message-ID
// <ID@DOMAIN-of-From>, the same on every attempt) and hands it to a real
// SMTP sender; the SMTP sender's classification comes through unchanged.
func TestSenderSendsTheEmailOfAnOutgoing(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	next, err := smtp.New(smtp.Config{URL: srv.URL(), Timeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = next.Close() })
	s, err := mail.NewSender("Herald <herald@mail.example.com>", next)
	require.NoError(t, err)
	require.NoError(t, s.Probe(context.Background()), "the SMTP sender's probe")

	out := notify.Outgoing{NotificationID: "42", UserID: "u", Channel: "email", To: "Ada <ada@example.com>", Subject: "Shipped", Body: "On its way."}
	require.NoError(t, s.Send(context.Background(), out))
	require.NoError(t, s.Send(context.Background(), out), "a second attempt")
	msgs := srv.Messages()
	require.Len(t, msgs, 2)
	for _, m := range msgs {
		require.Equal(t, "<42@mail.example.com>", m.MessageID, "the same Message-ID on every attempt")
		require.Equal(t, []string{"ada@example.com"}, m.To)
		require.Equal(t, "Shipped", m.Subject)
		require.Equal(t, "Herald <herald@mail.example.com>", m.Header.Get("From"))
	}

	srv.Fail(550, "5.1.1 no such user")
	err = s.Send(context.Background(), out)
	require.True(t, notify.IsPermanent(err), "%v", err)

	// What the email channel would not accept is refused before any
	// connection, as permanent.
	before := srv.Attempts()
	for _, bad := range []notify.Outgoing{
		{NotificationID: "43", Channel: "email", To: "https://example.com/hook", Subject: "s", Body: "b"},
		{NotificationID: "44", Channel: "email", To: "a@example.com", Body: "no subject"},
	} {
		err := s.Send(context.Background(), bad)
		require.True(t, notify.IsPermanent(err), "%v", err)
	}
	require.Equal(t, before, srv.Attempts())

	_, err = mail.NewSender("not an address", next)
	require.Error(t, err)
}

// A sender without a probe (an mbox file) is taken as up.
func TestSenderProbeWithoutOne(t *testing.T) {
	t.Parallel()
	s, err := mail.NewSender("herald@example.com", emailFunc(func(context.Context, mail.Email) error { return errors.New("x") }))
	require.NoError(t, err)
	require.NoError(t, s.Probe(context.Background()))
}

type emailFunc func(context.Context, mail.Email) error

func (f emailFunc) Send(ctx context.Context, e mail.Email) error { return f(ctx, e) }
