package kafka_test

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
	"github.com/heraldhq/herald/internal/transport/kafka"
	"github.com/heraldhq/herald/internal/worker"
)

var _ pipelinetest.Store = (*postgres.Store)(nil)

// TestPipeline runs the end-to-end suite over the production shape on
// Kafka: a PostgreSQL store, a relay producing its outbox and workers of
// one consumer group, on a three-broker cluster per subtest.
func TestPipeline(t *testing.T) {
	t.Parallel()
	pipelinetest.Run(t, func(t *testing.T) pipelinetest.Harness {
		return pipelineHarness(t, newCluster(t, 3)).Harness
	})
}

// TestPipelineIsolation runs the isolation subtests on the same shape.
func TestPipelineIsolation(t *testing.T) {
	pipelinetest.BrokerIsolation(t)
	pipelinetest.RunIsolation(t, func(t *testing.T) pipelinetest.Harness {
		return pipelineHarness(t, newCluster(t, 3)).Harness
	})
}

// pipeline is the harness with what the package's own end-to-end tests
// also need.
type pipeline struct {
	pipelinetest.Harness
	store *postgres.Store
	dbURL string
	cfg   kafka.Config
	pub   *kafka.Publisher
}

// pipelineHarness returns the harness on a fresh database and c.
func pipelineHarness(t *testing.T, c *cluster) pipeline {
	t.Helper()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, dbURL, postgres.Config{MaxConns: 8})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.Migrate(ctx))

	base := c.config("")
	base.RetryDelays = []time.Duration{pipelinetest.RetryDelay}
	pub := newPublisher(t, base)
	p := pipeline{store: s, dbURL: dbURL, cfg: base, pub: pub}
	p.Harness = pipelinetest.Harness{
		Store: s,
		NewSource: func(t *testing.T, sc pipelinetest.SourceConfig) worker.Source {
			t.Helper()
			cfg := base
			cfg.RetryDelays = []time.Duration{sc.RetryDelay}
			cfg.Prefetch = sc.Prefetch
			src, err := kafka.NewConsumer(cfg)
			require.NoError(t, err)
			return src
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
	return p
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
