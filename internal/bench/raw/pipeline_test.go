package raw_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/bench/raw"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/store/mongo"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// Compile-time checks: every store engine serves every step of the
// pipeline (herald bench measures the ceiling on the one configured).
var (
	_ raw.PipelineStore = (*postgres.Store)(nil)
	_ raw.PipelineStore = (*sqlite.Store)(nil)
	_ raw.PipelineStore = (*mongo.Store)(nil)
)

// pipelineCase runs the ceiling on a store and checks that every
// notification it created went all the way: sent, its outbox row
// processed.
func pipelineCase(t *testing.T, s raw.PipelineStore, stats func() notify.OutboxStats, sent func() int) {
	for _, viaRelay := range []bool{false, true} {
		rate, err := raw.Pipeline(t.Context(), s, raw.PipelineOptions{N: 40, Clients: 4, Relay: viaRelay})
		require.NoError(t, err)
		require.Greater(t, rate, 0.0)
	}
	// Two runs of 40, each after 4 not counted.
	require.Equal(t, 88, sent())
	// Each delivery wrote its notification.sent event, for a status relay.
	statuses, err := relay.Batch(t.Context(), s, 1000, notify.StatusEventTypes, relay.ConfirmAll{}.Publish)
	require.NoError(t, err)
	require.Equal(t, 88, statuses)
	require.Zero(t, stats().Unprocessed)
}

func TestPipelineSQLite(t *testing.T) {
	t.Parallel()
	s, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), sqlite.Config{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(t.Context()))
	pipelineCase(t, s, func() notify.OutboxStats {
		st, err := s.OutboxStats(t.Context())
		require.NoError(t, err)
		return st
	}, func() int {
		page, err := s.List(t.Context(), notify.ListFilter{Status: notify.StatusSent, Limit: 100})
		require.NoError(t, err)
		return len(page.Items)
	})
}

func TestPipelinePostgres(t *testing.T) {
	t.Parallel()
	dbURL := scratchPostgres(t)
	schemaURL, drop, err := raw.ScratchSchema(t.Context(), dbURL, "bench_raw_pipeline")
	require.NoError(t, err)
	s, err := postgres.Open(t.Context(), schemaURL, postgres.Config{MaxConns: 4})
	require.NoError(t, err)
	require.NoError(t, s.Migrate(t.Context()))
	pipelineCase(t, s, func() notify.OutboxStats {
		st, err := s.OutboxStats(t.Context())
		require.NoError(t, err)
		return st
	}, func() int {
		var n int
		conn, err := pgx.Connect(t.Context(), schemaURL)
		require.NoError(t, err)
		defer conn.Close(t.Context())
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM notifications WHERE status = 'sent'`).Scan(&n))
		return n
	})
	s.Close()
	// The scratch schema goes; herald's own tables never held a row.
	require.NoError(t, drop())
	conn, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var schemas, rows int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = 'bench_raw_pipeline'`).Scan(&schemas))
	require.Zero(t, schemas)
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM notifications`).Scan(&rows))
	require.Zero(t, rows)
}

// WatchActivity counts exactly what the store wrote once its connections
// have closed: two rows (the notification and its outbox row) and at least
// one commit per create.
func TestWatchActivity(t *testing.T) {
	t.Parallel()
	dbURL := scratchPostgres(t)
	stop, err := raw.WatchActivity(t.Context(), dbURL)
	require.NoError(t, err)
	s, err := postgres.Open(t.Context(), dbURL, postgres.Config{MaxConns: 2})
	require.NoError(t, err)
	for i := range 5 {
		_, err := s.Create(t.Context(), notify.NewNotification{Request: notify.CreateRequest{
			UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: string(rune('a' + i)),
		}})
		require.NoError(t, err)
	}
	s.Close()
	a, err := stop(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 10, a.Rows, "%+v", a)
	require.Equal(t, map[string]int64{"notifications": 5, "outbox": 5}, a.RowsByTable)
	require.GreaterOrEqual(t, a.Commits, int64(5))
	require.Greater(t, a.WALBytes, int64(0))
	_, err = raw.WatchActivity(context.Background(), "postgres://postgres@127.0.0.1:5432/herald?sslmode=disable")
	require.ErrorContains(t, err, "not made by the bench")
}
