//go:build outage

package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/proctest"
)

// These tests stop a shared service. They are built only with the outage tag
// and run alone (make test-outage), never beside tests that need the service.

// rabbitmqctl stops or starts the broker's application; the bound is wide
// because start_app brings every vhost of the shared broker back.
func rabbitmqctl(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	require.NoError(t, proctest.Rabbitmqctl(ctx, args...))
}

// Exercise: with RabbitMQ stopped, creates still answer 201; after the
// broker is back every one is delivered and the outbox is empty.
func TestOutageBrokerStopped(t *testing.T) {
	const n = 200
	s := newStack(t, nil)
	s.startAPI(nil)
	s.start("relay")
	s.start("worker")

	rabbitmqctl(t, "stop_app")
	stopped := true
	t.Cleanup(func() {
		if stopped {
			rabbitmqctl(t, "start_app")
		}
	})
	ids := createMany(t, s.api, n, 8)
	require.Len(t, ids, n, "every create answered 201 with the broker down")
	require.Equal(t, n, s.count("SELECT count(*) FROM outbox WHERE processed_at IS NULL"),
		"nothing can be marked processed while the broker is down")

	rabbitmqctl(t, "start_app")
	stopped = false
	require.Eventually(t, func() bool {
		return s.count("SELECT count(*) FROM notifications WHERE status = 'sent'") == n
	}, 120*time.Second, 100*time.Millisecond)
	s.waitOutboxEmpty()
	byID := s.smtp.CountByMessageID()
	require.Len(t, byID, n)
	for _, id := range ids {
		require.Equal(t, 1, byID["<"+id+"@example.com>"], "notification %s", id)
	}
}
