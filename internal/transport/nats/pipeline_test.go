package nats_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/pipelinetest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	natstr "github.com/heraldhq/herald/internal/transport/nats"
	"github.com/heraldhq/herald/internal/worker"
)

var _ pipelinetest.Store = (*postgres.Store)(nil)

// TestPipeline runs the end-to-end suite over the production shape on
// JetStream: a PostgreSQL store, a relay publishing its outbox and workers
// consuming notifications.requested.
func TestPipeline(t *testing.T) {
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	pipelinetest.Run(t, func(t *testing.T) pipelinetest.Harness { return pipelineHarness(t, srv) })
}

// TestPipelineIsolation runs the isolation subtests on the same shape.
func TestPipelineIsolation(t *testing.T) {
	pipelinetest.BrokerIsolation(t)
	srv := testenv.StartNATS(t, testenv.NATSOptions{})
	pipelinetest.RunIsolation(t, func(t *testing.T) pipelinetest.Harness { return pipelineHarness(t, srv) })
}

// pipelineHarness returns the harness on a fresh database and a stream of
// the test's own, deleted when the test ends.
func pipelineHarness(t *testing.T, srv *testenv.NATS) pipelinetest.Harness {
	t.Helper()
	dbURL := pgtest.URL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, dbURL, postgres.Config{MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.Migrate(ctx))

	base := config(t, srv)
	base.RetryDelays = []time.Duration{pipelinetest.RetryDelay}
	pub := newPublisher(t, base)

	return pipelinetest.Harness{
		Store: s,
		NewSource: func(t *testing.T, sc pipelinetest.SourceConfig) worker.Source {
			t.Helper()
			cfg := base
			cfg.RetryDelays = []time.Duration{sc.RetryDelay}
			cfg.Prefetch = sc.Prefetch
			c, err := natstr.NewConsumer(cfg)
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
			// The publisher's re-publish would be absorbed by the duplicate
			// window (TestDuplicatePublishAbsorbed shows it): publish the
			// same message under another Nats-Msg-Id, as a re-publish after
			// the window has passed would arrive.
			publishRaw(t, ctx, base, ev, "again-"+notify.FormatID(ev.ID))
		},
	}
}

// publishRaw publishes ev as the relay would, but under the Nats-Msg-Id
// msgID, and waits for the stream to store it.
func publishRaw(t *testing.T, ctx context.Context, cfg natstr.Config, ev notify.Event, msgID string) {
	t.Helper()
	nc, err := natsgo.Connect(cfg.URL)
	require.NoError(t, err)
	defer nc.Close()
	m := natsgo.NewMsg(cfg.Topology().Requested)
	m.Header.Set(natstr.HeaderMessageID, notify.FormatID(ev.ID))
	m.Header.Set(natstr.HeaderType, ev.Type)
	m.Header.Set(natstr.HeaderContentType, "application/json")
	m.Header.Set(natstr.HeaderOccurredAt, strconv.FormatInt(ev.OccurredAt.UnixMicro(), 10))
	m.Header.Set(natsgo.MsgIdHdr, msgID)
	m.Data = ev.Payload
	reply, err := nc.RequestMsgWithContext(ctx, m)
	require.NoError(t, err)
	require.NotContains(t, string(reply.Data), `"error"`, "stream refused the message")
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
