package smtptest_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/smtptest"
)

const raw = "From: a@example.com\r\n" +
	"To: b@example.org\r\n" +
	"Subject: =?utf-8?q?Gr=C3=BC=C3=9Fe?=\r\n" +
	"Message-ID: <1@example.com>\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"Content-Transfer-Encoding: quoted-printable\r\n" +
	"\r\n" +
	"Gr=C3=BC=C3=9Fe\r\n" +
	".\r\n" +
	"long=\r\n" +
	" line\r\n"

func send(addr string, a sasl.Client, id string) error {
	msg := strings.Replace(raw, "<1@example.com>", id, 1)
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if a != nil {
		if err := c.Auth(a); err != nil {
			return err
		}
	}
	if err := c.SendMail("a@example.com", []string{"b@example.org", "c@example.org"}, strings.NewReader(msg)); err != nil {
		return err
	}
	return c.Quit()
}

func smtpCode(t *testing.T, err error) int {
	t.Helper()
	var serr *smtp.SMTPError
	require.True(t, errors.As(err, &serr), "want an SMTP reply, got %v", err)
	return serr.Code
}

func TestRecordsMessages(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	require.True(t, strings.HasPrefix(srv.URL(), "smtp://127.0.0.1:"))
	require.Equal(t, "smtp://"+srv.Addr(), srv.URL())

	require.NoError(t, send(srv.Addr(), nil, "<1@example.com>"))
	require.NoError(t, send(srv.Addr(), nil, "<1@example.com>"))
	require.NoError(t, send(srv.Addr(), nil, "<2@example.com>"))

	require.Equal(t, 3, srv.Count())
	require.Equal(t, 3, srv.Attempts())
	require.Equal(t, map[string]int{"<1@example.com>": 2, "<2@example.com>": 1}, srv.CountByMessageID())
	m := srv.Messages()[0]
	require.Equal(t, "a@example.com", m.From)
	require.Equal(t, []string{"b@example.org", "c@example.org"}, m.To)
	require.Equal(t, "<1@example.com>", m.MessageID)
	require.Equal(t, "Grüße", m.Subject)
	require.Equal(t, "Grüße\r\n.\r\nlong line\r\n", m.Body)
	require.Equal(t, "a@example.com", m.Header.Get("From"))
	require.Equal(t, raw, string(m.Data))

	// Messages hands out a copy.
	srv.Messages()[0].MessageID = "changed"
	require.Equal(t, "<1@example.com>", srv.Messages()[0].MessageID)
}

func TestFail(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)

	srv.Fail(451, "try later")
	err := send(srv.Addr(), nil, "<1@example.com>")
	require.Error(t, err)
	require.Equal(t, 451, smtpCode(t, err))
	require.Contains(t, err.Error(), "try later")

	srv.Fail(550, "no such user")
	err = send(srv.Addr(), nil, "<1@example.com>")
	require.Equal(t, 550, smtpCode(t, err))

	require.Equal(t, 2, srv.Attempts())
	require.Zero(t, srv.Count())

	srv.Fail(0, "")
	require.NoError(t, send(srv.Addr(), nil, "<1@example.com>"))
	require.Equal(t, 3, srv.Attempts())
	require.Equal(t, 1, srv.Count())
}

func TestAuth(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithAuth("user", "pass"))

	require.NoError(t, send(srv.Addr(), sasl.NewPlainClient("", "user", "pass"), "<1@example.com>"))

	err := send(srv.Addr(), sasl.NewPlainClient("", "user", "wrong"), "<2@example.com>")
	require.Equal(t, 535, smtpCode(t, err))

	err = send(srv.Addr(), nil, "<3@example.com>")
	require.Equal(t, 530, smtpCode(t, err))

	require.Equal(t, map[string]int{"<1@example.com>": 1}, srv.CountByMessageID())
	require.Equal(t, 1, srv.Attempts(), "refused before MAIL, no transaction started")
}

func TestNewAndClose(t *testing.T) {
	t.Parallel()
	srv, err := smtptest.New()
	require.NoError(t, err)
	require.NoError(t, send(srv.Addr(), nil, "<1@example.com>"))
	srv.Close()
	srv.Close() // a second Close does nothing

	_, err = net.Dial("tcp", srv.Addr())
	require.Error(t, err, "the port is closed after Close")
	require.Equal(t, 1, srv.Count(), "what was recorded stays readable")
}

func TestCloseRightAfterNew(t *testing.T) {
	t.Parallel()
	// Close must not wait for a Serve that has not started yet.
	for range 50 {
		srv, err := smtptest.New()
		require.NoError(t, err)
		srv.Close()
	}
}
