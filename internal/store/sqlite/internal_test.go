package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "herald.db"), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// Every connection, in both pools, carries the settings: the pools open
// connections on their own, so a setting applied once by hand would be lost.
func TestConnectionSettings(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	for name, db := range map[string]*sql.DB{"write": s.write, "read": s.read} {
		// Hold several read connections at once so that fresh ones are
		// checked too, not only the one Open pinged.
		conns := 1
		if name == "read" {
			conns = 3
		}
		var held []*sql.Conn
		for range conns {
			c, err := db.Conn(t.Context())
			require.NoError(t, err)
			held = append(held, c)
		}
		for _, c := range held {
			get := func(p string) string {
				var v string
				require.NoError(t, c.QueryRowContext(t.Context(), "PRAGMA "+p).Scan(&v))
				return v
			}
			require.Equal(t, "wal", get("journal_mode"), name)
			require.Equal(t, "5000", get("busy_timeout"), name)
			require.Equal(t, "1", get("foreign_keys"), name)
			require.Equal(t, "1", get("synchronous"), name+": NORMAL between creates")
			wantQueryOnly := "0"
			if name == "read" {
				wantQueryOnly = "1"
			}
			require.Equal(t, wantQueryOnly, get("query_only"), name)
		}
		for _, c := range held {
			require.NoError(t, c.Close())
		}
	}
	require.Equal(t, 1, s.write.Stats().MaxOpenConnections, "one writer")
}

// A write transaction takes the write lock at BEGIN (BEGIN IMMEDIATE), not
// at its first write: another writer is refused while it is merely open.
func TestWriteTransactionsBeginImmediate(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	require.NoError(t, s.Migrate(t.Context()))

	tx, err := s.write.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()

	// A second writer on the file that does not wait for the lock.
	other, err := Open(t.Context(), dbPath(t, s), Config{BusyTimeout: time.Millisecond})
	require.NoError(t, err)
	defer other.Close()
	_, err = other.Create(t.Context(), notify.NewNotification{Request: validRequest()})
	require.ErrorIs(t, err, notify.ErrUnavailable, "the open transaction must hold the write lock")

	require.NoError(t, tx.Rollback())
	_, err = other.Create(t.Context(), notify.NewNotification{Request: validRequest()})
	require.NoError(t, err)
}

// dbPath returns the file the store was opened on.
func dbPath(t *testing.T, s *Store) string {
	t.Helper()
	var seq int
	var name, file string
	require.NoError(t, s.read.QueryRowContext(t.Context(), "PRAGMA database_list").Scan(&seq, &name, &file))
	return file
}

func TestReadPoolCannotWrite(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	require.NoError(t, s.Migrate(t.Context()))
	_, err := s.read.ExecContext(t.Context(), `DELETE FROM outbox`)
	require.Error(t, err)
	require.Contains(t, err.Error(), "readonly")
}

func TestClassify(t *testing.T) {
	t.Parallel()
	plain := errors.New("plain")
	require.Equal(t, plain, classify(plain))
	require.NoError(t, classify(nil))
}

func TestTimeFormatSortsAsTime(t *testing.T) {
	t.Parallel()
	base := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	times := []time.Time{
		base,
		base.Add(time.Microsecond),
		base.Add(999 * time.Millisecond),
		base.Add(time.Second),
		base.Add(10 * time.Hour),
		base.AddDate(1, 0, 0),
	}
	for i := 1; i < len(times); i++ {
		a, b := formatTime(times[i-1]), formatTime(times[i])
		require.Len(t, a, len(timeLayout))
		require.Less(t, a, b)
	}
	// A time in another zone is stored as UTC and reads back equal.
	local := base.In(time.FixedZone("X", 5*3600))
	back, err := parseTime(formatTime(local))
	require.NoError(t, err)
	require.True(t, back.Equal(local))
	require.Equal(t, time.UTC, back.Location())
}

func validRequest() notify.CreateRequest {
	return notify.CreateRequest{
		UserID: "u", Channel: notify.ChannelEmail, To: "a@example.com", Subject: "s", Body: "b",
	}
}

// A worker shutting down while the mail is being handed over: the server took
// it, so the store must record it although the context has ended, or the
// redelivery would send it twice.
func TestDeliverRecordsAfterContextEnds(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	require.NoError(t, s.Migrate(t.Context()))
	c, err := s.Create(t.Context(), notify.NewNotification{Request: validRequest()})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	out, err := deliverytest.Deliver(ctx, s, 1, c.Notification.ID, func(context.Context) error {
		cancel() // the shutdown arrives while the server is accepting
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	got, err := s.Get(t.Context(), c.Notification.ID)
	require.NoError(t, err)
	require.Equal(t, notify.StatusSent, got.Status)
	require.Equal(t, 1, countRows(t, s, "processed_messages"))

	// With ctx over before the claim, nothing is sent nor recorded.
	c2, err := s.Create(t.Context(), notify.NewNotification{Request: validRequest()})
	require.NoError(t, err)
	_, err = deliverytest.Deliver(ctx, s, 2, c2.Notification.ID, func(context.Context) error {
		t.Error("send called with an ended context")
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1, countRows(t, s, "processed_messages"))
}

// Likewise a relay stopping while the broker confirms: the confirmed rows
// are marked. And no write transaction is open while publish runs: a
// broker that hangs must not hold the writer every create needs.
func TestRelayBatchMarksAfterContextEnds(t *testing.T) {
	t.Parallel()
	s := openTemp(t)
	require.NoError(t, s.Migrate(t.Context()))
	for range 2 {
		_, err := s.Create(t.Context(), notify.NewNotification{Request: validRequest()})
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	n, err := relay.Batch(ctx, s, 10, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		cancel()
		require.Zero(t, s.write.Stats().InUse, "a write connection is held across publish")
		return []int64{evs[0].ID}, nil
	})

	require.NoError(t, err)
	require.Equal(t, 2, n)
	st, err := s.OutboxStats(t.Context())
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Unprocessed)
}

func countRows(t *testing.T, s *Store, table string) int {
	t.Helper()
	var n int
	require.NoError(t, s.read.QueryRowContext(t.Context(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}
