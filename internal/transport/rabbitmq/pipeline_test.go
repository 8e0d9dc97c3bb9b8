package rabbitmq_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/pipelinetest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/consume"
	"github.com/heraldhq/herald/internal/transport/rabbitmq"
	"github.com/heraldhq/herald/internal/worker"
)

var _ pipelinetest.Store = (*postgres.Store)(nil)

// TestPipeline runs the end-to-end suite over the production shape: a
// PostgreSQL store, a relay publishing its outbox and workers consuming the
// send queue.
func TestPipeline(t *testing.T) {
	t.Parallel()
	pipelinetest.Run(t, pipelineHarness)
}

// TestPipelineIsolation runs the isolation subtests on the same shape.
func TestPipelineIsolation(t *testing.T) {
	pipelinetest.BrokerIsolation(t)
	pipelinetest.RunIsolation(t, pipelineHarness)
}

// TestPipelinePgBouncer runs the suite with the store behind PgBouncer in
// transaction mode (issue 36), given no direct URL: no LISTEN, the relay
// finds the rows of the suite's creates by polling as well as by this
// process's own wake-ups.
func TestPipelinePgBouncer(t *testing.T) {
	t.Parallel()
	pipelinetest.Run(t, func(t *testing.T) pipelinetest.Harness { return pipelineHarnessOn(t, true) })
}

// pipelineHarness returns the harness on a fresh database and a
// topology of the test's own, deleted when the test ends.
func pipelineHarness(t *testing.T) pipelinetest.Harness {
	t.Helper()
	return pipelineHarnessOn(t, false)
}

// pipelineHarnessOn is pipelineHarness, with the store through the
// tests' PgBouncer when pooled.
func pipelineHarnessOn(t *testing.T, pooled bool) pipelinetest.Harness {
	t.Helper()
	dbURL := pgtest.URL(t)
	storeURL := dbURL
	if pooled {
		storeURL = testenv.PgBouncerURL(t, dbURL)
	}
	amqpURL, prefix := testenv.AMQP(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, storeURL, postgres.Config{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.Migrate(ctx))

	base := rabbitmq.Config{
		URL: amqpURL,
		Settings: consume.Settings{
			Prefix:        prefix,
			ReconnectMin:  20 * time.Millisecond,
			ReconnectMax:  200 * time.Millisecond,
			ShutdownGrace: 10 * time.Second,
		},
		// Every consumer declares the retry queue, whose TTL this is: they
		// all have to agree (the publisher declares none).
		RetryDelay:     pipelinetest.RetryDelay,
		ConfirmTimeout: 5 * time.Second,
	}
	// Registered before anything that uses the topology, so it runs last.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, rabbitmq.Delete(ctx, base), "delete topology")
	})
	pubCfg := base
	pubCfg.ConnectionName = "herald-pipeline-publisher-" + prefix
	pub, err := rabbitmq.NewPublisher(pubCfg)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, pub.Close()) })

	return pipelinetest.Harness{
		Store: s,
		NewSource: func(t *testing.T, sc pipelinetest.SourceConfig) worker.Source {
			t.Helper()
			cfg := base
			cfg.RetryDelay = sc.RetryDelay
			cfg.Prefetch = sc.Prefetch
			cfg.ConnectionName = "herald-pipeline-consumer-" + prefix
			c, err := rabbitmq.NewConsumer(cfg)
			require.NoError(t, err)
			return c
		},
		Pump: func(t *testing.T, ctx context.Context) {
			t.Helper()
			r, err := relay.New(s, pub, s, relay.Config{Interval: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() { assert.NoError(t, r.Run(ctx), "relay") })
			t.Cleanup(func() {
				cancel()
				wg.Wait()
			})
		},
		Redeliver: func(t *testing.T, notificationID int64) {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			ev := outboxEvent(t, ctx, dbURL, notificationID)
			confirmed, err := pub.Publish(ctx, []notify.Event{ev})
			require.NoError(t, err)
			require.Equal(t, []int64{ev.ID}, confirmed)
		},
	}
}

// outboxEvent reads the outbox event of a notification, as the relay
// published it.
func outboxEvent(t *testing.T, ctx context.Context, dbURL string, notificationID int64) notify.Event {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	var ev notify.Event
	require.NoError(t, conn.QueryRow(ctx, `
SELECT id, event_type, payload, occurred_at FROM outbox
WHERE payload->>'notification_id' = $1 AND processed_at IS NOT NULL`,
		notify.FormatID(notificationID)).Scan(&ev.ID, &ev.Type, &ev.Payload, &ev.OccurredAt))
	return ev
}

// Issue 34, point 5, on PostgreSQL and RabbitMQ: high notifications wait
// behind no bulk backlog, in the outbox (the relay's claim) or in the
// broker (the high lane).
func TestPipelinePriority(t *testing.T) {
	t.Parallel()
	pipelinetest.RunPriority(t, pipelineHarness)
}
