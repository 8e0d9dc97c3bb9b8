package table_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the raw connection that rewinds outbox rows

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/pipelinetest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
	"github.com/heraldhq/herald/internal/transport/table"
	"github.com/heraldhq/herald/internal/worker"
)

var (
	_ worker.Source      = (*table.Transport)(nil)
	_ pipelinetest.Store = (*postgres.Store)(nil)
	_ pipelinetest.Store = (*sqlite.Store)(nil)
	_ table.Queue        = (*postgres.Store)(nil)
	_ table.Queue        = (*sqlite.Store)(nil)
	_ table.Waker        = (*postgres.Store)(nil)
	_ table.Waker        = (*sqlite.Store)(nil)
)

// queueStore is a store the table transport runs on.
type queueStore interface {
	pipelinetest.Store
	table.Queue
	table.Waker
}

// pipelineHarness builds the table transport's end-to-end harness over s;
// rewind marks the notification.requested outbox row of a notification
// (not its status event) unprocessed and unleased
// again, in the engine's own SQL, and reports how many rows it changed.
func pipelineHarness(s queueStore, rewind func(ctx context.Context, notificationID int64) (int64, error)) pipelinetest.Harness {
	return pipelinetest.Harness{
		Store: s,
		NewSource: func(t *testing.T, cfg pipelinetest.SourceConfig) worker.Source {
			t.Helper()
			return newTable(t, s, cfg.Prefetch, cfg.RetryDelay, cfg.Lease)
		},
		// Workers claim committed rows straight from the outbox.
		Pump: func(*testing.T, context.Context) {},
		Redeliver: func(t *testing.T, notificationID int64) {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			n, err := rewind(ctx, notificationID)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "outbox rows of notification %d", notificationID)
		},
	}
}

func TestPipelinePostgres(t *testing.T) {
	t.Parallel()
	pipelinetest.Run(t, postgresHarness)
}

func TestPipelineIsolationPostgres(t *testing.T) {
	pipelinetest.RunIsolation(t, postgresHarness)
}

// TestPipelinePgBouncer runs the suite with the store behind PgBouncer in
// transaction mode (issue 36), told the direct URL, on which it listens.
func TestPipelinePgBouncer(t *testing.T) {
	t.Parallel()
	pipelinetest.Run(t, func(t *testing.T) pipelinetest.Harness { return postgresHarnessOn(t, true) })
}

// postgresHarness is the harness on a fresh PostgreSQL database.
func postgresHarness(t *testing.T) pipelinetest.Harness {
	return postgresHarnessOn(t, false)
}

// postgresHarnessOn is postgresHarness, with the store through the tests'
// PgBouncer when pooled.
func postgresHarnessOn(t *testing.T, pooled bool) pipelinetest.Harness {
	url := pgtest.URL(t)
	storeURL, cfg := url, postgres.Config{MaxConns: 4}
	if pooled {
		storeURL, cfg.DirectURL = testenv.PgBouncerURL(t, url), url
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, storeURL, cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.Migrate(ctx))
	return pipelineHarness(s, func(ctx context.Context, notificationID int64) (int64, error) {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return 0, err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		// Due now: the claim moved available_at to its lease's end.
		tag, err := conn.Exec(ctx, `
UPDATE outbox SET processed_at = NULL, locked_by = NULL, locked_until = NULL, available_at = now()
WHERE payload->>'notification_id' = $1 AND event_type = 'notification.requested'`, notify.FormatID(notificationID))
		return tag.RowsAffected(), err
	})
}

func TestPipelineSQLite(t *testing.T) {
	t.Parallel()
	pipelinetest.Run(t, sqliteHarness)
}

func TestPipelineIsolationSQLite(t *testing.T) {
	pipelinetest.RunIsolation(t, sqliteHarness)
}

// sqliteHarness is the harness on a fresh SQLite database.
func sqliteHarness(t *testing.T) pipelinetest.Harness {
	path := filepath.Join(t.TempDir(), "herald.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(t.Context()))
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return pipelineHarness(s, func(ctx context.Context, notificationID int64) (int64, error) {
		res, err := db.ExecContext(ctx, `
UPDATE outbox SET processed_at = NULL, locked_by = NULL, locked_until = NULL, available_at = ?
WHERE json_extract(payload, '$.notification_id') = ? AND event_type = 'notification.requested'`,
			time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"), notify.FormatID(notificationID))
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	})
}

// Issue 34, point 5, on the embedded default (SQLite and the table
// transport) and on PostgreSQL: high notifications wait behind no bulk
// backlog.
func TestPipelinePrioritySQLite(t *testing.T) {
	t.Parallel()
	pipelinetest.RunPriority(t, sqliteHarness)
}

func TestPipelinePriorityPostgres(t *testing.T) {
	t.Parallel()
	pipelinetest.RunPriority(t, postgresHarness)
}
