package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// leaseRelayBatch leases the rows a relay may take (unprocessed, of one of
// the types in the JSON list ?5, or any type when ?5 is NULL, due at ?3,
// no live lease) rank by rank, the high rows first and the bulk ones last
// (issue 34, point 5), each rank in due order, (available_at, id), from
// outbox_due_idx, (priority, available_at, id) (migrations 0017, 0018;
// named, since the planner could take outbox_work_due_idx for a relay of
// the notifications and then read every status event): priority IN (0, 1,
// 2) searches one range per rank, in rank order, without a sort,
// to one batch, in one statement: SQLite's single writer
// serializes it against every other claim, so two relays never lease the
// same row. A row's available_at is its notification's send_at, so one
// scheduled for later is neither read nor published before it is due. The
// lease moves available_at to its end, as the table claim does, so a
// leased row is not due and one whose lease ran out is due again.
const leaseRelayBatch = `
UPDATE outbox SET locked_by = ?1, locked_until = ?2, available_at = ?2
WHERE id IN (
    SELECT id FROM outbox INDEXED BY outbox_due_idx
    WHERE processed_at IS NULL
      AND (?5 IS NULL OR event_type IN (SELECT value FROM json_each(?5)))
      AND priority IN (0, 1, 2)
      AND available_at <= ?3
      AND (locked_until IS NULL OR locked_until < ?3)
    ORDER BY priority, available_at, id
    LIMIT ?4)
RETURNING id, event_type, payload, occurred_at, coalesce(traceparent, ''), priority`

// markRelayed records the confirmed rows; any relay's confirm counts, so it
// does not check the lease: the broker has the event either way.
// releaseRelayed ends the lease of the rows a batch could not publish, so
// that they are due again at once: available_at back to occurred_at, when
// a row never scheduled became due, so that it keeps its place in due
// order and the backlog's age (OutboxStats) keeps counting through a
// broker outage (see the PostgreSQL store's releaseRelayed).
const (
	markRelayed = `
UPDATE outbox SET processed_at = ?, locked_until = NULL
WHERE id IN (SELECT value FROM json_each(?)) AND processed_at IS NULL`
	releaseRelayed = `
UPDATE outbox SET locked_by = NULL, locked_until = NULL, available_at = min(occurred_at, ?3)
WHERE id IN (SELECT value FROM json_each(?1)) AND locked_by = ?2 AND processed_at IS NULL`
)

// LeaseRelay leases up to limit due unprocessed outbox rows of types
// (nil: any) to token for lease, in one write transaction it commits,
// highest priority first, then in id order. It implements relay.Outbox.
func (s *Store) LeaseRelay(ctx context.Context, limit int, types []string, token string, lease time.Duration) ([]notify.Event, error) {
	var typeList sql.NullString
	if types != nil {
		b, err := json.Marshal(types)
		if err != nil {
			return nil, err
		}
		typeList = sql.NullString{String: string(b), Valid: true}
	}
	t := now()
	var events []notify.Event
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var err error
		events, err = leaseRelayEvents(ctx, tx, token, t.Add(lease), t, limit, typeList)
		return err
	})
	return events, err
}

// SettleRelay marks the confirmed rows processed and releases the others
// still leased to token, in one write transaction. It implements
// relay.Outbox.
func (s *Store) SettleRelay(ctx context.Context, mark, release []notify.OutboxKey, token string) error {
	return s.settleRelayed(ctx, outboxIDs(mark), outboxIDs(release), token)
}

// outboxIDs are the ids of keys (never nil: the statements take a JSON
// array).
func outboxIDs(keys []notify.OutboxKey) []int64 {
	ids := make([]int64, 0, len(keys))
	for _, k := range keys {
		ids = append(ids, k.ID)
	}
	return ids
}

// settleRelayed marks the confirmed rows and releases the others, in one
// write transaction.
func (s *Store) settleRelayed(ctx context.Context, mark, release []int64, token string) error {
	markList, err := json.Marshal(mark)
	if err != nil {
		return err
	}
	releaseList, err := json.Marshal(release)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if len(mark) > 0 {
			if _, err := tx.ExecContext(ctx, markRelayed, formatTime(now()), string(markList)); err != nil {
				return fmt.Errorf("mark %d outbox rows processed: %w", len(mark), classify(err))
			}
		}
		if len(release) > 0 {
			if _, err := tx.ExecContext(ctx, releaseRelayed, string(releaseList), token, formatTime(now())); err != nil {
				return fmt.Errorf("release %d unconfirmed outbox rows: %w", len(release), classify(err))
			}
		}
		return nil
	})
}

func leaseRelayEvents(ctx context.Context, tx *sql.Tx, token string, until, at time.Time, limit int, types sql.NullString) ([]notify.Event, error) {
	rows, err := tx.QueryContext(ctx, leaseRelayBatch, token, formatTime(until), formatTime(at), limit, types)
	if err != nil {
		return nil, fmt.Errorf("lease outbox rows: %w", classify(err))
	}
	defer rows.Close()
	var events []notify.Event
	for rows.Next() {
		var (
			e          notify.Event
			payload    string
			occurredAt string
			rank       int
		)
		if err := rows.Scan(&e.ID, &e.Type, &payload, &occurredAt, &e.Traceparent, &rank); err != nil {
			return nil, fmt.Errorf("scan outbox row: %w", err)
		}
		e.Priority = notify.PriorityOfRank(rank)
		e.Payload = []byte(payload)
		if e.OccurredAt, err = parseTime(occurredAt); err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("lease outbox rows: %w", classify(err))
	}
	// RETURNING gives no order guarantee: highest priority first, then id
	// order.
	slices.SortFunc(events, func(a, b notify.Event) int {
		return cmp.Or(cmp.Compare(a.Priority.Rank(), b.Priority.Rank()), cmp.Compare(a.ID, b.ID))
	})
	return events, nil
}

// statusTypeList is the status event types as a list of SQL literals, as
// the predicates of the outbox's work indexes write them (migrations 0017, 0020):
// a claim's type condition must be written the same way for the planner to
// take them.
const statusTypeList = `'` + notify.EventSent + `', '` + notify.EventFailed + `', '` + notify.EventCanceled + `', '` + notify.EventExpired + `', '` + notify.EventSuppressed + `'`

// selectOutboxStats reads the backlog, the rows due at ?1 (see
// notify.OutboxStats), from outbox_due_idx's ranges up to ?1, one per
// priority rank, with the oldest due time; the status events among them;
// the rows not due (outbox_due_idx's ranges past ?1), counted up to ?2;
// and the dead letters from notifications_failed_idx, in one statement and
// so one snapshot. Scheduled rows are not read as backlog:
// the due ranges stop at ?1.
const selectOutboxStats = `
SELECT
    (SELECT count(*) FROM outbox INDEXED BY outbox_due_idx
        WHERE processed_at IS NULL AND priority IN (0, 1, 2) AND available_at <= ?1),
    (SELECT min(available_at) FROM outbox INDEXED BY outbox_due_idx
        WHERE processed_at IS NULL AND priority IN (0, 1, 2) AND available_at <= ?1),
    (SELECT count(*) FROM notifications WHERE status = 'failed'),
    (SELECT count(*) FROM outbox INDEXED BY outbox_due_idx
        WHERE processed_at IS NULL AND priority IN (0, 1, 2) AND available_at <= ?1
          AND event_type IN (` + statusTypeList + `)),
    (SELECT count(*) FROM (SELECT 1 FROM outbox INDEXED BY outbox_due_idx
        WHERE processed_at IS NULL AND priority IN (0, 1, 2) AND available_at > ?1
        LIMIT ?2))`

// OutboxStats counts the due unprocessed outbox rows and how long the one
// due the longest has been due, the scheduled rows (up to
// notify.ScheduledCap), and the dead letters.
func (s *Store) OutboxStats(ctx context.Context) (notify.OutboxStats, error) {
	var (
		st     notify.OutboxStats
		oldest sql.NullString
	)
	t := now()
	err := s.read.QueryRowContext(ctx, selectOutboxStats, formatTime(t), notify.ScheduledCap+1).
		Scan(&st.Unprocessed, &oldest, &st.DeadLetters, &st.UnprocessedStatus, &st.Scheduled)
	if err != nil {
		return notify.OutboxStats{}, fmt.Errorf("outbox stats: %w", classify(err))
	}
	if oldest.Valid {
		at, err := parseTime(oldest.String)
		if err != nil {
			return notify.OutboxStats{}, fmt.Errorf("outbox stats: %w", err)
		}
		st.OldestAge = max(t.Sub(at), 0)
	}
	if st.Scheduled > notify.ScheduledCap {
		st.Scheduled, st.ScheduledCapped = notify.ScheduledCap, true
	}
	return st, nil
}

// One statement claims: SQLite has no SKIP LOCKED, but the write lock
// serializes claimers, so the subquery and the update see the same rows and
// two workers can never lease the same row. Every row but the status
// events, which are the relay's, never a worker's: the notifications, and
// a row of a type herald does not know, which the worker dead-letters as
// poison.
//
// Due rows are taken rank by rank (the high rows first, the bulk ones
// last: issue 34, point 5), each rank in due order, (available_at, id),
// from outbox_work_due_idx, (priority, available_at, id) (migrations 0013,
// 0018, whose predicate the type condition repeats): priority IN (0, 1, 2)
// searches one range per rank, in rank order and without a sort; each
// search starts at the earliest due time and stops at now (?3), the whole
// after ?4 rows, and reads no row that is not due. The lease moves
// the row's available_at to its end (?2, as locked_until), so a leased row
// is not due, and one whose lease has passed is due again: its worker died
// or stalled, and the row must not be lost. A row handed back due at once
// (Reschedule) is due at that moment, behind every row due before it, not
// ahead of them as its id would put it. The test of locked_until is a
// guard for a lease that left available_at alone (one taken before
// migration 0013): it reads nothing more. The index is named (INDEXED BY):
// outbox_due_idx (migration 0017), the relay's, gives the same order with
// the status events in it, and the planner may otherwise take it.
const claimOutbox = `
UPDATE outbox SET locked_by = ?1, locked_until = ?2, available_at = ?2
WHERE id IN (
    SELECT id FROM outbox INDEXED BY outbox_work_due_idx
    WHERE processed_at IS NULL
      AND event_type NOT IN (` + statusTypeList + `)
      AND priority IN (0, 1, 2)
      AND available_at <= ?3
      AND (locked_until IS NULL OR locked_until < ?3)
    ORDER BY priority, available_at, id
    LIMIT ?4)
RETURNING id, event_type, payload, attempts, occurred_at, coalesce(traceparent, ''), priority`

// Claim leases up to limit due outbox rows, the highest priority first
// and then the earliest due, to token until now + lease, and returns them
// highest priority first, then in id order. It implements
// table.Queue.
func (s *Store) Claim(ctx context.Context, token string, limit int, lease time.Duration) ([]notify.Message, error) {
	switch {
	case token == "":
		return nil, errors.New("claim outbox rows: empty lease token")
	case limit < 1:
		return nil, fmt.Errorf("claim outbox rows: limit must be at least 1, got %d", limit)
	case lease <= 0:
		return nil, fmt.Errorf("claim outbox rows: lease must be positive, got %s", lease)
	}
	var msgs []notify.Message
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t := now()
		rows, err := tx.QueryContext(ctx, claimOutbox, token, formatTime(t.Add(lease)), formatTime(t), limit)
		if err != nil {
			return classify(err)
		}
		msgs, err = collect(rows, func(r *sql.Rows) (notify.Message, error) {
			var (
				m          notify.Message
				payload    string
				occurredAt string
				rank       int
			)
			err := r.Scan(&m.ID, &m.Type, &payload, &m.RetryCount, &occurredAt, &m.Traceparent, &rank)
			if err != nil {
				return m, fmt.Errorf("scan: %w", err)
			}
			m.Priority = notify.PriorityOfRank(rank)
			m.Payload = []byte(payload)
			m.OccurredAt, err = parseTime(occurredAt)
			return m, err
		})
		return classify(err)
	})
	if err != nil {
		return nil, fmt.Errorf("claim outbox rows: %w", err)
	}
	// RETURNING gives no order guarantee: highest priority first, then id
	// order.
	slices.SortFunc(msgs, func(a, b notify.Message) int {
		return cmp.Or(cmp.Compare(a.Priority.Rank(), b.Priority.Rank()), cmp.Compare(a.ID, b.ID))
	})
	return msgs, nil
}

// Finish and Reschedule compare and set on the lease: a worker whose lease
// ran out, and whose row another worker has claimed since, must not settle
// that worker's delivery.

const finishOutbox = `
UPDATE outbox SET processed_at = ?, locked_until = NULL, last_error = coalesce(?, last_error)
WHERE id IN (SELECT value FROM json_each(?)) AND locked_by = ? AND processed_at IS NULL`

// Finish marks rows leased to token processed, in one statement; a
// non-empty reason records them as dead-lettered (last_error = reason). It
// implements table.Queue; the rows are found by id (the outbox is one
// table here, and OccurredAt is not needed).
func (s *Store) Finish(ctx context.Context, rows []notify.OutboxKey, token, reason string) error {
	if len(rows) == 0 {
		return nil
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	list, err := json.Marshal(ids)
	if err != nil {
		return fmt.Errorf("finish outbox rows: %w", err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, finishOutbox, formatTime(now()), nullString(reason), string(list), token)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("finish %d outbox rows: %w", len(ids), err)
	}
	return nil
}

const rescheduleOutbox = `
UPDATE outbox SET locked_by = NULL, locked_until = NULL, available_at = ?,
    attempts = attempts + ?, last_error = CASE WHEN ? THEN ? ELSE last_error END
WHERE id = ? AND locked_by = ? AND processed_at IS NULL`

// Reschedule ends the lease of a row leased to token and makes it due again
// after delay; with retry it counts a retry (attempts+1) and keeps reason as
// last_error (an empty reason clears it); without, last_error stays as it
// was. It implements table.Queue; the row is found by id.
func (s *Store) Reschedule(ctx context.Context, row notify.OutboxKey, token string, delay time.Duration, reason string, retry bool) error {
	id := row.ID
	inc := 0
	if retry {
		inc = 1
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, rescheduleOutbox,
			formatTime(now().Add(max(delay, 0))), inc, retry, nullString(reason), id, token)
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("reschedule outbox row %d: %w", id, err)
	}
	return nil
}
