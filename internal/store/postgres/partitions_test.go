package postgres

import (
	"context"
	"fmt"
	"maps"
	neturl "net/url"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
	"github.com/heraldhq/herald/internal/testkit/testenv"
)

func TestMissingSpans(t *testing.T) {
	t.Parallel()
	day := func(d int) time.Time { return time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, d) }
	at := func(d int, h int) *time.Time { v := day(d).Add(time.Duration(h) * time.Hour); return &v }
	p := func(from, to *time.Time) partition { return partition{name: "p", from: from, to: to} }
	for _, tc := range []struct {
		name  string
		parts []partition
		want  []span
	}{
		{"none: one a day", nil, []span{{day(0), day(1)}, {day(1), day(2)}, {day(2), day(3)}}},
		{"legacy covers the first day", []partition{p(nil, at(1, 0))}, []span{{day(1), day(2)}, {day(2), day(3)}}},
		{"all there", []partition{p(nil, at(1, 0)), p(at(1, 0), at(2, 0)), p(at(2, 0), at(3, 0))}, nil},
		{"a gap in the middle", []partition{p(at(0, 0), at(1, 0)), p(at(2, 0), at(3, 0))}, []span{{day(1), day(2)}}},
		{"a bound within a day: the rest of the day", []partition{p(nil, at(0, 6))}, []span{{*at(0, 6), day(1)}, {day(1), day(2)}, {day(2), day(3)}}},
		{"a partition starting within a day: up to it", []partition{p(at(1, 12), at(2, 0))}, []span{{day(0), day(1)}, {day(1), *at(1, 12)}, {day(2), day(3)}}},
		{"MAXVALUE covers the rest", []partition{p(at(1, 0), nil)}, []span{{day(0), day(1)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, missingSpans(tc.parts, day(0), day(3)))
		})
	}
	require.Equal(t, "outbox_p20261201", partitionName(day(0)))
	require.Equal(t, "outbox_p20261202_060000", partitionName(*at(1, 6)))
}

// outboxRow is what the upgrade must keep of an outbox row.
type outboxRow struct {
	ID                       int64
	Type, Payload            string
	OccurredAt               time.Time
	ProcessedAt, LockedUntil *time.Time
	LockedBy                 *string
	Attempts                 int
}

func (r outboxRow) key() notify.OutboxKey {
	return notify.OutboxKey{ID: r.ID, OccurredAt: r.OccurredAt}
}

func outboxRows(t *testing.T, s *Store) []outboxRow {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT id, event_type, payload::text, occurred_at, processed_at, locked_until, locked_by, attempts
FROM outbox ORDER BY id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := r.Scan(&o.ID, &o.Type, &o.Payload, &o.OccurredAt, &o.ProcessedAt, &o.LockedUntil, &o.LockedBy, &o.Attempts)
		return o, err
	})
	require.NoError(t, err)
	return out
}

// indexFiles maps the outbox's index names to their files.
func indexFiles(t *testing.T, s *Store, table string) map[string]int64 {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), `SELECT c.relname::text, c.relfilenode::bigint FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
WHERE x.indrelid = to_regclass($1)`, table)
	require.NoError(t, err)
	out := map[string]int64{}
	for rows.Next() {
		var (
			name string
			file int64
		)
		require.NoError(t, rows.Scan(&name, &file))
		out[name] = file
	}
	require.NoError(t, rows.Err())
	return out
}

// Migration 0014 on a database of 0013 with rows in flight: every row
// stays, with its id and state, in outbox_legacy, whose indexes are adopted
// rather than built again; the relay and the table transport then take the
// in-flight rows, and new ids follow the old ones.
func TestUpgradeToPartitionedOutbox(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s := openMigratedBefore(ctx, t, 14)

	// The history an older herald left, as SQL of that schema: a processed
	// event of three days ago, an unprocessed one, one leased by a relay
	// whose batch is publishing, one whose relay lease ran out (the relay
	// died), one leased to a table worker that is sending, and a
	// dead-lettered one of yesterday.
	var nid int64
	require.NoError(t, s.pool.QueryRow(ctx, `INSERT INTO notifications (user_id, channel, recipient, subject, body)
		VALUES ('u', 'email', 'a@example.com', 's', 'b') RETURNING id`).Scan(&nid))
	payload := fmt.Sprintf(`{"notification_id": "%d", "user_id": "u", "channel": "email", "to": "a@example.com", "subject": "s", "body": "b"}`, nid)
	_, err := s.pool.Exec(ctx, `INSERT INTO outbox (event_type, payload, occurred_at, processed_at, locked_until, locked_by, attempts, last_error) VALUES
		('notification.requested', $1, now() - interval '3 days', now() - interval '3 days', NULL, NULL, 0, NULL),
		('notification.requested', $1, now() - interval '1 hour', NULL, NULL, NULL, 0, NULL),
		('notification.requested', $1, now() - interval '2 minutes', NULL, now() + interval '1 hour', 'relay-live', 0, NULL),
		('notification.sent', $1, now() - interval '2 days', NULL, now() - interval '1 minute', 'relay-dead', 0, NULL),
		('notification.requested', $1, now() - interval '1 minute', NULL, now() + interval '1 hour', 'worker-1', 1, NULL),
		('notification.requested', $1, now() - interval '1 day', now() - interval '1 day', NULL, NULL, 5, 'poison')`, payload)
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `INSERT INTO processed_messages (message_id, processed_at) VALUES (1, now() - interval '3 days')`)
	require.NoError(t, err)
	before := outboxRows(t, s)
	require.Len(t, before, 6)
	oldIndexes := indexFiles(t, s, "outbox")
	require.Len(t, oldIndexes, 6)

	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, before, outboxRows(t, s), "every row kept, with its id and state")
	require.Equal(t, "p", *scalar[*string](t, s, selectOutboxKind))
	require.Equal(t, len(before), count(t, s, `SELECT count(*) FROM outbox_legacy`), "the old table is the first partition")
	require.Equal(t, "public.outbox_id_seq", *scalar[*string](t, s, `SELECT pg_get_serial_sequence('outbox', 'id')`),
		"the sequence belongs to the new outbox: dropping outbox_legacy keeps it")
	// The old indexes are outbox_legacy's, the same files under new
	// names, each a partition of the parent's index of the old name; only
	// the key is new (id, occurred_at).
	newIndexes := indexFiles(t, s, "outbox_legacy")
	for name, file := range oldIndexes {
		// Migration 0019 builds the work and status indexes again
		// (their predicates name the new status events).
		if name == "outbox_pkey" || name == "outbox_work_unprocessed_idx" || name == "outbox_status_unprocessed_idx" {
			continue
		}
		legacy := "outbox_legacy" + name[len("outbox"):]
		require.Equal(t, file, newIndexes[legacy], "%s adopted as %s, not built again", name, legacy)
		require.Equal(t, name, *scalar[*string](t, s, `SELECT p.relname::text FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
			WHERE i.inhrelid = to_regclass($1)`, legacy))
	}
	require.Contains(t, newIndexes, "outbox_legacy_pkey")
	require.Contains(t, newIndexes, "outbox_legacy_work_due_idx", "migration 0015's, built on the partition")
	require.Len(t, newIndexes, 7)
	require.Zero(t, count(t, s, `SELECT count(*) FROM pg_constraint WHERE conrelid = 'outbox_legacy'::regclass AND contype = 'c'`),
		"the bound's CHECK is gone once attached")
	// Today (in outbox_legacy until the day after the migration) and the
	// seven days after it have their partitions.
	requireCovered(t, s, 0, partitionDaysAhead)

	// A second run changes nothing.
	parts := count(t, s, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox'::regclass`)
	require.NoError(t, s.Migrate(ctx))
	require.Equal(t, parts, count(t, s, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox'::regclass`))
	require.Equal(t, before, outboxRows(t, s))

	// The relay takes the unprocessed row and the one whose lease ran
	// out, in id order; not the live leases.
	var relayed []int64
	n, err := relay.Batch(ctx, s, 10, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		for _, e := range evs {
			relayed = append(relayed, e.ID)
		}
		return relayed, nil
	})

	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, []int64{before[1].ID, before[3].ID}, relayed)
	// The relay that leased a row before the upgrade marks it after.
	require.NoError(t, s.settleRelayed(ctx, []notify.OutboxKey{before[2].key()}, nil, "relay-live"))
	// The table worker finishes its row; the claim finds nothing else due.
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{before[4].key()}, "worker-1", ""))
	st, err := s.OutboxStats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Unprocessed)
	ms, err := s.Claim(ctx, "worker-2", 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, ms)

	// A create after the upgrade: its id follows the old ones, and the
	// table claim takes it.
	c, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b",
	}})
	require.NoError(t, err)
	ms, err = s.Claim(ctx, "worker-2", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, ms, 1)
	require.Greater(t, ms[0].ID, before[len(before)-1].ID)
	require.Contains(t, string(ms[0].Payload), fmt.Sprintf(`"%d"`, c.Notification.ID))
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{ms[0].Key()}, "worker-2", ""))
}

func scalar[T any](t *testing.T, s *Store, query string, args ...any) T {
	t.Helper()
	var v T
	require.NoError(t, s.pool.QueryRow(t.Context(), query, args...).Scan(&v), query)
	return v
}

// requireCovered checks that an outbox row may be written at every instant
// from the start of day first to the end of day last after today (UTC, on
// the database's clock): at each midnight and the microsecond before the
// next, in a transaction rolled back. It returns nothing; a missing
// partition fails the insert.
func requireCovered(t *testing.T, s *Store, first, last int) {
	t.Helper()
	today := scalar[time.Time](t, s, `SELECT now()`).UTC().Truncate(24 * time.Hour)
	for d := first; d <= last; d++ {
		start := today.AddDate(0, 0, d)
		for _, at := range []time.Time{start, start.Add(24*time.Hour - time.Microsecond)} {
			require.NoError(t, insertAt(t, s, at), "day %d, %s", d, at)
		}
	}
}

// insertAt tries an outbox row at occurred_at at, rolled back, and returns
// the insert's error.
func insertAt(t *testing.T, s *Store, at time.Time) error {
	t.Helper()
	tx, err := s.pool.Begin(t.Context())
	require.NoError(t, err)
	defer rollback(tx)
	_, err = tx.Exec(t.Context(), `INSERT INTO outbox (event_type, payload, occurred_at) VALUES ('notification.requested', '{}', $1)`, at)
	return err
}

// partitionOf names the partition that holds outbox row id.
func partitionOf(t *testing.T, s *Store, id int64) string {
	t.Helper()
	return scalar[string](t, s, `SELECT tableoid::regclass::text FROM outbox WHERE id = $1`, id)
}

// dropAllPartitions leaves the outbox without partitions (a database whose
// partitions all ran out): every write fails until maintenance runs.
func dropAllPartitions(t *testing.T, s *Store) {
	t.Helper()
	parts, err := listPartitions(t.Context(), s.pool)
	require.NoError(t, err)
	for _, p := range parts {
		_, err := s.pool.Exec(t.Context(), `DROP TABLE `+pgx.Identifier{p.name}.Sanitize())
		require.NoError(t, err)
	}
}

// A create never finds its day without a partition: a database whose
// partitions ran out (a deployment stopped for longer than they reach)
// gets today's and the week's from EnsurePartitions, which every process
// runs before it serves; several processes running it at once make each
// partition once.
func TestEnsurePartitions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.PostgresURL(t)
	s := open(t, url)
	requireCovered(t, s, 0, partitionDaysAhead)
	today := scalar[time.Time](t, s, `SELECT now()`).UTC().Truncate(24 * time.Hour)
	require.Error(t, insertAt(t, s, today.AddDate(0, 0, partitionDaysAhead+1)), "no partition beyond the window")

	dropAllPartitions(t, s)
	_, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b",
	}})
	require.ErrorContains(t, err, "no partition", "the test must start from a database whose partitions ran out")

	// Four processes start at once.
	stores := []*Store{s, open(t, url), open(t, url), open(t, url)}
	dropAllPartitions(t, s) // the opens' Migrate made them again
	errs := make([]error, len(stores))
	var wg sync.WaitGroup
	for i, st := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = st.EnsurePartitions(ctx)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, partitionDaysAhead+1, count(t, s, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'outbox'::regclass`))
	requireCovered(t, s, 0, partitionDaysAhead)

	// Each day's rows go to the day's partition, whose indexes are named
	// after the parent's and whose pages keep 0013's free space.
	c, err := s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b",
	}})
	require.NoError(t, err)
	evs := relayAll(t, s)
	require.Len(t, evs, 1)
	require.Equal(t, partitionName(today), partitionOf(t, s, evs[0].ID))
	require.Contains(t, string(evs[0].Payload), fmt.Sprintf(`"%d"`, c.Notification.ID))
	tomorrow := partitionName(today.AddDate(0, 0, 1))
	var id int64
	require.NoError(t, s.pool.QueryRow(ctx, `INSERT INTO outbox (event_type, payload, occurred_at) VALUES ('notification.requested', '{}', $1) RETURNING id`,
		today.AddDate(0, 0, 1)).Scan(&id))
	require.Equal(t, tomorrow, partitionOf(t, s, id), "midnight is the next day's")
	require.NoError(t, s.pool.QueryRow(ctx, `INSERT INTO outbox (event_type, payload, occurred_at) VALUES ('notification.requested', '{}', $1) RETURNING id`,
		today.AddDate(0, 0, 1).Add(-time.Microsecond)).Scan(&id))
	require.Equal(t, partitionName(today), partitionOf(t, s, id))
	idx := indexFiles(t, s, tomorrow)
	for _, suffix := range []string{"_pkey", "_unprocessed_idx", "_work_unprocessed_idx", "_work_due_idx", "_status_unprocessed_idx", "_processed_idx", "_notification_idx"} {
		require.Contains(t, idx, tomorrow+suffix)
	}
	require.Len(t, idx, 7)
	require.Equal(t, []string{"fillfactor=70"}, scalar[[]string](t, s, `SELECT reloptions FROM pg_class WHERE oid = to_regclass($1)`, tomorrow))
}

// relayAll relays every unprocessed row (confirming all) and returns them.
func relayAll(t *testing.T, s *Store) []notify.Event {
	t.Helper()
	var out []notify.Event
	_, err := relay.Batch(t.Context(), s, 1000, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
		out = append(out, evs...)
		return ids(evs), nil
	})

	require.NoError(t, err)
	return out
}

// Retention on the partitioned outbox: a past day holding only rows
// processed before the cut is detached and dropped, as is outbox_legacy
// once its bound has passed; a day with an unprocessed row, or one
// processed after the cut, stays, and its rows processed before the cut
// are deleted one by one; a partition whose detach was interrupted is
// finalized and dropped; nothing at or after the cut is touched.
func TestPruneDropsPartitions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := setup(t)
	now := scalar[time.Time](t, s, `SELECT now()`)
	today := now.UTC().Truncate(24 * time.Hour)
	day := func(d int) time.Time { return today.AddDate(0, 0, d) }

	// Days -10 to today get partitions of their own; outbox_legacy, with
	// rows of 20 days ago, is attached again with its bound at day -10, as
	// it will be ten days after the migration.
	_, err := s.pool.Exec(ctx, `INSERT INTO outbox (event_type, payload, occurred_at, processed_at)
		SELECT 'notification.requested', '{}', $1, $1 FROM generate_series(1, 2)`, day(-20))
	require.NoError(t, err)
	_, err = s.pool.Exec(ctx, `ALTER TABLE outbox DETACH PARTITION outbox_legacy`)
	require.NoError(t, err)
	made, err := s.ensurePartitions(ctx, day(-10), 10+partitionDaysAhead)
	require.NoError(t, err)
	require.Equal(t, 11, made, "days -10 to today; tomorrow and the week after were there")
	_, err = s.pool.Exec(ctx, fmt.Sprintf(`ALTER TABLE outbox ATTACH PARTITION outbox_legacy FOR VALUES FROM (MINVALUE) TO (%s)`, quoteTime(day(-10))))
	require.NoError(t, err)
	legacyMax := scalar[int64](t, s, `SELECT max(id) FROM outbox`)

	// insert writes n rows of day d (at noon), processed at processed
	// (nil: unprocessed), and their dedup rows when processed.
	insert := func(d, n int, processed *time.Time) {
		t.Helper()
		_, err := s.pool.Exec(ctx, `WITH o AS (
			INSERT INTO outbox (event_type, payload, occurred_at, processed_at)
			SELECT 'notification.requested', '{}', $1, $2 FROM generate_series(1, $3) RETURNING id, processed_at)
			INSERT INTO processed_messages (message_id, processed_at) SELECT id, processed_at FROM o WHERE processed_at IS NOT NULL`,
			day(d).Add(12*time.Hour), processed, n)
		require.NoError(t, err)
	}
	at := func(d int) *time.Time { v := day(d).Add(13 * time.Hour); return &v }
	insert(-10, 3, at(-10)) // dropped
	insert(-9, 2, at(-9))   // stays (an unprocessed row), 2 rows deleted
	insert(-9, 1, nil)
	insert(-8, 1, at(-8)) // stays (a row processed after the cut), 1 row deleted
	insert(-8, 1, &now)
	insert(-7, 2, at(-7)) // its detach interrupted: finalized and dropped
	insert(-5, 2, at(-5)) // after the cut: untouched
	cut := day(-6)

	// An interrupted DETACH ... CONCURRENTLY: another transaction uses the
	// outbox, so the detach waits for it and is cancelled by its statement
	// timeout, leaving day -7 detach pending.
	other, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = other.Exec(ctx, `SELECT count(*) FROM outbox`)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, testenvURL(t, s))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SET statement_timeout = '300ms'`)
	require.NoError(t, err)
	_, err = conn.PgConn().Exec(ctx, `ALTER TABLE outbox DETACH PARTITION `+partitionName(day(-7))+` CONCURRENTLY`).ReadAll()
	require.ErrorContains(t, err, "statement timeout")
	require.NoError(t, conn.Close(ctx))
	rollback(other)
	require.True(t, scalar[bool](t, s, `SELECT inhdetachpending FROM pg_inherits WHERE inhrelid = to_regclass($1)`, partitionName(day(-7))))

	res, err := s.Prune(ctx, cut, 1000)
	require.NoError(t, err)
	require.Equal(t, notify.PruneResult{Outbox: 3, OutboxPartitions: 3, ProcessedMessages: 3 + 2 + 1 + 2}, res)
	for _, gone := range []string{"outbox_legacy", partitionName(day(-10)), partitionName(day(-7))} {
		require.Nil(t, scalar[*string](t, s, `SELECT to_regclass($1)::text`, gone), gone)
	}
	require.Equal(t, 1, count(t, s, `SELECT count(*) FROM `+partitionName(day(-9))), "the unprocessed row stays")
	require.Equal(t, 1, count(t, s, `SELECT count(*) FROM `+partitionName(day(-8))), "the row processed after the cut stays")
	require.Equal(t, 2, count(t, s, `SELECT count(*) FROM `+partitionName(day(-5))))
	require.Equal(t, 1+2, count(t, s, `SELECT count(*) FROM processed_messages`), "the dedup rows of the kept and the newer rows")

	// A second pass finds nothing more; outbox_legacy took no sequence
	// with it, and a create still finds its partition.
	res, err = s.Prune(ctx, cut, 1000)
	require.NoError(t, err)
	require.Equal(t, notify.PruneResult{}, res)
	_, err = s.Create(ctx, notify.NewNotification{Request: notify.CreateRequest{
		UserID: "u", Channel: "email", To: "a@example.com", Subject: "s", Body: "b",
	}})
	require.NoError(t, err)
	evs := relayAll(t, s)
	require.Len(t, evs, 2, "the create's event and day -9's unprocessed one")
	require.Greater(t, evs[1].ID, legacyMax)
	requireCovered(t, s, 0, partitionDaysAhead)
}

// testenvURL is the URL of s's database.
func testenvURL(t *testing.T, s *Store) string {
	t.Helper()
	return s.pool.Config().ConnString()
}

// A failure to make partitions (here a lock waited for too long) is
// ErrNoPartitionNow only when the present day has no partition: a process
// then cannot write and must not start; otherwise creates still work.
func TestEnsurePartitionsFailure(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := migratedURL(t)
	s := open(t, url)
	u, err := neturl.Parse(url)
	require.NoError(t, err)
	q := u.Query()
	q.Set("lock_timeout", "200ms")
	u.RawQuery = q.Encode()
	impatient := open(t, u.String())

	// Another process holds the maintenance lock.
	holder, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer rollback(holder)
	_, err = holder.Exec(ctx, lockPartitions, int64(partitionLockKey))
	require.NoError(t, err)

	// The week ahead lacks its last day; today is there.
	last := partitionName(scalar[time.Time](t, s, `SELECT now()`).UTC().Truncate(24*time.Hour).AddDate(0, 0, partitionDaysAhead))
	_, err = s.pool.Exec(ctx, `DROP TABLE `+last)
	require.NoError(t, err)
	err = impatient.EnsurePartitions(ctx)
	require.ErrorContains(t, err, "lock timeout")
	require.NotErrorIs(t, err, ErrNoPartitionNow)

	// No partition at all.
	dropAllPartitions(t, s)
	err = impatient.EnsurePartitions(ctx)
	require.ErrorContains(t, err, "lock timeout")
	require.ErrorIs(t, err, ErrNoPartitionNow)

	// Once the lock is free, the same call makes them.
	rollback(holder)
	require.NoError(t, impatient.EnsurePartitions(ctx))
	requireCovered(t, s, 0, partitionDaysAhead)
}

// Two processes' retention passes at once drop each old partition once,
// and neither fails for the other's work.
func TestPruneTwoProcesses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := migratedURL(t)
	s, other := open(t, url), open(t, url)
	today := scalar[time.Time](t, s, `SELECT now()`).UTC().Truncate(24 * time.Hour)
	_, err := s.pool.Exec(ctx, `ALTER TABLE outbox DETACH PARTITION outbox_legacy`)
	require.NoError(t, err)
	_, err = s.ensurePartitions(ctx, today.AddDate(0, 0, -6), 6+partitionDaysAhead)
	require.NoError(t, err)
	for d := -6; d < -2; d++ {
		at := today.AddDate(0, 0, d).Add(time.Hour)
		_, err := s.pool.Exec(ctx, `INSERT INTO outbox (event_type, payload, occurred_at, processed_at)
			SELECT 'notification.requested', '{}', $1, $1 FROM generate_series(1, 1500)`, at)
		require.NoError(t, err)
	}
	cut := today.AddDate(0, 0, -2)
	results := make([]notify.PruneResult, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, st := range []*Store{s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = st.Prune(ctx, cut, 1000)
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	// Each day went whole, once; no row was deleted one by one.
	require.EqualValues(t, 4, results[0].OutboxPartitions+results[1].OutboxPartitions)
	require.Zero(t, results[0].Outbox+results[1].Outbox)
	require.Zero(t, count(t, s, `SELECT count(*) FROM outbox WHERE occurred_at < $1`, cut))
}

// outboxRelations names the outbox tables a plan reads or writes
// (outbox_legacy and outbox_p...), each once, sorted.
func outboxRelations(plan string) []string {
	seen := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b(outbox_(?:legacy|p\d{8}(?:_\d{6})?))\b`).FindAllStringSubmatch(plan, -1) {
		// Index names start with their table's name: keep tables only.
		seen[m[1]] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

// The statements that name outbox rows by id (the table transport's
// finish and reschedule, the relay's mark and release) carry the rows'
// occurred_at, so that PostgreSQL plans and runs each on the partitions of
// its rows' days alone, on the pool's custom plans; the time only narrows
// the search: a row not leased to the token is left alone as before, and a
// key without its time finds its row in every partition.
func TestOutboxKeyStatementsPrune(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := setup(t)
	today := scalar[time.Time](t, s, `SELECT now()`).UTC().Truncate(24 * time.Hour)
	day1, day2 := today.AddDate(0, 0, 1).Add(time.Hour), today.AddDate(0, 0, 2).Add(time.Hour)
	for _, at := range []time.Time{day1, day1.Add(time.Minute), day2} {
		_, err := s.pool.Exec(ctx, `INSERT INTO outbox (event_type, payload, occurred_at) VALUES ('notification.requested', '{}', $1)`, at)
		require.NoError(t, err)
	}
	p1, p2 := partitionName(today.AddDate(0, 0, 1)), partitionName(today.AddDate(0, 0, 2))
	ms, err := s.Claim(ctx, "w", 10, time.Hour)
	require.NoError(t, err)
	require.Len(t, ms, 3)
	require.True(t, ms[0].OccurredAt.Equal(day1), "the claim returns the row's occurred_at: %s", ms[0].OccurredAt)

	explainKeys := func(name, query string, keys []notify.OutboxKey, args func(ids []int64, from, to any) []any) []string {
		t.Helper()
		ids, from, to := occurredSpan(keys)
		plan := explainAfter(t, s, "", query, args(ids, from, to)...)
		t.Logf("%s:\n%s", name, plan)
		return outboxRelations(plan)
	}
	one := []notify.OutboxKey{ms[0].Key(), ms[1].Key()}
	both := []notify.OutboxKey{ms[0].Key(), ms[2].Key()}
	finish := func(ids []int64, from, to any) []any { return []any{ids, "w", "", from, to} }
	reschedule := func(ids []int64, from, to any) []any { return []any{ids[0], "w", int64(0), "", false, from, to} }
	mark := func(ids []int64, from, to any) []any { return []any{ids, from, to} }
	release := func(ids []int64, from, to any) []any { return []any{ids, "relay-t", from, to} }
	require.Equal(t, []string{p1}, explainKeys("finish, one day", finishLeased, one, finish))
	require.Equal(t, []string{p1, p2}, explainKeys("finish, two days", finishLeased, both, finish))
	require.Equal(t, []string{p2}, explainKeys("reschedule", rescheduleLeased, []notify.OutboxKey{ms[2].Key()}, reschedule))
	require.Equal(t, []string{p1}, explainKeys("relay mark", markRelayed, one, mark))
	require.Equal(t, []string{p1}, explainKeys("relay release", releaseRelayed, one, release))
	// A key without its time: every partition, as by id alone.
	all := explainKeys("finish, no time", finishLeased, []notify.OutboxKey{{ID: ms[0].ID}}, finish)
	require.Greater(t, len(all), 3)

	// A key of another day names no row: left alone. Without its time,
	// the row is found by id; with it, as claimed.
	wrong := ms[0].Key()
	wrong.OccurredAt = day2
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{wrong}, "w", ""))
	require.Nil(t, scalar[*time.Time](t, s, `SELECT processed_at FROM outbox WHERE id = $1`, ms[0].ID))
	require.NoError(t, s.Reschedule(ctx, notify.OutboxKey{ID: ms[0].ID}, "w", time.Hour, "later", true))
	require.Equal(t, 1, scalar[int](t, s, `SELECT attempts FROM outbox WHERE id = $1`, ms[0].ID))
	// Rows leased to another token are left alone; the right token
	// finishes rows of two days in one statement.
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{ms[1].Key(), ms[2].Key()}, "other", ""))
	require.Equal(t, 3, count(t, s, `SELECT count(*) FROM outbox WHERE processed_at IS NULL`))
	require.NoError(t, s.Finish(ctx, []notify.OutboxKey{ms[1].Key(), ms[2].Key()}, "w", ""))
	require.Equal(t, 1, count(t, s, `SELECT count(*) FROM outbox WHERE processed_at IS NULL`))
}
