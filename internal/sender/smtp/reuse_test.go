package smtp_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/sender/smtp"
	"github.com/heraldhq/herald/internal/smtptest"
)

// Sends one after another share one kept session.
func TestSendReusesSession(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxIdle: 1})
	for i := range 5 {
		require.NoError(t, s.Send(context.Background(), email(fmt.Sprint(i+1))))
	}
	require.Equal(t, 5, srv.Count())
	require.Equal(t, 1, srv.Connections())

	// MaxIdle 0 keeps no session: each send opens its own.
	fresh := newSender(t, smtp.Config{URL: srv.URL(), MaxIdle: 0})
	for i := range 3 {
		require.NoError(t, fresh.Send(context.Background(), email(fmt.Sprint(10+i))))
	}
	require.Equal(t, 4, srv.Connections())
}

// A kept session the server dropped is replaced, and the send goes through
// once.
func TestSendSurvivesDroppedSession(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxIdle: 1})
	require.NoError(t, s.Send(context.Background(), email("1")))
	srv.DropConnections()
	require.NoError(t, s.Send(context.Background(), email("2")))
	require.Equal(t, map[string]int{"<1@example.com>": 1, "<2@example.com>": 1}, srv.CountByMessageID())
	require.Equal(t, 2, srv.Connections())
}

// A session that failed is never reused; an idle one past IdleTimeout is
// not either.
func TestSendDropsFailedAndStaleSessions(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxIdle: 1})
	srv.Fail(451, "later")
	require.Error(t, s.Send(context.Background(), email("1")))
	srv.Fail(0, "")
	require.NoError(t, s.Send(context.Background(), email("2")))
	require.Equal(t, 2, srv.Connections(), "the failed session was closed")
	require.NoError(t, s.Close())

	// With an IdleTimeout of 1ns every kept session is stale by the next
	// send, without waiting for any clock.
	stale := newSender(t, smtp.Config{URL: srv.URL(), MaxIdle: 1, IdleTimeout: time.Nanosecond})
	require.NoError(t, stale.Send(context.Background(), email("3")))
	require.NoError(t, stale.Send(context.Background(), email("4")))
	require.Equal(t, 4, srv.Connections(), "the stale session was not reused")
}

// Concurrent sends share at most MaxSessions sessions: the rest wait for a
// free one rather than open more.
func TestSendPoolBounded(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithDataLatency(20*time.Millisecond))
	const sessions, n = 3, 30
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxSessions: sessions, MaxIdle: sessions})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() { errs <- s.Send(context.Background(), email(fmt.Sprint("pool", i))) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, n, srv.Count())
	require.LessOrEqual(t, srv.Connections(), sessions)
	require.LessOrEqual(t, srv.PeakConnections(), sessions)
}

// A session that failed, or that could not be opened, frees its place: a
// pool of one still sends after failures.
func TestSendPoolFreesFailedSessions(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxSessions: 1, MaxIdle: 1, Timeout: 5 * time.Second})
	srv.Fail(451, "later")
	for range 3 {
		require.Error(t, s.Send(context.Background(), email("f")))
	}
	srv.Fail(0, "")
	srv.FailAt(smtptest.StepGreeting, 421, "down")
	for range 3 {
		require.Error(t, s.Send(context.Background(), email("f")))
		require.Error(t, s.Probe(context.Background()))
	}
	srv.FailAt(smtptest.StepGreeting, 0, "")
	require.NoError(t, s.Send(context.Background(), email("f")))
	require.Equal(t, 1, srv.Count())
}

// Rate caps the emails handed to the server: n accepted at time T means
// T >= (n - burst) / rate, whatever the load (load only slows sends down).
func TestSendRate(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	const perSecond, burst, target = 20, 20, 40
	s := newSender(t, smtp.Config{URL: srv.URL(), Rate: perSecond, MaxSessions: 4, MaxIdle: 4})
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range 200 {
		wg.Go(func() { _ = s.Send(ctx, email(fmt.Sprint("rate", i))) })
	}
	require.Eventually(t, func() bool { return srv.Count() >= target }, 30*time.Second, 5*time.Millisecond)
	count := srv.Count()
	elapsed := time.Since(start)
	require.GreaterOrEqual(t, elapsed, time.Duration(target-burst)*time.Second/perSecond-10*time.Millisecond)
	require.LessOrEqual(t, float64(count), perSecond*elapsed.Seconds()+burst+1, "%d sent in %s", count, elapsed)
}

// Probe checks a kept session with NOOP (no new connection), opens one when
// none is kept, and keeps it for the next send.
func TestProbe(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxSessions: 2, MaxIdle: 2})
	require.NoError(t, s.Probe(context.Background()))
	require.Equal(t, 1, srv.Connections())
	require.NoError(t, s.Send(context.Background(), email("p1")))
	require.NoError(t, s.Probe(context.Background()))
	require.Equal(t, 1, srv.Connections(), "probe and send reused the session")

	// A kept session dropped while idle says nothing about the server.
	srv.DropConnections()
	require.NoError(t, s.Probe(context.Background()))
	require.Equal(t, 2, srv.Connections())

	srv.Close()
	err := s.Probe(context.Background())
	require.True(t, notify.IsSenderDown(err), "error %v", err)
	require.Contains(t, err.Error(), "smtp probe")
}

func TestTimeout(t *testing.T) {
	t.Parallel()
	require.Equal(t, smtp.DefaultTimeout, newSender(t, smtp.Config{URL: "smtp://localhost"}).Timeout())
	require.Equal(t, 7*time.Second, newSender(t, smtp.Config{URL: "smtp://localhost", Timeout: 7 * time.Second}).Timeout())
}
