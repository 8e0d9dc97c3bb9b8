package smtptest_test

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// rawSession is a client that writes the dialogue by hand, pipelined
// where the test says so.
type rawSession struct {
	t    *testing.T
	conn net.Conn
	r    *textproto.Reader
}

func dialRaw(t *testing.T, addr string) *rawSession {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	s := &rawSession{t: t, conn: conn, r: textproto.NewReader(bufio.NewReader(conn))}
	s.expect(220)
	return s
}

// send writes lines in one write, as a pipelining client does.
func (s *rawSession) send(lines ...string) {
	s.t.Helper()
	_, err := fmt.Fprint(s.conn, strings.Join(lines, "\r\n")+"\r\n")
	require.NoError(s.t, err)
}

// expect reads one reply and checks its code; it returns the text.
func (s *rawSession) expect(code int) string {
	s.t.Helper()
	got, msg, err := s.r.ReadResponse(0)
	require.NoError(s.t, err)
	require.Equal(s.t, code, got, "reply %d %s", got, msg)
	return msg
}

func TestStrictHelloRefusesSecondHello(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithStrictHello())
	c := dialRaw(t, srv.Addr())
	c.send("EHLO one.example")
	c.expect(250)
	c.send("EHLO two.example")
	require.Contains(t, c.expect(503), "Bad sequence")
	c.send("HELO three.example")
	c.expect(503)

	// The session goes on as greeted the first time; pipelined commands
	// get their replies in order, a refused hello among them; a line of
	// the message that reads like a hello is the message's.
	c.send("NOOP", "EHLO four.example", "MAIL FROM:<a@example.com>", "RCPT TO:<b@example.org>", "DATA")
	c.expect(250)
	c.expect(503)
	c.expect(250)
	c.expect(250)
	c.expect(354)
	c.send("Subject: hi", "", "EHLO inside the message", ".")
	c.expect(250)
	c.send("EHLO five.example")
	c.expect(503)
	c.send("QUIT")
	c.expect(221)

	require.Equal(t, 1, srv.Count())
	require.Equal(t, "EHLO inside the message\r\n", srv.Messages()[0].Body)
	require.Equal(t, 4, srv.RefusedHellos())

	// A new connection greets afresh; a refused EHLO greets nobody, so
	// HELO may follow it.
	c = dialRaw(t, srv.Addr())
	srv.FailAt(smtptest.StepHello, 502, "EHLO not implemented")
	c.send("EHLO one.example")
	c.expect(502)
	srv.FailAt(smtptest.StepHello, 0, "")
	c.send("HELO one.example")
	c.expect(250)
	c.send("EHLO two.example")
	c.expect(503)
	require.Equal(t, 5, srv.RefusedHellos())
}

// Without the option the server takes a second EHLO, as go-smtp does (RFC
// 5321 allows it): the option is what makes a test see a client's repeat.
func TestLenientHelloByDefault(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	c := dialRaw(t, srv.Addr())
	c.send("EHLO one.example")
	c.expect(250)
	c.send("EHLO two.example")
	c.expect(250)
	require.Zero(t, srv.RefusedHellos())
}

// STARTTLS starts the count over: the EHLO that RFC 3207 asks for after it
// is taken, and the session delivers, with AUTH.
func TestStrictHelloAfterStartTLS(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	srv := smtptest.Start(t, smtptest.WithStrictHello(), smtptest.WithStartTLS(ca.ServerTLS()),
		smtptest.WithRequireTLS(), smtptest.WithAuth("user", "pass"))
	c := dialRaw(t, srv.Addr())
	c.send("EHLO one.example")
	c.expect(250)
	c.send("EHLO two.example")
	c.expect(503)
	c.send("STARTTLS")
	c.expect(220)

	tc := tls.Client(c.conn, &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost"})
	require.NoError(t, tc.Handshake())
	c.conn, c.r = tc, textproto.NewReader(bufio.NewReader(tc))
	c.send("EHLO one.example")
	require.Contains(t, c.expect(250), "AUTH")
	c.send("AUTH PLAIN " + base64.StdEncoding.EncodeToString([]byte("\x00user\x00pass")))
	c.expect(235)
	c.send("MAIL FROM:<a@example.com>", "RCPT TO:<b@example.org>", "DATA")
	c.expect(250)
	c.expect(250)
	c.expect(354)
	c.send("Subject: hi", "", "over TLS", ".")
	c.expect(250)
	require.Equal(t, 1, srv.Count())
	require.Equal(t, 1, srv.RefusedHellos())

	// go-smtp's client (EHLO, STARTTLS, EHLO, AUTH) delivers too.
	gc := dialStartTLS(t, srv.Addr(), ca)
	require.NoError(t, gc.Auth(sasl.NewPlainClient("", "user", "pass")))
	require.NoError(t, gc.SendMail("a@example.com", []string{"b@example.org"}, strings.NewReader(raw)))
	require.Equal(t, 2, srv.Count())
	require.Equal(t, 1, srv.RefusedHellos())
}

func TestStrictHelloRefusesImplicitTLS(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	_, err := smtptest.New(smtptest.WithStrictHello(), smtptest.WithTLS(ca.ServerTLS()))
	require.ErrorContains(t, err, "WithStrictHello")
}
