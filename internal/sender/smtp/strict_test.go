package smtp_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

// clearHellos counts the EHLO and HELO commands a capture of the wire
// shows in clear: up to STARTTLS, or the whole session without it.
func clearHellos(wire []byte) int {
	if i := bytes.Index(wire, []byte("\r\nSTARTTLS\r\n")); i >= 0 {
		wire = wire[:i]
	}
	return bytes.Count(wire, []byte("\nEHLO ")) + bytes.Count(wire, []byte("\nHELO "))
}

// A strict server answers a second EHLO in a session with 503: a session
// in clear (no STARTTLS offered, or tls=none) says EHLO once, and
// delivers, through a probe and a kept session too.
func TestSendStrictServerPlain(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	for _, tc := range []struct {
		name  string
		opts  []smtptest.Option
		query string
	}{
		{"no STARTTLS offered", nil, ""},
		{"tls=none", []smtptest.Option{smtptest.WithStartTLS(ca.ServerTLS())}, "?tls=none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.Start(t, append(tc.opts, smtptest.WithStrictHello(), smtptest.WithWireCapture())...)
			s := newSender(t, smtp.Config{URL: srv.URL() + tc.query, MaxIdle: 1})
			require.NoError(t, s.Send(context.Background(), email("strict-1")))
			require.NoError(t, s.Close())
			require.NoError(t, s.Probe(context.Background()))
			require.NoError(t, s.Send(context.Background(), email("strict-2")))
			require.Equal(t, 2, srv.Count())
			require.Zero(t, srv.RefusedHellos())
			require.Equal(t, 2, srv.Connections())
			require.Equal(t, 2, clearHellos(srv.Wire()), "one EHLO per session")
		})
	}
}

// After STARTTLS the session says EHLO again (RFC 3207), once: the server
// takes MAIL only from a client that did (go-smtp answers 502 "Please
// introduce yourself first" otherwise), and the strict server counts
// one EHLO in clear. With credentials, AUTH follows that EHLO and is not
// followed by another.
func TestSendStrictServerStartTLS(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	caFile := ca.WriteFile(t)
	for _, tc := range []struct {
		name string
		opts []smtptest.Option
		url  func(*smtptest.Server) string
	}{
		{"opportunistic", nil, func(srv *smtptest.Server) string { return srv.URL() }},
		{"required", []smtptest.Option{smtptest.WithRequireTLS()}, func(srv *smtptest.Server) string { return srv.URL() + "?tls=required" }},
		{"AUTH", []smtptest.Option{smtptest.WithRequireTLS(), smtptest.WithAuth(user, pass)}, func(srv *smtptest.Server) string {
			return "smtp://" + user + ":" + pass + "@" + srv.Addr()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.Start(t, append(tc.opts, smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithStrictHello(), smtptest.WithWireCapture())...)
			s := newSender(t, smtp.Config{URL: tc.url(srv), CAFile: caFile})
			require.NoError(t, s.Send(context.Background(), email("strict-tls")))
			require.Equal(t, 1, srv.Count())
			require.Zero(t, srv.RefusedHellos())
			wire := srv.Wire()
			require.Contains(t, string(wire), "\r\nSTARTTLS\r\n")
			require.Equal(t, 1, clearHellos(wire))
			if tc.name == "AUTH" {
				require.Equal(t, 1, srv.AuthAttempts())
				requireNoCredentials(t, wire)
			}
		})
	}
}

// A reply herald does not expect names the command it answered and the
// server's reply, code and text, in the reason the sender is down for.
func TestSendUnexpectedReplyNamed(t *testing.T) {
	t.Parallel()
	ca := smtptest.StartCA(t)
	caFile := ca.WriteFile(t)
	for _, tc := range []struct {
		name string
		opts []smtptest.Option
		url  func(*smtptest.Server) string
		step smtptest.Step
		say  string
	}{
		{"EHLO in clear", nil, (*smtptest.Server).URL, smtptest.StepHello, "EHLO: SMTP error 503: "},
		{"EHLO over smtps", []smtptest.Option{smtptest.WithTLS(ca.ServerTLS())}, (*smtptest.Server).URL, smtptest.StepHello, "EHLO: SMTP error 503: "},
		{"greeting over smtps", []smtptest.Option{smtptest.WithTLS(ca.ServerTLS())}, (*smtptest.Server).URL, smtptest.StepGreeting, "the greeting: SMTP error 503: "},
		{"AUTH", []smtptest.Option{smtptest.WithStartTLS(ca.ServerTLS()), smtptest.WithAuth(user, pass)}, func(srv *smtptest.Server) string {
			return "smtp://" + user + ":" + pass + "@" + srv.Addr()
		}, smtptest.StepAuth, `AUTH as "herald": SMTP error 503: `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := smtptest.Start(t, tc.opts...)
			s := newSender(t, smtp.Config{URL: tc.url(srv), CAFile: caFile})
			srv.FailAt(tc.step, 503, "Bad sequence of commands")
			for _, err := range []error{s.Send(context.Background(), email("odd")), s.Probe(context.Background())} {
				require.True(t, notify.IsSenderDown(err), "error %v", err)
				require.ErrorContains(t, err, tc.say)
				require.ErrorContains(t, err, "Bad sequence of commands")
			}
			require.Zero(t, srv.MailCommands())
		})
	}
}

// A server that answers EHLO with 502 (not implemented) gets HELO, once;
// when it refuses that too, the reason names HELO and the EHLO before it.
func TestSendHelloFallbackNamed(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithStrictHello(), smtptest.WithWireCapture())
	srv.FailAt(smtptest.StepHello, 502, "Command not implemented")
	s := newSender(t, smtp.Config{URL: srv.URL()})
	err := s.Send(context.Background(), email("helo"))
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.ErrorContains(t, err, "HELO (EHLO refused): SMTP error 502: ")
	require.ErrorContains(t, err, "Command not implemented")
	require.Zero(t, srv.RefusedHellos())
	require.Equal(t, 1, bytes.Count(srv.Wire(), []byte("\nEHLO ")))
	require.Equal(t, 1, bytes.Count(srv.Wire(), []byte("\nHELO ")))
	require.Zero(t, srv.MailCommands())
}

// A reply to STARTTLS with more behind it (a man in the middle injecting
// commands to be read as if they came over TLS, CVE-2011-0411) ends the
// session before the handshake: nothing is sent.
func TestSendRefusesDataBeforeHandshake(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	heard := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := textproto.NewReader(bufio.NewReader(c))
		var said []string
		defer func() { heard <- strings.Join(said, "|") }()
		_, _ = io.WriteString(c, "220 peer ESMTP\r\n")
		for _, reply := range []string{"250-peer\r\n250 STARTTLS\r\n", "220 go ahead\r\n250 injected\r\n"} {
			line, err := r.ReadLine()
			if err != nil {
				return
			}
			said = append(said, line)
			_, _ = io.WriteString(c, reply)
		}
		line, _ := r.ReadLine()
		said = append(said, line)
	}()
	s := newSender(t, smtp.Config{URL: "smtp://" + ln.Addr().String(), Timeout: 10 * time.Second})
	err = s.Send(context.Background(), email("mitm"))
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.ErrorContains(t, err, "STARTTLS: the server sent data before the TLS handshake")
	require.Equal(t, "EHLO localhost|STARTTLS|", <-heard)
}
