package smtp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
