package smtptest_test

import (
	"crypto/tls"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
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

func TestWithAddrComesBackOnTheSamePort(t *testing.T) {
	t.Parallel()
	first, err := smtptest.New()
	require.NoError(t, err)
	addr := first.Addr()
	first.Close()
	_, err = net.Dial("tcp", addr)
	require.Error(t, err, "nothing listens while the server is down")

	second := smtptest.Start(t, smtptest.WithAddr(addr))
	require.Equal(t, addr, second.Addr())
	require.NoError(t, send(addr, nil, "<2@example.com>"))
	require.Equal(t, 1, second.Count())
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

// dialStartTLS opens a session that did STARTTLS, trusting ca.
func dialStartTLS(t *testing.T, addr string, ca *smtptest.CA) *smtp.Client {
	t.Helper()
	c, err := smtp.DialStartTLS(addr, &tls.Config{RootCAs: ca.Pool()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestStartTLSRequired(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	srv := smtptest.Start(t, smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithRequireTLS(),
		smtptest.WithAuth("user", "pass"))
	require.Equal(t, "smtp://"+srv.Addr(), srv.URL())

	// In clear: STARTTLS is offered, AUTH is not, MAIL is refused.
	c, err := smtp.Dial(srv.Addr())
	require.NoError(t, err)
	ok, _ := c.Extension("STARTTLS")
	require.True(t, ok)
	ok, _ = c.Extension("AUTH")
	require.False(t, ok, "AUTH offered in clear")
	err = c.Mail("a@example.com", nil)
	require.Equal(t, 530, smtpCode(t, err))
	require.Contains(t, err.Error(), "STARTTLS")
	_ = c.Close()

	// Over TLS, with the CA trusted: AUTH (PLAIN and LOGIN) and delivery.
	for _, a := range []sasl.Client{sasl.NewPlainClient("", "user", "pass"), sasl.NewLoginClient("user", "pass")} {
		c := dialStartTLS(t, srv.Addr(), ca)
		_, isTLS := c.TLSConnectionState()
		require.True(t, isTLS)
		require.NoError(t, c.Auth(a))
		require.NoError(t, c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(raw)))
		require.NoError(t, c.Quit())
	}
	require.Equal(t, 2, srv.Count())
	require.Equal(t, 3, srv.MailCommands())
	require.Equal(t, 2, srv.Attempts())

	// Without the CA the certificate does not verify (at the handshake,
	// which go-smtp does at the first command after STARTTLS).
	c, err = smtp.DialStartTLS(srv.Addr(), &tls.Config{})
	if err == nil {
		err = c.Noop()
		_ = c.Close()
	}
	require.ErrorContains(t, err, "certificate")
}

func TestImplicitTLSWithCA(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	srv := smtptest.Start(t, smtptest.WithTLS(ca.ServerTLS()))
	require.Equal(t, "smtps://"+srv.Addr(), srv.URL())
	c, err := smtp.DialTLS(srv.Addr(), &tls.Config{RootCAs: ca.Pool()})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(raw)))
	require.Equal(t, 1, srv.Count())

	path := ca.WriteFile(t)
	pemBytes, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, ca.CertPEM(), pemBytes)
}

func TestAuthLoginWithoutInitialResponse(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithAuth("user", "pass"), smtptest.WithAuthMechanisms(sasl.Login))
	c, err := smtp.Dial(srv.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.True(t, c.SupportsAuth(sasl.Login))
	require.False(t, c.SupportsAuth(sasl.Plain))
	require.NoError(t, c.Auth(&loginNoIR{user: "user", pass: "pass"}))
	require.NoError(t, c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(raw)))
	require.Equal(t, 1, srv.Count())
	require.Equal(t, 1, srv.AuthAttempts())
}

// loginNoIR is a LOGIN client that waits for both challenges.
type loginNoIR struct{ user, pass string }

func (l *loginNoIR) Start() (string, []byte, error) { return sasl.Login, nil, nil }
func (l *loginNoIR) Next(ch []byte) ([]byte, error) {
	switch string(ch) {
	case "Username:":
		return []byte(l.user), nil
	case "Password:":
		return []byte(l.pass), nil
	}
	return nil, errors.New("unexpected challenge " + string(ch))
}

// The wire capture sees what a careless client sends in clear: the control
// that makes "absent from the capture" mean something.
func TestWireCaptureSeesClearText(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithAuth("user", "s3cret"), smtptest.WithWireCapture())
	require.NoError(t, send(srv.Addr(), sasl.NewPlainClient("", "user", "s3cret"), "<1@example.com>"))
	wire := string(srv.Wire())
	require.Contains(t, wire, "\r\nAUTH PLAIN "+base64.StdEncoding.EncodeToString([]byte("\x00user\x00s3cret")))
	require.Contains(t, wire, "MAIL FROM:<a@example.com>")
	require.Contains(t, wire, "220 localhost ESMTP")

	require.Nil(t, smtptest.Start(t).Wire(), "no capture unless asked")
}

func TestFailAt(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithAuth("user", "pass"))
	auth := sasl.NewPlainClient("", "user", "pass")
	for _, tc := range []struct {
		step smtptest.Step
		code int
	}{
		{smtptest.StepGreeting, 421},
		{smtptest.StepHello, 421},
		{smtptest.StepAuth, 535},
		{smtptest.StepMail, 550},
		{smtptest.StepRcpt, 451},
		{smtptest.StepData, 554},
	} {
		srv.FailAt(tc.step, tc.code, "scripted")
		err := send(srv.Addr(), auth, "<1@example.com>")
		require.Equal(t, tc.code, smtpCode(t, err), "step %d", tc.step)
		srv.FailAt(tc.step, 0, "")
	}
	require.Zero(t, srv.Count())
	require.NoError(t, send(srv.Addr(), auth, "<1@example.com>"))
	require.Equal(t, 1, srv.Count())
}

func TestGreylist(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	srv.Greylist(2)
	sendTo := func(rcpt string) error {
		c, err := smtp.Dial(srv.Addr())
		require.NoError(t, err)
		defer c.Close()
		return c.SendMail("a@example.com", []string{rcpt}, strings.NewReader(raw))
	}
	for range 2 {
		require.Equal(t, 451, smtpCode(t, sendTo("b@example.org")))
	}
	require.NoError(t, sendTo("b@example.org"))
	// Counted per recipient.
	require.Equal(t, 451, smtpCode(t, sendTo("c@example.org")))
	require.Equal(t, 1, srv.Count())

	srv.Greylist(0)
	require.NoError(t, sendTo("c@example.org"))
	require.Equal(t, 2, srv.Count())
}

func TestDataLatency(t *testing.T) {
	t.Parallel()
	const d = 300 * time.Millisecond
	srv := smtptest.Start(t, smtptest.WithDataLatency(d))
	start := time.Now()
	require.NoError(t, send(srv.Addr(), nil, "<1@example.com>"))
	require.GreaterOrEqual(t, time.Since(start), d)

	srv.SetDataLatency(0)
	require.NoError(t, send(srv.Addr(), nil, "<2@example.com>"))
	require.Equal(t, 2, srv.Count())
}

func TestHang(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	srv.SetHang(true)
	conn, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	defer conn.Close()
	// No greeting while hung.
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	buf := make([]byte, 64)
	_, err = conn.Read(buf)
	var nerr net.Error
	require.True(t, errors.As(err, &nerr) && nerr.Timeout(), "want a read timeout, got %v", err)

	// Released, the held connection is greeted.
	srv.SetHang(false)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	n, err := conn.Read(buf)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(buf[:n]), "220 "), "%q", buf[:n])
	require.Equal(t, 1, srv.Connections())
}

func TestHangHoldsTransaction(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	c, err := smtp.Dial(srv.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Hello("localhost"))
	srv.SetHang(true)
	errc := make(chan error, 1)
	go func() { errc <- c.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(raw)) }()
	select {
	case err := <-errc:
		t.Fatalf("a hung server answered: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	srv.SetHang(false)
	require.NoError(t, <-errc)
	require.Equal(t, 1, srv.Count())
}

func TestPeakAndDrop(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	var conns []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", srv.Addr())
		require.NoError(t, err)
		conns = append(conns, c)
	}
	// Each is counted once the server accepted it.
	require.Eventually(t, func() bool { return srv.Connections() == 3 }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, 3, srv.PeakConnections())
	srv.DropConnections()
	for _, c := range conns {
		require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err := io.ReadAll(c)
		require.NoError(t, err, "closed by the server: EOF")
		_ = c.Close()
	}
}

func TestDropAfterData(t *testing.T) {
	srv := smtptest.Start(t)
	srv.DropAfterData(func(rcpt string) bool { return rcpt == "bad@example.com" })
	c, err := smtp.Dial(srv.Addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Hello("localhost"))
	require.NoError(t, c.Mail("a@example.com", nil))
	require.NoError(t, c.Rcpt("bad@example.com", nil))
	w, err := c.Data()
	require.NoError(t, err)
	_, err = w.Write([]byte("Subject: x\r\n\r\nbody\r\n"))
	require.NoError(t, err)
	err = w.Close()
	require.Error(t, err)
	var serr *smtp.SMTPError
	require.False(t, errors.As(err, &serr), "the connection is dropped with no reply, got %v", err)
	require.Equal(t, 1, srv.Drops())
	require.Zero(t, srv.Count())

	// Other recipients pass.
	c2, err := smtp.Dial(srv.Addr())
	require.NoError(t, err)
	defer c2.Close()
	require.NoError(t, c2.SendMail("a@example.com", []string{"good@example.com"}, strings.NewReader("Subject: y\r\n\r\nok\r\n")))
	require.Equal(t, 1, srv.Count())
}
