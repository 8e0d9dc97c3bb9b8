package sqs_test

import (
	"context"
	"log/slog"
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
	sqstr "github.com/heraldhq/herald/internal/transport/sqs"
	"github.com/heraldhq/herald/internal/worker"
)

var (
	_ relay.Publisher = (*sqstr.Publisher)(nil)
	_ worker.Source   = (*sqstr.Consumer)(nil)
)

// TestPipeline runs the end-to-end suite over the production shape on
// goaws: a PostgreSQL store, a relay publishing its outbox with
// SendMessageBatch and workers receiving from PREFIX-send.
func TestPipeline(t *testing.T) {
	pipelinetest.Run(t, pipelineHarness)
}

// TestPipelineIsolation runs the isolation subtests on the same shape.
func TestPipelineIsolation(t *testing.T) {
	pipelinetest.BrokerIsolation(t)
	pipelinetest.RunIsolation(t, pipelineHarness)
}

// pipelineVisibility is the visibility timeout of the suite's queues.
const pipelineVisibility = 5 * time.Second

// pipelineHarness returns the harness on a fresh database and queues of
// the test's own, deleted when the test ends.
func pipelineHarness(t *testing.T) pipelinetest.Harness {
	t.Helper()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, dbURL, postgres.Config{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.Migrate(ctx))

	base := config(t)
	base.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	// The visibility timeout each receive asks for is short, so that a
	// message whose receive answer was lost on its way back (SQS's
	// contract: it comes back after the visibility timeout) reaches the
	// next receive well within the suite's waits; a held message is
	// extended every third of it.
	base.VisibilityTimeout = pipelineVisibility
	base.RetryDelays = []time.Duration{pipelinetest.RetryDelay}
	pub := newPublisher(t, base)

	return pipelinetest.Harness{
		Store: s,
		NewSource: func(t *testing.T, sc pipelinetest.SourceConfig) worker.Source {
			t.Helper()
			cfg := base
			cfg.RetryDelays = []time.Duration{sc.RetryDelay}
			cfg.Prefetch = sc.Prefetch
			if sc.Lease > 0 {
				// The crashing consumer's shorter one, capped by the
				// suite's.
				cfg.VisibilityTimeout = min(pipelineVisibility, max(sc.Lease, time.Second))
			}
			c, err := sqstr.NewConsumer(cfg)
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
			got, err := pub.Publish(ctx, []notify.Event{ev})
			require.NoError(t, err)
			require.Equal(t, []int64{ev.ID}, got)
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
