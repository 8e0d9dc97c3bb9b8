package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/testkit/proctest"
)

// Exercise: with RabbitMQ stopped, creates still answer 201; after the
// broker is back every one is delivered and the outbox is empty. The
// broker is a node of the test's own (its application stopped and started
// with rabbitmqctl, as an operator would), so the test runs beside the
// others, which keep the shared broker.
func TestOutageBrokerStopped(t *testing.T) {
	t.Parallel()
	if _, err := proctest.RabbitScripts(); err != nil {
		t.Fatalf("the test stops a RabbitMQ node of its own: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	nodes, err := proctest.StartRabbitNodes(ctx, t.TempDir(), 1)
	require.NoError(t, err)
	node := nodes[0]
	t.Cleanup(func() { _ = node.Kill() })
	// rabbitmqctl stops or starts the node's application.
	rabbitmqctl := func(action string) {
		t.Helper()
		out, err := node.Ctl(ctx, "rabbitmqctl", action)
		require.NoError(t, err, "rabbitmqctl %s: %s", action, out)
	}

	const n = 200
	s := newStack(t, map[string]string{"HERALD_BROKER_URL": node.URL()})
	s.startAPI(nil)
	s.start("relay")
	s.start("worker")

	rabbitmqctl("stop_app")
	ids := createMany(t, s.api, n, 8)
	require.Len(t, ids, n, "every create answered 201 with the broker down")
	require.Equal(t, n, s.count("SELECT count(*) FROM outbox WHERE processed_at IS NULL"),
		"nothing can be marked processed while the broker is down")

	rabbitmqctl("start_app")
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
