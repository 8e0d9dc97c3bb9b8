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
	"github.com/heraldhq/herald/internal/testkit/smtptest"
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

// Waiting for a free session is a local limit, not part of the send: a
// send that waits for the one slot longer than Timeout, then takes most of
// Timeout itself, still delivers.
func TestSendSlotWaitOutsideTimeout(t *testing.T) {
	t.Parallel()
	const timeout, latency = 2 * time.Second, 1200 * time.Millisecond
	srv := smtptest.Start(t, smtptest.WithDataLatency(latency))
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxSessions: 1, MaxIdle: 1, Timeout: timeout})

	first := make(chan error, 1)
	go func() { first <- s.Send(context.Background(), email("first")) }()
	// The first send holds the slot once its transaction has begun.
	require.Eventually(t, func() bool { return srv.Attempts() == 1 }, 10*time.Second, time.Millisecond)

	start := time.Now()
	err := s.Send(context.Background(), email("second"))
	took := time.Since(start)
	require.NoError(t, err)
	require.NoError(t, <-first)
	// Otherwise the test proves nothing: the second send waited for the
	// slot and then sent, longer than Timeout in all.
	require.Greater(t, took, timeout, "the second send took %s", took)
	require.Equal(t, map[string]int{"<first@example.com>": 1, "<second@example.com>": 1}, srv.CountByMessageID())
	require.Equal(t, 1, srv.PeakConnections())
}

// A send waiting for a free session gives up when its caller does, with a
// plain error: a full pool says nothing about the server.
func TestSendSlotWaitEndsWithCaller(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t, smtptest.WithDataLatency(time.Hour))
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxSessions: 1, Timeout: time.Hour})
	holder, release := context.WithCancel(context.Background())
	defer release()
	go func() { _ = s.Send(holder, email("holder")) }()
	require.Eventually(t, func() bool { return srv.Attempts() == 1 }, 10*time.Second, time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := s.Send(ctx, email("waiter"))
	require.Equal(t, retry, outcomeOf(t, err), "error %v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "wait for a free session")
	require.Equal(t, 1, srv.Connections(), "the waiter opened no session")
}

// A 421 to the MAIL of a kept session is first taken for a session dropped
// while idle and retried on a fresh one; the fresh one's 421 is reported
// as throttling.
func TestSendReusedSession421(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxIdle: 1})
	require.NoError(t, s.Send(context.Background(), email("1")))
	srv.FailAt(smtptest.StepMail, 421, "slow down")
	err := s.Send(context.Background(), email("2"))
	require.Equal(t, throttled, outcomeOf(t, err), "error %v", err)
	require.Contains(t, err.Error(), "421 at MAIL FROM: provider throttling")
	require.Equal(t, 3, srv.MailCommands(), "one MAIL on the kept session, one on a fresh one")
	require.Equal(t, 2, srv.Connections())
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

// A caller whose ctx ended before the send began gets a plain error, even
// with a kept session at hand: the server was never asked.
func TestSendCallerEndedBeforeSending(t *testing.T) {
	t.Parallel()
	srv := smtptest.Start(t)
	s := newSender(t, smtp.Config{URL: srv.URL(), MaxIdle: 1})
	require.NoError(t, s.Send(context.Background(), email("1")))
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	err := s.Send(ctx, email("2"))
	require.Equal(t, retry, outcomeOf(t, err), "error %v", err)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, s.Send(context.Background(), email("3")))
	require.Equal(t, 1, srv.Connections(), "the kept session stayed kept")
}
