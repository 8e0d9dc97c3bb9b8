package table_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/pgtest"
	"github.com/heraldhq/herald/internal/testkit/transporttest"
	"github.com/heraldhq/herald/internal/transport/table"
)

// outboxStore is what the seam suite needs from a store under the table
// transport: its queue and wake-ups, and creates to commit outbox rows with.
type outboxStore interface {
	table.Queue
	table.Waker
	Create(ctx context.Context, n notify.NewNotification) (notify.Created, error)
}

// outboxSQL reads what the store keeps no method for, in the engine's own
// SQL: the outbox row of a notification, and the rows finished as dead
// letters.
type outboxSQL struct {
	// rowOf returns the id of the outbox row of a notification.
	rowOf func(ctx context.Context, notificationID int64) (int64, error)
	// deadLetters returns the processed rows that keep a reason.
	deadLetters func(ctx context.Context) ([]transporttest.DeadLetter, error)
}

// deadLetterRows are the rows Finish closed with a reason (last_error). A row
// acknowledged after a retry keeps its retry's reason too, so it is listed
// as well; the suite allows for that.
const deadLetterRows = `
SELECT id, last_error FROM outbox
WHERE processed_at IS NOT NULL AND COALESCE(last_error, '') <> ''
ORDER BY id`

// conformanceHarness returns the seam harness of the table transport over
// s: publishing is committing notifications (one outbox row each) through
// the store.
func conformanceHarness(s outboxStore, q outboxSQL) transporttest.Harness {
	return transporttest.Harness{
		NoBrokerTime: true,
		Publish: func(t *testing.T, evs []notify.Event) []notify.Event {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			out := make([]notify.Event, len(evs))
			for i, ev := range evs {
				var r notify.Requested
				require.NoError(t, json.Unmarshal(ev.Payload, &r))
				c, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
					UserID: r.UserID, Channel: r.Channel, To: r.To, Subject: r.Subject, Body: r.Body,
				}, Traceparent: ev.Traceparent})
				require.NoError(t, err)
				id, err := q.rowOf(ctx, c.Notification.ID)
				require.NoError(t, err)
				payload, err := json.Marshal(notify.NewRequested(c.Notification))
				require.NoError(t, err)
				// The row is written with its notification, at the same
				// instant.
				out[i] = notify.Event{ID: id, Type: notify.EventRequested, Payload: payload, OccurredAt: c.Notification.CreatedAt,
					Traceparent: ev.Traceparent}
			}
			return out
		},
		NewSource: func(t *testing.T, cfg transporttest.SourceConfig) transporttest.Source {
			t.Helper()
			return newTable(t, s, cfg.Prefetch, cfg.RetryDelay, cfg.Lease)
		},
		DeadLetters: func(t *testing.T) []transporttest.DeadLetter {
			t.Helper()
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			dls, err := q.deadLetters(ctx)
			require.NoError(t, err)
			return dls
		},
	}
}

// scanDeadLetters reads the rows of deadLetterRows.
func scanDeadLetters(next func() bool, scan func(dest ...any) error, rowsErr func() error) ([]transporttest.DeadLetter, error) {
	var out []transporttest.DeadLetter
	for next() {
		var dl transporttest.DeadLetter
		if err := scan(&dl.ID, &dl.Reason); err != nil {
			return nil, err
		}
		out = append(out, dl)
	}
	return out, rowsErr()
}

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		url := pgtest.URL(t)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		s, err := postgres.Open(ctx, url, postgres.Config{MaxConns: 4})
		require.NoError(t, err)
		t.Cleanup(s.Close)
		require.NoError(t, s.Migrate(ctx))
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return conformanceHarness(s, outboxSQL{
			rowOf: func(ctx context.Context, notificationID int64) (int64, error) {
				var id int64
				err := pool.QueryRow(ctx, `SELECT id FROM outbox WHERE payload->>'notification_id' = $1`,
					notify.FormatID(notificationID)).Scan(&id)
				return id, err
			},
			deadLetters: func(ctx context.Context) ([]transporttest.DeadLetter, error) {
				rows, err := pool.Query(ctx, deadLetterRows)
				if err != nil {
					return nil, err
				}
				defer rows.Close()
				return scanDeadLetters(rows.Next, rows.Scan, rows.Err)
			},
		})
	})
}

func TestConformanceSQLite(t *testing.T) {
	t.Parallel()
	transporttest.Run(t, func(t *testing.T) transporttest.Harness {
		path := filepath.Join(t.TempDir(), "herald.db")
		s, err := sqlite.Open(t.Context(), path, sqlite.Config{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, s.Close()) })
		require.NoError(t, s.Migrate(t.Context()))
		db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(5000)")
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		return conformanceHarness(s, outboxSQL{
			rowOf: func(ctx context.Context, notificationID int64) (int64, error) {
				var id int64
				err := db.QueryRowContext(ctx, `SELECT id FROM outbox WHERE json_extract(payload, '$.notification_id') = ?`,
					notify.FormatID(notificationID)).Scan(&id)
				return id, err
			},
			deadLetters: func(ctx context.Context) ([]transporttest.DeadLetter, error) {
				rows, err := db.QueryContext(ctx, deadLetterRows)
				if err != nil {
					return nil, err
				}
				defer rows.Close()
				return scanDeadLetters(rows.Next, rows.Scan, rows.Err)
			},
		})
	})
}

// newTable is the table transport the suites ask for, over s: short polls
// for quick tests, the suite's prefetch, retry delay and lease.
func newTable(t *testing.T, s interface {
	table.Queue
	table.Waker
}, prefetch int, retryDelay, lease time.Duration) *table.Transport {
	t.Helper()
	tr, err := table.New(s, s, table.Config{
		Prefetch:     prefetch,
		RetryDelays:  []time.Duration{retryDelay},
		Lease:        lease,
		PollInterval: 50 * time.Millisecond,
		Grace:        10 * time.Second,
	})
	require.NoError(t, err)
	return tr
}
