package smtp_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/mail"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/testkit/smtptest"
)

var _ mail.EmailSender = (*smtp.Sender)(nil)

func email(id string) mail.Email {
	return mail.Email{
		MessageID: "<" + id + "@example.com>",
		From:      "Herald <herald@example.com>",
		To:        "Ann <ann@example.org>",
		Subject:   "Grüße " + id,
		Body:      "Hello.\n.\n..\nFrom the team\n.",
	}
}

func newSender(t *testing.T, cfg smtp.Config) *smtp.Sender {
	t.Helper()
	s, err := smtp.New(cfg)
	require.NoError(t, err)
	return s
}

func TestSendDelivers(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL()})

	e := email("1")
	require.NoError(t, s.Send(context.Background(), e))

	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	m := msgs[0]
	require.Equal(t, "herald@example.com", m.From)
	require.Equal(t, []string{"ann@example.org"}, m.To)
	require.Equal(t, "<1@example.com>", m.MessageID)
	require.Equal(t, "Grüße 1", m.Subject)
	require.Equal(t, "Hello.\r\n.\r\n..\r\nFrom the team\r\n.", m.Body)
	require.Equal(t, "Herald <herald@example.com>", m.Header.Get("From"))
	require.Equal(t, 1, srv.Attempts())
}

func TestSendEnvelopeFromConfig(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL(), From: "Bounces <bounces@example.com>", HelloName: "herald.example.com"})
	require.NoError(t, s.Send(context.Background(), email("2")))
	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, "bounces@example.com", msgs[0].From)
	require.Equal(t, "Herald <herald@example.com>", msgs[0].Header.Get("From"))
}

func TestSendConcurrent(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL()})
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- s.Send(context.Background(), email(fmt.Sprint(i))) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	counts := srv.CountByMessageID()
	require.Len(t, counts, n)
	for id, c := range counts {
		require.Equal(t, 1, c, id)
	}
	require.Equal(t, n, srv.Count())
}

func TestSendUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	s := newSender(t, smtp.Config{URL: "smtp://" + addr, Timeout: 5 * time.Second})
	err = s.Send(context.Background(), email("4"))
	require.Error(t, err)
	require.False(t, notify.IsPermanent(err), "error %v", err)
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.Contains(t, err.Error(), "dial")
}

// silentServer accepts connections and never says a word: a hung server.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

func TestSendTimeout(t *testing.T) {
	t.Parallel()
	s := newSender(t, smtp.Config{URL: "smtp://" + silentServer(t), Timeout: 200 * time.Millisecond})
	start := time.Now()
	err := s.Send(context.Background(), email("5"))
	require.Error(t, err)
	require.False(t, notify.IsPermanent(err), "error %v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, notify.IsSenderDown(err), "a server that does not answer is down: %v", err)
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestSendCancelled(t *testing.T) {
	t.Parallel()
	s := newSender(t, smtp.Config{URL: "smtp://" + silentServer(t)})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Send(ctx, email("6")) }()
	cancel()
	select {
	case err := <-errc:
		require.Error(t, err)
		require.False(t, notify.IsPermanent(err))
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, notify.IsSenderDown(err), "the caller gave up, the server did not fail: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Send ignored the cancelled context")
	}
}

func TestSendUndeliverableAddress(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL()})
	e := email("10")
	e.To = "not an address"
	err := s.Send(context.Background(), e)
	require.Error(t, err)
	require.True(t, notify.IsPermanent(err))
	require.Equal(t, 0, srv.Attempts())
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("not a certificate"), 0o600))
	for _, tc := range []struct {
		name string
		cfg  smtp.Config
	}{
		{"empty URL", smtp.Config{}},
		{"bad scheme", smtp.Config{URL: "http://localhost:25"}},
		{"no host", smtp.Config{URL: "smtp://:25"}},
		{"bad port", smtp.Config{URL: "smtp://user:topsecret@localhost:notaport"}},
		{"path", smtp.Config{URL: "smtp://localhost:25/x"}},
		{"bad tls mode", smtp.Config{URL: "smtp://localhost:25?tls=1"}},
		{"unknown query", smtp.Config{URL: "smtp://localhost:25?verify=no"}},
		{"two tls modes", smtp.Config{URL: "smtp://localhost:25?tls=none&tls=required"}},
		{"credentials in clear", smtp.Config{URL: "smtp://u:topsecret@localhost:25?tls=none"}},
		{"credentials maybe in clear", smtp.Config{URL: "smtp://u:topsecret@localhost:25?tls=opportunistic"}},
		{"smtps without tls", smtp.Config{URL: "smtps://localhost?tls=none"}},
		{"skip verify", smtp.Config{URL: "smtps://localhost", TLSConfig: &tls.Config{InsecureSkipVerify: true}}},
		{"missing CA file", smtp.Config{URL: "smtp://localhost", CAFile: "/nonexistent/ca.pem"}},
		{"CA file without PEM", smtp.Config{URL: "smtp://localhost", CAFile: notPEM}},
		{"negative max sessions", smtp.Config{URL: "smtp://localhost:25", MaxSessions: -1}},
		{"password without user", smtp.Config{URL: "smtp://:topsecret@localhost:25"}},
		{"bad from", smtp.Config{URL: "smtp://localhost:25", From: "nobody"}},
		{"negative timeout", smtp.Config{URL: "smtp://localhost:25", Timeout: -time.Second}},
		{"negative max idle", smtp.Config{URL: "smtp://localhost:25", MaxIdle: -1}},
		{"negative idle timeout", smtp.Config{URL: "smtp://localhost:25", IdleTimeout: -time.Second}},
		{"hello name with space", smtp.Config{URL: "smtp://localhost:25", HelloName: "a b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := smtp.New(tc.cfg)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "topsecret")
		})
	}
	for _, u := range []string{
		"smtp://localhost", "smtps://u:p@mail.example.com", "smtp://[::1]:2525",
		"smtp://u:p@localhost:587?tls=required", "smtp://localhost?tls=none", "smtp://localhost?tls=opportunistic",
		"smtps://localhost?tls=required",
	} {
		_, err := smtp.New(smtp.Config{URL: u})
		require.NoError(t, err, u)
	}
}

func TestSendImplicitTLSRefusesPlainServer(t *testing.T) {
	t.Parallel()
	// An smtps:// URL pointed at a plaintext server must not fall back to
	// plaintext: the handshake fails, a failure of the server.
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: "smtps://" + srv.Addr(), Timeout: 5 * time.Second})
	err := s.Send(context.Background(), email("11"))
	require.Error(t, err)
	require.False(t, notify.IsPermanent(err))
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.Contains(t, err.Error(), "TLS handshake")
	require.Equal(t, 0, srv.Count())
}

// tlsServerName is a TLS configuration that verifies name.
func tlsServerName(name string) *tls.Config { return &tls.Config{ServerName: name} }
