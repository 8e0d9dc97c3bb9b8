package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/store/sqlite"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
)

func request(i int) notify.CreateRequest {
	return notify.CreateRequest{
		UserID:  fmt.Sprintf("user-%d", i),
		Channel: notify.ChannelEmail,
		To:      "someone@example.com",
		Subject: fmt.Sprintf("Hello %d", i),
		Body:    "Body",
	}
}

func TestOpenRejects(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		path string
		cfg  sqlite.Config
	}{
		"empty path":        {"", sqlite.Config{}},
		"memory":            {":memory:", sqlite.Config{}},
		"uri":               {"file:" + filepath.Join(dir, "a.db"), sqlite.Config{}},
		"question mark":     {filepath.Join(dir, "a?.db"), sqlite.Config{}},
		"negative timeout":  {filepath.Join(dir, "b.db"), sqlite.Config{BusyTimeout: -time.Second}},
		"no read conns":     {filepath.Join(dir, "c.db"), sqlite.Config{ReadConns: -1}},
		"missing directory": {filepath.Join(dir, "nope", "d.db"), sqlite.Config{}},
	} {
		s, err := sqlite.Open(t.Context(), tc.path, tc.cfg)
		require.Error(t, err, name)
		require.Nil(t, s, name)
	}
}

// Migrate on an empty file builds the schema the PostgreSQL store mirrors,
// records it, and changes nothing when run again.
func TestMigrateSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	s := open(t, path, sqlite.Config{})
	ctx := t.Context()

	// Before Migrate, Ping works (the file is there) but the tables are not.
	require.NoError(t, s.Ping(ctx))
	_, err := s.Get(ctx, 1)
	require.Error(t, err)
	require.NotErrorIs(t, err, notify.ErrNotFound)

	require.NoError(t, s.Migrate(ctx))
	db := raw(t, path)
	schema := func() map[string]string {
		rows, err := db.QueryContext(ctx, `SELECT name, coalesce(sql, '') FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' ORDER BY name`)
		require.NoError(t, err)
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var name, sql string
			require.NoError(t, rows.Scan(&name, &sql))
			out[name] = sql
		}
		require.NoError(t, rows.Err())
		return out
	}
	first := schema()
	for _, name := range []string{"notifications", "outbox", "processed_messages", "schema_migrations", "outbox_unprocessed_idx",
		"notifications_failed_idx", "outbox_processed_idx", "processed_messages_processed_idx"} {
		require.Contains(t, first, name)
	}
	require.Regexp(t, `(?i)ON outbox \(id\) WHERE processed_at IS NULL`, first["outbox_unprocessed_idx"])

	columns := func(table string) []string {
		rows, err := db.QueryContext(ctx, `SELECT name FROM pragma_table_info(?) ORDER BY cid`, table)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var c string
			require.NoError(t, rows.Scan(&c))
			out = append(out, c)
		}
		return out
	}
	require.Equal(t, []string{"id", "user_id", "channel", "recipient", "subject", "body", "status", "attempts",
		"last_error", "idempotency_key", "created_at", "updated_at", "sent_at", "failed_at",
		"claim_attempt_id", "claimed_until", "retry_due_at", "destination",
		"send_at", "expires_at", "canceled_at", "expired_at", "priority",
		"html", "template", "template_version", "locale", "request_digest", "category", "unsubscribe_url", "fallback", "fallback_of", "fallback_next"}, columns("notifications"))
	require.Equal(t, []string{"id", "event_type", "payload", "occurred_at", "processed_at", "attempts",
		"available_at", "locked_until", "locked_by", "last_error", "traceparent", "priority"}, columns("outbox"))
	require.Equal(t, []string{"message_id", "processed_at", "lease_until", "attempt_id", "next_retry_count"}, columns("processed_messages"))

	// The status check holds even against a hand-written row.
	_, err = db.ExecContext(ctx, `INSERT INTO notifications (user_id, channel, recipient, subject, body, status, created_at, updated_at)
		VALUES ('u', 'email', 'a@b.c', 's', 'b', 'lost', 'x', 'x')`)
	require.Error(t, err)

	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, first, schema())
	var versions int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&versions))
	require.Equal(t, migrationFiles(t), versions)
}

// Two processes migrating the same new file at once: both succeed, each
// migration is applied once.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "herald.db")
	a := open(t, path, sqlite.Config{})
	b := open(t, path, sqlite.Config{})
	var g errgroup.Group
	g.Go(func() error { return a.Migrate(t.Context()) })
	g.Go(func() error { return b.Migrate(t.Context()) })
	require.NoError(t, g.Wait())
	var versions int
	require.NoError(t, raw(t, path).QueryRowContext(t.Context(), `SELECT count(*) FROM schema_migrations`).Scan(&versions))
	require.Equal(t, migrationFiles(t), versions)
}

// Timestamps are stored as fixed-width UTC text, and read back as the
// values Create returned.
func TestTimestampsStored(t *testing.T) {
	t.Parallel()
	s, path := setup(t)
	ctx := t.Context()
	c, err := s.Create(ctx, notify.NewNotification{Request: request(1)})
	require.NoError(t, err)
	require.Equal(t, time.UTC, c.Notification.CreatedAt.Location())

	db := raw(t, path)
	var created, updated, occurred, available string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT created_at, updated_at FROM notifications`).Scan(&created, &updated))
	require.NoError(t, db.QueryRowContext(ctx, `SELECT occurred_at, available_at FROM outbox`).Scan(&occurred, &available))
	format := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)
	for _, v := range []string{created, updated, occurred, available} {
		require.Regexp(t, format, v)
	}

	got, err := s.Get(ctx, c.Notification.ID)
	require.NoError(t, err)
	require.Equal(t, c.Notification, got, "Create returns exactly what Get reads back")
}

// send's error comes back as is: the worker branches on its type.
func TestDeliverReturnsSendErrorAsIs(t *testing.T) {
	t.Parallel()
	s, _ := setup(t)
	ctx := t.Context()
	c, err := s.Create(ctx, notify.NewNotification{Request: request(1)})
	require.NoError(t, err)
	sendErr := &smtpError{code: 421}
	_, err = deliverytest.Deliver(ctx, s, 1, c.Notification.ID, func(context.Context) error { return sendErr })
	var got *smtpError
	require.ErrorAs(t, err, &got)
	require.Same(t, sendErr, got)
	require.False(t, notify.IsPermanent(err))
}

type smtpError struct{ code int }

func (e *smtpError) Error() string { return fmt.Sprintf("smtp %d", e.code) }

// A store whose write lock stays taken past the busy timeout answers
// "unavailable", which the API turns into 503 rather than 500.
func TestBusyIsUnavailable(t *testing.T) {
	t.Parallel()
	s, path := setup(t)
	ctx := t.Context()
	other := open(t, path, sqlite.Config{BusyTimeout: 50 * time.Millisecond})
	c, err := s.Create(ctx, notify.NewNotification{Request: request(1)})
	require.NoError(t, err)

	// Another process holds the write lock.
	conn, err := raw(t, path).Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `BEGIN IMMEDIATE`)
	require.NoError(t, err)
	_, err = other.Create(ctx, notify.NewNotification{Request: request(2)})
	require.ErrorIs(t, err, notify.ErrUnavailable)
	// Readers are not blocked by the writer (WAL).
	got, err := other.Get(ctx, c.Notification.ID)
	require.NoError(t, err)
	require.Equal(t, notify.StatusPending, got.Status)
	require.NoError(t, other.Ping(ctx))
	_, err = conn.ExecContext(ctx, `ROLLBACK`)
	require.NoError(t, err)
	_, err = other.Create(ctx, notify.NewNotification{Request: request(3)})
	require.NoError(t, err)
}

// A send in flight holds no write lock: creates on the same store, and on
// another store on the same file, go through while it runs.
func TestSendHoldsNoWriteLock(t *testing.T) {
	t.Parallel()
	s, path := setup(t)
	ctx := t.Context()
	other := open(t, path, sqlite.Config{BusyTimeout: 50 * time.Millisecond})
	c, err := s.Create(ctx, notify.NewNotification{Request: request(1)})
	require.NoError(t, err)
	release := make(chan struct{})
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := deliverytest.Deliver(ctx, s, 1, c.Notification.ID, func(context.Context) error {
			close(held)
			<-release
			return nil
		})
		done <- err
	}()
	<-held
	_, err = s.Create(ctx, notify.NewNotification{Request: request(2)})
	require.NoError(t, err)
	_, err = other.Create(ctx, notify.NewNotification{Request: request(3)})
	require.NoError(t, err, "the other process waited for a lock the send held")
	close(release)
	require.NoError(t, <-done)
	got, err := s.Get(ctx, c.Notification.ID)
	require.NoError(t, err)
	require.Equal(t, notify.StatusSent, got.Status)
}

// Two stores on one file, as herald api and herald worker are two processes
// on it: creates on one and claims on the other run side by side without
// "database is locked", and every created row is claimed exactly once.
func TestTwoStoresOneFile(t *testing.T) {
	t.Parallel()
	apiStore, path := setup(t)
	workerStore := open(t, path, sqlite.Config{})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	const creators, perCreator = 4, 50
	const total = creators * perCreator
	var created atomic.Int64
	var mu sync.Mutex
	claimed := map[int64]int{}

	g, gctx := errgroup.WithContext(ctx)
	for c := range creators {
		g.Go(func() error {
			for i := range perCreator {
				n, err := apiStore.Create(gctx, notify.NewNotification{
					Request:        request(c*perCreator + i),
					IdempotencyKey: fmt.Sprintf("key-%d-%d", c, i),
				})
				if err != nil {
					return fmt.Errorf("create: %w", err)
				}
				if _, err := workerStore.Get(gctx, n.Notification.ID); err != nil {
					return fmt.Errorf("get from the other store: %w", err)
				}
				created.Add(1)
			}
			return nil
		})
	}
	for w := range 2 {
		token := fmt.Sprintf("worker-%d", w)
		g.Go(func() error {
			for {
				msgs, err := workerStore.Claim(gctx, token, 10, time.Minute)
				if err != nil {
					return fmt.Errorf("claim: %w", err)
				}
				for _, m := range msgs {
					_, nid, err := m.Decode()
					if err != nil {
						return err
					}
					if _, err := deliverytest.Deliver(gctx, workerStore, m.ID, nid, func(context.Context) error { return nil }); err != nil {
						return fmt.Errorf("deliver: %w", err)
					}
					if err := workerStore.Finish(gctx, []notify.OutboxKey{m.Key()}, token, ""); err != nil {
						return fmt.Errorf("finish: %w", err)
					}
					mu.Lock()
					claimed[m.ID]++
					mu.Unlock()
				}
				mu.Lock()
				done := len(claimed) == total
				mu.Unlock()
				if done {
					return nil
				}
				if len(msgs) == 0 {
					// Nothing due yet: wait for the creators, but
					// never past the test's deadline.
					select {
					case <-gctx.Done():
						return gctx.Err()
					case <-time.After(time.Millisecond):
					}
				}
			}
		})
	}
	require.NoError(t, g.Wait())
	require.EqualValues(t, total, created.Load())
	require.Len(t, claimed, total)
	for id, n := range claimed {
		require.Equal(t, 1, n, "row %d claimed %d times", id, n)
	}
	// Every delivery wrote its status event; a status relay takes them.
	statuses, err := relay.Batch(ctx, apiStore, 2*total, notify.StatusEventTypes, relay.ConfirmAll{}.Publish)
	require.NoError(t, err)
	require.Equal(t, total, statuses)
	st, err := apiStore.OutboxStats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Unprocessed)
	count := counter(t, path)
	require.Equal(t, total, count(t, "notifications"))
	require.Equal(t, total, count(t, "processed_messages"))
}

// BenchmarkCreate measures creates per second on one store (each a
// durable-in-WAL transaction with two inserts).
func BenchmarkCreate(b *testing.B) {
	s, _ := setup(b)
	ctx := b.Context()
	i := 0
	start := time.Now()
	for b.Loop() {
		i++
		if _, err := s.Create(ctx, notify.NewNotification{Request: request(i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(i)/time.Since(start).Seconds(), "creates/s")
}

// migrationFiles counts the migrations shipped in migrations/: each is
// recorded once.
func migrationFiles(t *testing.T) int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return len(files)
}
