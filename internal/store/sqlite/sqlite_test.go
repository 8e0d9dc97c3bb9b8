package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/storetest"
)

// The engine implements the whole store contract.
var _ storetest.Store = (*sqlite.Store)(nil)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness { return harness(t, sqlite.Config{}) })
}

// harness is the conformance suite's Harness on a fresh file, with a store
// opened with cfg.
func harness(t *testing.T, cfg sqlite.Config) storetest.Harness {
	t.Helper()
	s, path := setupConfig(t, cfg)
	return storetest.Harness{Store: s, Count: counter(t, path), SingleWriter: true, AddAttempt: attempter(t, path), Attempts: attempts(t, path),
		Backdate: backdater(t, path),
		NoStatusEvents: func(t *testing.T) storetest.Harness {
			cfg := cfg
			cfg.NoStatusEvents = true
			return harness(t, cfg)
		}}
}

// A settling record wakes the relays when it wrote a status event, and
// only then.
func TestSettleWakesOnlyForStatusEvents(t *testing.T) {
	for _, cfg := range []sqlite.Config{{}, {NoStatusEvents: true}} {
		s, _ := setupConfig(t, cfg)
		require.Equal(t, !cfg.NoStatusEvents, storetest.SettleWakes(t, s), "%+v", cfg)
	}
}

// backdater moves a notification's created_at back, for the harness. The
// column holds fixed-width UTC text.
func backdater(t testing.TB, path string) func(testing.TB, int64, time.Duration) {
	db := raw(t, path)
	return func(t testing.TB, nid int64, d time.Duration) {
		t.Helper()
		var at string
		require.NoError(t, db.QueryRow(`SELECT created_at FROM notifications WHERE id = ?`, nid).Scan(&at))
		ts, err := time.Parse(time.RFC3339Nano, at)
		require.NoError(t, err)
		_, err = db.Exec(`UPDATE notifications SET created_at = ? WHERE id = ?`, ts.Add(-d).UTC().Format(timeLayout), nid)
		require.NoError(t, err)
	}
}

// setup opens a migrated store on a fresh file, closed when the test ends.
func setup(t testing.TB) (*sqlite.Store, string) {
	t.Helper()
	return setupConfig(t, sqlite.Config{})
}

// setupConfig is setup with cfg.
func setupConfig(t testing.TB, cfg sqlite.Config) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "herald.db")
	s := open(t, path, cfg)
	require.NoError(t, s.Migrate(t.Context()))
	return s, path
}

// open opens a store on path, closed when the test ends.
func open(t testing.TB, path string, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// raw opens a plain connection pool on the file, as the sqlite3 shell would,
// to look at rows independently of the store.
func raw(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// attempts returns a reader of a notification's delivery_attempts rows, in
// id order, for the harness.
func attempts(t testing.TB, path string) func(testing.TB, int64) []notify.Attempt {
	db := raw(t, path)
	return func(t testing.TB, nid int64) []notify.Attempt {
		t.Helper()
		rows, err := db.QueryContext(context.Background(), `SELECT attempt, message_id, started_at, finished_at,
	COALESCE(outcome, ''), COALESCE(error, '') FROM delivery_attempts WHERE notification_id = ? ORDER BY id`, nid)
		require.NoError(t, err)
		defer rows.Close()
		var out []notify.Attempt
		for rows.Next() {
			var (
				a        notify.Attempt
				started  string
				finished sql.NullString
			)
			require.NoError(t, rows.Scan(&a.Attempt, &a.MessageID, &started, &finished, &a.Outcome, &a.Error))
			a.StartedAt, err = time.Parse(timeLayout, started)
			require.NoError(t, err)
			if finished.Valid {
				f, err := time.Parse(timeLayout, finished.String)
				require.NoError(t, err)
				a.FinishedAt = &f
			}
			out = append(out, a)
		}
		require.NoError(t, rows.Err())
		return out
	}
}

// timeLayout is the store's timestamp text.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// counter returns a row counter for the harness.
func counter(t testing.TB, path string) func(testing.TB, string) int {
	db := raw(t, path)
	return func(t testing.TB, table string) int {
		t.Helper()
		switch table {
		case "notifications", "outbox", "processed_messages", "delivery_attempts":
		default:
			t.Fatalf("count: unknown table %q", table)
		}
		var n int
		require.NoError(t, db.QueryRowContext(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
		return n
	}
}

// attempter writes delivery_attempts rows on the file for the conformance
// suite, in the store's time format (fixed-width UTC text).
func attempter(t testing.TB, path string) func(testing.TB, int64, notify.Attempt) {
	db := raw(t, path)
	const layout = "2006-01-02T15:04:05.000000Z"
	return func(t testing.TB, notificationID int64, a notify.Attempt) {
		t.Helper()
		var finished any
		if a.FinishedAt != nil {
			finished = a.FinishedAt.UTC().Format(layout)
		}
		_, err := db.ExecContext(context.Background(), `INSERT INTO delivery_attempts
			(notification_id, message_id, attempt, started_at, finished_at, outcome, error)
			VALUES (?, ?, ?, ?, ?, NULLIF(?, ''), NULLIF(?, ''))`,
			notificationID, a.MessageID, a.Attempt, a.StartedAt.UTC().Format(layout), finished, a.Outcome, a.Error)
		require.NoError(t, err)
	}
}
