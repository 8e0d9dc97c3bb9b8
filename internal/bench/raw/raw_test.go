package raw_test

import (
	"context"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/bench/provider"
	"github.com/heraldhq/herald/internal/bench/raw"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// scratchPostgres makes a migrated scratch database and drops it when the
// test ends.
func scratchPostgres(t testing.TB) string {
	t.Helper()
	admin := testenv.Require(t, testenv.PostgresVar)
	dbURL, drop, err := raw.ScratchPostgres(t.Context(), admin)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, drop()) })
	s, err := postgres.Open(t.Context(), dbURL, postgres.Config{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(t.Context()))
	return dbURL
}

func TestScratchPostgresIsDropped(t *testing.T) {
	t.Parallel()
	admin := testenv.Require(t, testenv.PostgresVar)
	ctx := t.Context()
	dbURL, drop, err := raw.ScratchPostgres(ctx, admin)
	require.NoError(t, err)
	require.True(t, raw.IsScratch(dbURL))
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	name := strings.TrimPrefix(u.Path, "/")

	// A connection left open does not keep the database alive.
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	require.NoError(t, drop())

	admConn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer admConn.Close(ctx)
	var n int
	require.NoError(t, admConn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n))
	require.Zero(t, n)
}

func TestPostgresTx(t *testing.T) {
	t.Parallel()
	dbURL := scratchPostgres(t)
	for _, notify := range []bool{false, true} {
		rate, err := raw.PostgresTx(t.Context(), dbURL, raw.TxOptions{N: 100, Clients: 4, Notify: notify})
		require.NoError(t, err)
		require.Greater(t, rate, 0.0)
	}
	// The scratch tables are gone, herald's own are untouched.
	conn, err := pgx.Connect(t.Context(), dbURL)
	require.NoError(t, err)
	defer conn.Close(t.Context())
	var tables []string
	rows, err := conn.Query(t.Context(), `SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1`)
	require.NoError(t, err)
	tables, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, tables, "outbox")
	var schemas int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = 'bench_raw'`).Scan(&schemas))
	require.Zero(t, schemas, "the scratch schema is dropped")
	var outbox int
	require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM outbox`).Scan(&outbox))
	require.Zero(t, outbox)
}

func TestPostgresTxRefusesNonScratchDatabase(t *testing.T) {
	t.Parallel()
	_, err := raw.PostgresTx(t.Context(), "postgres://postgres@127.0.0.1:5432/herald?sslmode=disable", raw.TxOptions{N: 1, Clients: 1})
	require.ErrorContains(t, err, "scratch")
}

func TestSQLiteTx(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.Migrate(t.Context()))
	rate, err := raw.SQLiteTx(t.Context(), path, raw.TxOptions{N: 200, Clients: 4})
	require.NoError(t, err)
	require.Greater(t, rate, 0.0)
	st, err := s.OutboxStats(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.Unprocessed, "the raw ceiling writes its own tables only")
	files, err := filepath.Glob(filepath.Join(filepath.Dir(path), "*"))
	require.NoError(t, err)
	for _, f := range files {
		require.True(t, strings.HasPrefix(filepath.Base(f), "herald.db"), "left behind: %s", f)
	}
}

// BenchmarkPostgresTx measures the bare create transaction from 16 clients,
// with and without the store's pg_notify: the difference is what waking the
// relays at commit costs.
func BenchmarkPostgresTx(b *testing.B) {
	dbURL := scratchPostgres(b)
	for _, tc := range []struct {
		name   string
		notify bool
	}{{"bare", false}, {"notify", true}} {
		b.Run(tc.name, func(b *testing.B) {
			rate, err := raw.PostgresTx(b.Context(), dbURL, raw.TxOptions{N: max(b.N, 16), Clients: 16, Notify: tc.notify})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rate, "tx/s")
		})
	}
}

// A preload writes a delivered history: every notification sent, its event
// processed, its dedup row and its one attempt, within retention; a second
// preload adds to the first.
func TestPreloadPostgres(t *testing.T) {
	t.Parallel()
	dbURL := scratchPostgres(t)
	ctx := t.Context()
	require.NoError(t, raw.PreloadPostgres(ctx, dbURL, 100))
	require.NoError(t, raw.PreloadPostgres(ctx, dbURL, 50))
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	for q, want := range map[string]int{
		`SELECT count(*) FROM notifications WHERE status = 'sent' AND sent_at > now() - interval '7 days'`: 150,
		`SELECT count(*) FROM notifications`: 150,
		`SELECT count(*) FROM outbox o JOIN notifications n ON n.id = (o.payload->>'notification_id')::bigint
			WHERE o.processed_at IS NOT NULL`: 150,
		`SELECT count(*) FROM outbox`: 150,
		`SELECT count(*) FROM processed_messages pm JOIN outbox o ON o.id = pm.message_id`:                     150,
		`SELECT count(*) FROM delivery_attempts a JOIN outbox o ON o.id = a.message_id AND a.outcome = 'sent'`: 150,
	} {
		var got int
		require.NoError(t, conn.QueryRow(ctx, q).Scan(&got))
		require.Equal(t, want, got, q)
	}
	// With no other connection open, the count is there at once.
	conn.Close(ctx)
	scans, err := raw.SeqScans(ctx, dbURL)
	require.NoError(t, err)
	require.Len(t, scans, 4, "one count per herald table: %v", scans)
}

func TestPreloadPostgresRefusesNonScratchDatabase(t *testing.T) {
	t.Parallel()
	err := raw.PreloadPostgres(t.Context(), "postgres://postgres@127.0.0.1:5432/herald?sslmode=disable", 1)
	require.ErrorContains(t, err, "not made by the bench")
}

// The raw POST ceiling posts N bodies to the receiver, and fails on an
// answer other than 2xx.
func TestPOST(t *testing.T) {
	t.Parallel()
	rcv, err := provider.New(provider.Config{Latency: 5 * time.Millisecond})
	require.NoError(t, err)
	defer rcv.Close()
	var bodies atomic.Int64
	rate, err := raw.POST(t.Context(), raw.POSTOptions{URL: rcv.RawURL(), N: 40, Clients: 4, Body: func(i int) []byte {
		bodies.Add(1)
		return bench.WebhookBody(i)
	}})
	require.NoError(t, err)
	require.Positive(t, rate)
	// 4 at once, 5 ms each: at most 800/s.
	require.Less(t, rate, 800.0)
	require.EqualValues(t, 4+40, bodies.Load(), "the connections' warm-up, then N")

	_, err = raw.POST(t.Context(), raw.POSTOptions{URL: rcv.WebhookURL(), N: 4, Clients: 2, Body: bench.WebhookBody})
	require.ErrorContains(t, err, "status 404", "a receiver without a secret takes no webhooks")
}

// The raw insert ceilings write in groups of Batch (the last one shorter)
// to scratch tables they remove, and leave herald's own untouched.
func TestInsertCeilings(t *testing.T) {
	t.Parallel()
	o := raw.InsertOptions{N: 250, Batch: 100, Clients: 2}
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dbURL := scratchPostgres(t)
		rate, err := raw.PostgresInsert(t.Context(), dbURL, o)
		require.NoError(t, err)
		require.Greater(t, rate, 0.0)
		conn, err := pgx.Connect(t.Context(), dbURL)
		require.NoError(t, err)
		defer conn.Close(t.Context())
		var schemas int
		require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_namespace WHERE nspname = 'bench_raw'`).Scan(&schemas))
		require.Zero(t, schemas, "the scratch schema is dropped")
		_, err = raw.PostgresInsert(t.Context(), "postgres://postgres@127.0.0.1:5432/herald?sslmode=disable", o)
		require.ErrorContains(t, err, "scratch")
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "herald.db")
		rate, err := raw.SQLiteInsert(t.Context(), path, o)
		require.NoError(t, err)
		require.Greater(t, rate, 0.0)
		files, err := filepath.Glob(filepath.Join(filepath.Dir(path), "*"))
		require.NoError(t, err)
		require.Empty(t, files, "the scratch file is removed")
	})
	_, err := raw.SQLiteInsert(t.Context(), filepath.Join(t.TempDir(), "x.db"), raw.InsertOptions{N: 1, Batch: 0, Clients: 1})
	require.Error(t, err, "a batch of 0")
}
