package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/testkit/deliverytest"
	"github.com/heraldhq/herald/internal/testkit/storetest"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

// The engine implements the whole store contract.
var _ storetest.Store = (*Store)(nil)

// setup returns a migrated Store on a fresh database, closed when the test
// ends.
func setup(t *testing.T) *Store {
	t.Helper()
	return open(t, migratedURL(t))
}

// migratedURL is pgtest.URL, which this package's tests cannot import: a
// database of the test's own, copied from a template that every migration
// was applied to. Tests of the migrations themselves start from
// testenv.PostgresURL's empty one.
func migratedURL(t testing.TB) string {
	t.Helper()
	return testenv.PostgresSchemaURL(t, testenv.Schema{
		Fingerprint: MigrationsDigest(),
		Build: func(ctx context.Context, url string) error {
			s, err := Open(ctx, url, Config{MaxConns: 1})
			if err != nil {
				return err
			}
			defer s.Close()
			return s.Migrate(ctx)
		},
	})
}

// open returns a migrated Store on the database at url, closed when the test
// ends; two of them on one database stand for two processes.
func open(t *testing.T, url string) *Store {
	t.Helper()
	return openConfig(t, url, Config{})
}

// openConfig is open with cfg.
func openConfig(t *testing.T, url string, cfg Config) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, url, cfg)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	require.NoError(t, s.Migrate(ctx))
	return s
}

// attempts reads a notification's delivery_attempts rows in id order.
func attempts(t testing.TB, s *Store, nid int64) []notify.Attempt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := s.pool.Query(ctx, `SELECT attempt, message_id, started_at, finished_at, COALESCE(outcome, ''), COALESCE(error, '')
FROM delivery_attempts WHERE notification_id = $1 ORDER BY id`, nid)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (notify.Attempt, error) {
		var a notify.Attempt
		err := r.Scan(&a.Attempt, &a.MessageID, &a.StartedAt, &a.FinishedAt, &a.Outcome, &a.Error)
		return a, err
	})
	require.NoError(t, err)
	return out
}

func count(t testing.TB, s *Store, query string, args ...any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	require.NoError(t, s.pool.QueryRow(ctx, query, args...).Scan(&n))
	return n
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) storetest.Harness { return harness(t, Config{}) })
}

// harness is the conformance suite's Harness on a fresh database, with a
// store opened with cfg. The database's timezone is farZone: no guarantee
// may depend on the session's zone.
func harness(t *testing.T, cfg Config) storetest.Harness {
	t.Helper()
	h := harnessOf(openConfig(t, inZone(t, migratedURL(t), farZone), cfg))
	h.NoStatusEvents = func(t *testing.T) storetest.Harness { return harness(t, Config{NoStatusEvents: true}) }
	return h
}

// harnessOf is the conformance suite's Harness on s, but for
// NoStatusEvents.
func harnessOf(s *Store) storetest.Harness {
	return storetest.Harness{
		Store: s,
		Count: func(t testing.TB, table string) int {
			t.Helper()
			return count(t, s, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize())
		},
		AddAttempt: addAttempt(s),
		Attempts:   func(t testing.TB, nid int64) []notify.Attempt { return attempts(t, s, nid) },
		Backdate: func(t testing.TB, nid int64, d time.Duration) {
			t.Helper()
			_, err := s.pool.Exec(t.Context(), `UPDATE notifications SET created_at = created_at - make_interval(secs => $2) WHERE id = $1`, nid, d.Seconds())
			require.NoError(t, err)
		},
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   Config
		want int
		ok   bool
	}{
		{Config{}, 10, true},
		{Config{MaxConns: 3}, 3, true},
		{Config{MaxConns: -1}, 0, false},
	} {
		c := tc.in.withDefaults()
		err := c.validate()
		if !tc.ok {
			require.Error(t, err, "%+v", tc.in)
			_, err := Open(t.Context(), "postgres://127.0.0.1:1/x", tc.in)
			require.Error(t, err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, c.MaxConns)
	}
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ms, err := migrate.Load(migrationFS, "migrations")
	require.NoError(t, err)
	require.NotEmpty(t, ms)

	// Two herald migrate at once on an empty database: both succeed, each
	// migration is applied once.
	stores := make([]*Store, 3)
	for i := range stores {
		stores[i], err = Open(ctx, url, Config{MaxConns: 2})
		require.NoError(t, err)
		t.Cleanup(stores[i].Close)
	}
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.Migrate(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	s := stores[0]
	require.Equal(t, len(ms), count(t, s, "SELECT count(*) FROM schema_migrations"))
	require.Equal(t, 1, count(t, s, "SELECT count(*) FROM pg_indexes WHERE indexname = 'outbox_unprocessed_idx'"))
	rows, err := s.pool.Query(ctx, "SELECT name FROM schema_migrations ORDER BY version")
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, names, len(ms))
	for i, m := range ms {
		require.Equal(t, m.Name, names[i])
	}

	// A second run changes nothing, not even applied_at.
	var before, after time.Time
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT max(applied_at) FROM schema_migrations").Scan(&before))
	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT max(applied_at) FROM schema_migrations").Scan(&after))
	require.Equal(t, before, after)
	require.Equal(t, len(ms), count(t, s, "SELECT count(*) FROM schema_migrations"))
}

// A database migrated before schema_migrations had a name column is
// upgraded in place, and its migrations are not applied again.
func TestMigrateUpgradesOldSchemaMigrations(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	applied := count(t, s, "SELECT count(*) FROM schema_migrations")
	_, err := s.pool.Exec(ctx, "ALTER TABLE schema_migrations DROP COLUMN name")
	require.NoError(t, err)

	require.NoError(t, s.Migrate(ctx))
	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, applied, count(t, s, "SELECT count(*) FROM schema_migrations"))
	require.Equal(t, applied, count(t, s, "SELECT count(*) FROM schema_migrations WHERE name = ''"))
	rows, err := s.pool.Query(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_name = 'schema_migrations' AND table_schema = current_schema() ORDER BY ordinal_position`)
	require.NoError(t, err)
	columns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"version", "name", "applied_at"}, columns)
}

func TestStatusCheck(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	c, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b",
	}})
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, "UPDATE notifications SET status = 'lost' WHERE id = $1", c.Notification.ID)
	require.Error(t, err, "the status CHECK constraint must refuse unknown statuses")
}

// explain returns the plan of query.
func explain(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	return explainAfter(t, s, "", query, args...)
}

// explainAfter returns the plan of query run after setup (a statement
// such as claimPlan) in one transaction, as the store runs it.
func explainAfter(t *testing.T, s *Store, setup, query string, args ...any) string {
	t.Helper()
	var lines []string
	err := pgx.BeginFunc(t.Context(), s.pool, func(tx pgx.Tx) error {
		if setup != "" {
			if _, err := tx.Exec(t.Context(), setup); err != nil {
				return err
			}
		}
		rows, err := tx.Query(t.Context(), "EXPLAIN "+query, args...)
		if err != nil {
			return err
		}
		lines, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// historyRows is the number of processed outbox rows TestClaimUsesPartialIndex
// writes: a long-running installation's history (about 7s here).
const historyRows = 1_000_000

func TestClaimUsesPartialIndex(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	// A long history of processed rows and a short backlog: the claims must
	// not scan the history.
	start := time.Now()
	_, err := s.pool.Exec(ctx, `INSERT INTO outbox (event_type, payload, processed_at)
		SELECT 'notification.requested', '{}', now() - interval '30 days' FROM generate_series(1, $1::int)`, historyRows)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `INSERT INTO outbox (event_type, payload)
		SELECT 'notification.requested', '{}' FROM generate_series(1, 5)`)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, "ANALYZE outbox")
	require.NoError(t, err)
	t.Logf("%d processed and 5 unprocessed outbox rows written and analyzed in %s", historyRows, time.Since(start).Round(time.Millisecond))

	// The rows are in outbox_legacy, the partition of every day before
	// the one after the migration (0014): its index names say which of
	// the parent's indexes a plan walks there. The claims run on the
	// generic plans of claimPlan: each relay walks its types' own partial
	// index (never the other types' backlog), the table claim the
	// notifications', every partition's merged in id order and stopped
	// after the limit: no sort of the whole backlog, no scan of a
	// partition.
	func() {
		c, err := s.pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		leaves := outboxLeaves(t, ctx, c.Conn())
		for _, st := range claimStatements() {
			plan := explainPrepared(t, ctx, c.Conn(), claimPlan, "FORMAT JSON", st.sql, st.args)
			assert.Empty(t, claimPlanProblems(plan, leaves, st.walk), st.name)
		}
	}()
	plan := explain(t, s, selectOutboxStats, notify.PendingCap+1)
	t.Logf("outbox stats:\n%s", plan)
	require.Contains(t, plan, "outbox_legacy_status_unprocessed_idx", plan)
	require.Contains(t, plan, "notifications_failed_idx", plan)
	require.NotContains(t, plan, "Seq Scan on outbox_legacy", plan)

	// Retention walks the history oldest first from its own index, a
	// batch at a time, instead of scanning the table per batch.
	plan = explain(t, s, pruneOutboxFrom("outbox_legacy"), time.Now().Add(-7*24*time.Hour), 1000)
	t.Logf("prune outbox:\n%s", plan)
	require.Contains(t, plan, "outbox_legacy_processed_idx", plan)

	// The dead letters come from their partial index, already in order.
	plan = explain(t, s, selectDeadLetters, nil, nil, "", nil, nil, nil)
	t.Logf("dead letters:\n%s", plan)
	require.Contains(t, plan, "notifications_failed_idx", plan)
	require.NotContains(t, plan, "Sort", plan)
}

// listenerPID returns the backend pid of the store's listener, or 0.
func listenerPID(t *testing.T, s *Store) int {
	t.Helper()
	var pid int
	err := s.pool.QueryRow(t.Context(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, listenerApplicationName).Scan(&pid)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return pid
}

func receive(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		require.True(t, ok, "channel closed while waiting for %s", what)
	case <-time.After(10 * time.Second):
		t.Fatalf("no wake-up: %s", what)
	}
}

func TestSubscribeSurvivesKilledListener(t *testing.T) {
	t.Parallel()
	url := migratedURL(t)
	s := open(t, url)
	// Creates come from another process, so that only NOTIFY can wake s.
	other := open(t, url)
	ctx := t.Context()
	req := notify.CreateRequest{UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b"}

	ch := s.Subscribe(ctx)
	receive(t, ch, "after the listener connected")
	old := listenerPID(t, s)
	require.NotZero(t, old)

	var terminated bool
	require.NoError(t, s.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", old).Scan(&terminated))
	require.True(t, terminated)

	// Rows may have been committed while the listener was away: a wake-up
	// comes once it is back, and it listens again.
	receive(t, ch, "after the listener reconnected")
	pid := listenerPID(t, s)
	require.NotZero(t, pid)
	require.NotEqual(t, old, pid)
	_, err := other.Create(ctx, notify.NewNotification{Request: req})
	require.NoError(t, err)
	receive(t, ch, "after another process's create, on the new connection")
}

// A create in one process wakes the subscribers of another at once, through
// the NOTIFY sent after its commit; many creates fold into few NOTIFYs.
func TestSubscribeHearsOtherProcesses(t *testing.T) {
	t.Parallel()
	url := migratedURL(t)
	listener, creator := open(t, url), open(t, url)
	ctx := t.Context()
	ch := listener.Subscribe(ctx)
	receive(t, ch, "after the listener connected")
	req := notify.CreateRequest{UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b"}
	for range 3 {
		_, err := creator.Create(ctx, notify.NewNotification{Request: req})
		require.NoError(t, err)
		receive(t, ch, "after the other process's create")
	}
}

func TestSubscribeLifecycle(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()

	// The listener stops when the last subscriber leaves.
	subCtx, cancel := context.WithCancel(ctx)
	ch := s.Subscribe(subCtx)
	receive(t, ch, "after the listener connected")
	require.NotZero(t, listenerPID(t, s))
	cancel()
	require.Eventually(t, func() bool { return listenerPID(t, s) == 0 }, 10*time.Second, 20*time.Millisecond,
		"listener still connected after its last subscriber left")

	// A new subscriber starts it again; Close closes its channel and
	// returns only after the listener is gone.
	ch = s.Subscribe(ctx)
	receive(t, ch, "after the listener reconnected")
	s.Close()
	select {
	case _, ok := <-ch:
		require.False(t, ok, "channel not closed by Close")
	default:
		t.Fatal("channel not closed by Close")
	}
	closed := s.Subscribe(ctx)
	_, ok := <-closed
	require.False(t, ok, "Subscribe after Close returns a closed channel")
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// Nothing listens on port 1: the store opens (lazily) and reports the
	// outage as notify.ErrUnavailable.
	s, err := Open(ctx, "postgres://postgres@127.0.0.1:1/herald?sslmode=disable&connect_timeout=2", Config{})
	require.NoError(t, err)
	defer s.Close()
	require.ErrorIs(t, s.Ping(ctx), notify.ErrUnavailable)
	_, err = s.Get(ctx, 1)
	require.ErrorIs(t, err, notify.ErrUnavailable)
	require.NotErrorIs(t, err, notify.ErrNotFound)
	_, err = s.Create(ctx, notify.NewNotification{})
	require.ErrorIs(t, err, notify.ErrUnavailable)
	_, err = s.DeadLetters(ctx, notify.DeadLetterFilter{})
	require.ErrorIs(t, err, notify.ErrUnavailable)
	_, err = s.Redrive(ctx, 1)
	require.ErrorIs(t, err, notify.ErrUnavailable)
	require.NotErrorIs(t, err, notify.ErrNotFound)
	_, err = s.Prune(ctx, time.Now(), 10)
	require.ErrorIs(t, err, notify.ErrUnavailable)
}

// An effect that happened (events confirmed, mail accepted) is recorded even
// when the caller's context ends meanwhile, as on a shutdown; otherwise it
// would be repeated.
func TestEffectRecordedAfterCancel(t *testing.T) {
	t.Parallel()
	s := setup(t)
	req := notify.CreateRequest{UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b"}
	c, err := s.Create(t.Context(), notify.NewNotification{Request: req})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	n, err := relay.Batch(ctx, s, 10, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		cancel()
		return []int64{evs[0].ID}, nil
	})

	require.NoError(t, err)
	require.Equal(t, 1, n)
	st, err := s.OutboxStats(t.Context())
	require.NoError(t, err)
	require.Zero(t, st.Unprocessed)

	ctx, cancel = context.WithCancel(t.Context())
	out, err := deliverytest.Deliver(ctx, s, 1, c.Notification.ID, func(context.Context) error {
		cancel()
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, notify.OutcomeSent, out)
	got, err := s.Get(t.Context(), c.Notification.ID)
	require.NoError(t, err)
	require.Equal(t, notify.StatusSent, got.Status)
}
