package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/testenv"
)

// tableStats is one table's line of pg_stat_user_tables.
type tableStats struct {
	seqScans, seqRead, idxFetch int64
}

// growthTables are the tables a delivery touches.
var growthTables = []string{"notifications", "outbox", "processed_messages", "delivery_attempts"}

// readTableStats makes every idle connection of s's pool flush its pending
// statistics (a backend reports them when it goes idle, at most once a
// second unless told to), then reads the counters of growthTables on conn.
func readTableStats(t *testing.T, ctx context.Context, s *Store, conn *pgx.Conn) map[string]tableStats {
	t.Helper()
	for _, c := range s.pool.AcquireAllIdle(ctx) {
		_, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
		c.Release()
		require.NoError(t, err)
	}
	_, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
	require.NoError(t, err)
	rows, err := conn.Query(ctx, `
SELECT relname, COALESCE(seq_scan, 0), COALESCE(seq_tup_read, 0), COALESCE(idx_tup_fetch, 0)
FROM pg_stat_user_tables WHERE relname = ANY($1)`, growthTables)
	require.NoError(t, err)
	out := map[string]tableStats{}
	for rows.Next() {
		var (
			name string
			st   tableStats
		)
		require.NoError(t, rows.Scan(&name, &st.seqScans, &st.seqRead, &st.idxFetch))
		out[name] = st
	}
	require.NoError(t, rows.Err())
	require.Len(t, out, len(growthTables))
	return out
}

// deliverAll creates n notifications when create is set, then relays and
// delivers every unprocessed event as a worker does: claims in groups of
// group, each group's claim sharing its transaction with the previous
// group's record (ClaimAndRecord). It runs the other periodic statements of
// a delivering process along the way (reconcile, retention, a listing) and
// returns the number of deliveries.
func deliverAll(t *testing.T, ctx context.Context, s *Store, relayLimit, group, maxDeliveries int) int {
	t.Helper()
	delivered := 0
	var pending []notify.DeliveryResult
	for delivered < maxDeliveries {
		var events []notify.Event
		_, err := s.RelayBatch(ctx, min(relayLimit, maxDeliveries-delivered), func(_ context.Context, evs []notify.Event) ([]int64, error) {
			events = evs
			return ids(evs), nil
		})
		require.NoError(t, err)
		if len(events) == 0 {
			break
		}
		for start := 0; start < len(events); start += group {
			chunk := events[start:min(start+group, len(events))]
			reqs := make([]notify.ClaimRequest, len(chunk))
			for i, ev := range chunk {
				_, nid, err := notify.Message{ID: ev.ID, Type: ev.Type, Payload: ev.Payload}.Decode()
				require.NoError(t, err)
				reqs[i] = notify.ClaimRequest{MessageID: ev.ID, NotificationID: nid}
			}
			claims, ok, err := s.ClaimAndRecord(ctx, reqs, time.Minute, pending)
			require.NoError(t, err)
			for _, applied := range ok {
				require.True(t, applied)
			}
			pending = pending[:0]
			for _, c := range claims {
				require.Equal(t, notify.ClaimTaken, c.Status, "message %d", c.MessageID)
				pending = append(pending, notify.DeliveryResult{Claim: c, Outcome: notify.AttemptSent})
			}
			delivered += len(claims)
		}
		_, err = s.Reconcile(ctx, time.Hour, 100)
		require.NoError(t, err)
		_, err = s.PruneOlderThan(ctx, 168*time.Hour, 100)
		require.NoError(t, err)
		_, err = s.List(ctx, notify.ListFilter{Status: notify.StatusPending, Limit: 20})
		require.NoError(t, err)
	}
	if len(pending) > 0 {
		ok, err := s.RecordDeliveries(ctx, pending)
		require.NoError(t, err)
		for _, applied := range ok {
			require.True(t, applied)
		}
	}
	return delivered
}

func ids(evs []notify.Event) []int64 {
	out := make([]int64, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func createN(t *testing.T, ctx context.Context, s *Store, n int) {
	t.Helper()
	for i := range n {
		_, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
			UserID: fmt.Sprintf("young-%d", i%7), Channel: "email", To: "a@example.com", Subject: "s", Body: "b",
		}})
		require.NoError(t, err)
	}
}

// growTables bulk-inserts what a long-running deployment accumulates: sent
// notifications with their processed events, dedup rows and attempts, and a
// backlog of pending notifications whose events are still unprocessed.
func growTables(t *testing.T, ctx context.Context, conn *pgx.Conn, sent, backlog int) {
	t.Helper()
	for _, st := range []struct {
		q    string
		args []any
	}{
		{`INSERT INTO notifications (user_id, channel, recipient, subject, body, status, attempts, sent_at)
SELECT 'grown-' || (g % 1000), 'email', 'a@example.com', 's', 'b', 'sent', 1, now()
FROM generate_series(1, $1::int) AS g`, []any{sent}},
		{`INSERT INTO notifications (user_id, channel, recipient, subject, body)
SELECT 'grown-' || (g % 1000), 'email', 'a@example.com', 's', 'b'
FROM generate_series(1, $1::int) AS g`, []any{backlog}},
		// One event per grown notification, processed when it was sent.
		{`INSERT INTO outbox (event_type, payload, processed_at)
SELECT 'notification.requested', jsonb_build_object('notification_id', n.id::text, 'user_id', n.user_id,
	'channel', n.channel, 'to', n.recipient, 'subject', n.subject, 'body', n.body),
	CASE WHEN n.status = 'sent' THEN now() END
FROM notifications AS n WHERE n.user_id LIKE 'grown-%' ORDER BY n.id`, nil},
		{`INSERT INTO processed_messages (message_id, processed_at)
SELECT id, processed_at FROM outbox WHERE processed_at IS NOT NULL AND payload->>'user_id' LIKE 'grown-%'`, nil},
		{`INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome)
SELECT (o.payload->>'notification_id')::bigint, o.id, 1, now(), now(), 'sent'
FROM outbox AS o WHERE o.processed_at IS NOT NULL AND o.payload->>'user_id' LIKE 'grown-%'`, nil},
	} {
		_, err := conn.Exec(ctx, st.q, st.args...)
		require.NoError(t, err)
	}
}

// The cost of a delivery stays with its batch as the tables grow, the way a
// deployment meets it: the database starts empty, statistics are gathered
// while it is young (as autovacuum does after the first few dozen rows),
// the store's pooled connection prepares and runs every delivery statement
// many times (so PostgreSQL's plan cache settles on generic plans made for
// tiny tables), the tables then grow by hundreds of thousands of rows, with
// or without fresh statistics, and the same connection delivers more. No
// delivery statement may scan a table sequentially or read rows in
// proportion to a table or to the backlog.
func TestDeliveryCostStaysWithBatchAsTablesGrow(t *testing.T) {
	t.Parallel()
	const (
		sent        = 150_000
		backlog     = 50_000
		group       = 32
		relayLimit  = 128
		measureRuns = 640
	)
	for _, analysed := range []bool{false, true} {
		t.Run(fmt.Sprintf("analysed=%t", analysed), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
			defer cancel()
			url := testenv.PostgresURL(t)
			// One pooled connection: every statement below runs on the
			// connection that cached it, as a busy worker's do.
			s, err := Open(ctx, url, Config{MaxConns: 1})
			require.NoError(t, err)
			t.Cleanup(s.Close)
			require.NoError(t, s.Migrate(ctx))
			conn, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			t.Cleanup(func() { _ = conn.Close(context.Background()) })

			// Young: a few rows, statistics gathered, then enough batches
			// that every statement ran well over five times.
			createN(t, ctx, s, 24)
			require.Equal(t, 24, deliverAll(t, ctx, s, 8, 4, 1000))
			_, err = conn.Exec(ctx, `ANALYZE`)
			require.NoError(t, err)
			createN(t, ctx, s, 96)
			require.Equal(t, 96, deliverAll(t, ctx, s, 8, 4, 1000))
			// The rate while young, in the groups measured below.
			createN(t, ctx, s, measureRuns)
			start := time.Now()
			require.Equal(t, measureRuns, deliverAll(t, ctx, s, relayLimit, group, measureRuns))
			youngRate := float64(measureRuns) / time.Since(start).Seconds()

			growTables(t, ctx, conn, sent, backlog)
			if analysed {
				_, err = conn.Exec(ctx, `ANALYZE`)
				require.NoError(t, err)
			}

			before := readTableStats(t, ctx, s, conn)
			start = time.Now()
			delivered := deliverAll(t, ctx, s, relayLimit, group, measureRuns)
			grownRate := float64(delivered) / time.Since(start).Seconds()
			after := readTableStats(t, ctx, s, conn)
			require.Equal(t, measureRuns, delivered)

			t.Logf("delivered/s (one connection, groups of %d): young %.0f, grown to %d rows %.0f", group, youngRate, sent+backlog, grownRate)
			for _, table := range growthTables {
				b, a := before[table], after[table]
				scans, read, fetched := a.seqScans-b.seqScans, a.seqRead-b.seqRead, a.idxFetch-b.idxFetch
				t.Logf("%-18s per 1,000 deliveries: %6.0f seq scans, %9.0f rows read by them, %9.0f rows fetched by index",
					table, float64(scans)*1000/float64(delivered), float64(read)*1000/float64(delivered), float64(fetched)*1000/float64(delivered))
				assert.Zero(t, scans, "%s: sequential scans while delivering %d", table, delivered)
				// A delivery reads its own few rows (the lock, the claim,
				// the record, the relay's lease and mark): a handful each,
				// never a share of the table or of the backlog.
				assert.Less(t, read+fetched, int64(20*delivered), "%s: rows read while delivering %d", table, delivered)
			}
		})
	}
}
