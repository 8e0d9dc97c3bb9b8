package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/nats"
)

// The production path on NATS JetStream, with the server down when the
// processes start: the API takes the create at once, relay and worker keep
// retrying and deliver once the server is up. Then a dead letter lands on
// notifications.dlq and herald dlq redrive takes it off and delivers it.
func TestNATSDeliveredEndToEnd(t *testing.T) {
	t.Parallel()
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	srv.Stop()
	s := newStack(t, map[string]string{
		"HERALD_BROKER_URL":  srv.URL(),
		"HERALD_RETRY_DELAY": "300ms",
		"HERALD_MAX_RETRIES": "1",
	})
	s.startAPI(nil)
	relay := s.start("relay")
	worker := s.start("worker")

	r := s.api.create(t, "Someone <b@example.com>", nil)
	require.Equal(t, 201, r.Status, r.Body)
	require.Eventually(t, func() bool {
		return relay.LogContains("level=WARN") && worker.LogContains("nats consumer disconnected; reconnecting")
	}, 30*time.Second, 20*time.Millisecond, "relay and worker did not report the missing server")
	srv.Start()

	n := s.waitStatus(r.ID, "sent", 60*time.Second)
	require.Equal(t, 1, n.Attempts)
	msgs := s.smtp.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, "<"+r.ID+"@example.com>", msgs[0].MessageID)
	s.waitOutboxEmpty()

	// A permanent refusal: dead-lettered at once, with its reason.
	s.smtp.Fail(550, "no such user")
	dead := s.api.create(t, "nobody@example.com", nil)
	require.Equal(t, 201, dead.Status, dead.Body)
	s.waitStatus(dead.ID, "failed", 30*time.Second)
	cfg := nats.Config{URL: srv.URL()}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		n, err := nats.DeadLetterCount(ctx, cfg)
		return err == nil && n == 1
	}, 10*time.Second, 20*time.Millisecond, "no dead letter on notifications.dlq")

	s.smtp.Fail(0, "")
	out := s.run("dlq", "redrive", "--id", dead.ID)
	require.Contains(t, out, "redrove 1 of 1")
	require.Contains(t, out, "removed 1 message(s)")
	s.waitStatus(dead.ID, "sent", 30*time.Second)
	left, err := nats.DeadLetterCount(ctx, cfg)
	require.NoError(t, err)
	require.Zero(t, left, "the redriven dead letter is still on notifications.dlq")
}
