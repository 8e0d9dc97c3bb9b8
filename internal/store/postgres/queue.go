package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/heraldhq/herald/internal/notify"
)

// statusTypeList is the status event types as a list of SQL literals, as
// the predicates of the outbox's work and status indexes write them
// (migrations 0019, 0022): a claim's type condition must be written the same way
// for the planner to take them.
const statusTypeList = `'` + notify.EventSent + `', '` + notify.EventFailed + `', '` + notify.EventCanceled + `', '` + notify.EventExpired + `', '` + notify.EventSuppressed + `'`

// claimDue leases due rows of every type but the status events, which
// are for the relay, never for a worker (it would take one for poison):
// the notifications, and a row of a type herald does not know, which the
// worker dead-letters as poison. The type condition is the predicate of
// outbox_work_due_idx (migrations 0015, 0020), written the same way.
//
// Due rows are taken rank by rank, each rank in due order, (available_at,
// id), from that index (rankedDue, outbox.go): every due high row before
// any normal one, every due normal one before any bulk one, and no row
// that is not due is read (a retry scheduled for later, a leased row, a
// notification whose send_at is ahead). The lease moves available_at to
// its end, as locked_until, so a leased row is not due and one whose
// lease ran out is due again; a row handed back due at once (Reschedule)
// is due at that moment, behind every row of its rank due before it. The
// test of locked_until is a guard for a lease that left available_at alone
// (one taken before migration 0015, by a process of an older herald): it
// reads nothing more.
//
// The lease's end is read once, so locked_until and available_at get the
// same value. The CTEs are materialized so the locking subqueries run
// exactly once; rows another worker is claiming right now are skipped,
// not waited for. It runs on a plan made once (claimPlan, outbox.go): each
// rank's walk is a Merge Append of each partition's outbox_work_due_idx,
// and the due rows are found again by their key in their days' partitions
// (claimedRows). $1 is the lease's token, $2 the limit, $3 the lease.
var claimDue = "WITH " + rankedDue(workTypes, "$2::bigint") + `
UPDATE outbox
SET locked_by = $1, (locked_until, available_at) = (SELECT l.until, l.until FROM (SELECT clock_timestamp() + $3::bigint * interval '1 microsecond' AS until) AS l)
WHERE ` + claimedRows + `
RETURNING id, event_type, payload, attempts, occurred_at, COALESCE(traceparent, ''), priority`

const (
	// finishLeased and rescheduleLeased name their rows by id and bound
	// occurred_at by the rows' own ($4 and $5, $6 and $7; see
	// occurredSpan): planned with the values (the pool's custom plans),
	// they touch only the partitions of those days.
	finishLeased = `
UPDATE outbox
SET processed_at = now(), locked_until = NULL, last_error = COALESCE(NULLIF($3, ''), last_error)
WHERE id = ANY($1) AND occurred_at BETWEEN $4 AND $5 AND locked_by = $2 AND processed_at IS NULL`

	rescheduleLeased = `
UPDATE outbox
SET locked_by = NULL,
    locked_until = NULL,
    available_at = clock_timestamp() + $3::bigint * interval '1 microsecond',
    attempts = attempts + CASE WHEN $5 THEN 1 ELSE 0 END,
    last_error = CASE WHEN $5 THEN NULLIF($4, '') ELSE last_error END
WHERE id = $1 AND occurred_at BETWEEN $6 AND $7 AND locked_by = $2 AND processed_at IS NULL`
)

// Claim leases up to limit due outbox rows that are not status events
// (unprocessed, available_at passed), the highest priority first and
// then the earliest due, to token until now + lease, and returns them
// highest priority first, then in id order, as messages whose
// RetryCount is the row's attempts.
func (s *Store) Claim(ctx context.Context, token string, limit int, lease time.Duration) ([]notify.Message, error) {
	if limit < 1 {
		return nil, fmt.Errorf("claim outbox rows: limit must be at least 1, got %d", limit)
	}
	if lease <= 0 {
		return nil, fmt.Errorf("claim outbox rows: lease must be positive, got %s", lease)
	}
	// One round trip, one implicit transaction: claimPlan, then the claim
	// on the connection's generic plan.
	b := &pgx.Batch{}
	b.Queue(claimPlan)
	b.Queue(claimDue, token, limit, lease.Microseconds())
	br := s.sendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, wrap("claim outbox rows", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, wrap("claim outbox rows", err)
	}
	// AppendRows on nil, not CollectRows: no row gives nil.
	ms, err := pgx.AppendRows([]notify.Message(nil), rows, func(r pgx.CollectableRow) (notify.Message, error) {
		var (
			m    notify.Message
			rank int16
		)
		err := r.Scan(&m.ID, &m.Type, &m.Payload, &m.RetryCount, &m.OccurredAt, &m.Traceparent, &rank)
		m.Priority = notify.PriorityOfRank(int(rank))
		return m, err
	})
	if err != nil {
		return nil, wrap("claim outbox rows", err)
	}
	if err := br.Close(); err != nil {
		return nil, wrap("claim outbox rows", err)
	}
	// RETURNING follows no order: highest priority first, then id order.
	slices.SortFunc(ms, func(a, b notify.Message) int {
		return cmp.Or(cmp.Compare(a.Priority.Rank(), b.Priority.Rank()), cmp.Compare(a.ID, b.ID))
	})
	return ms, nil
}

// Finish marks rows leased to token processed, in one statement; a
// non-empty reason marks them dead-lettered and keeps the reason in
// last_error. A row no longer leased to token is left alone. The rows'
// occurred_at confines the statement to their partitions.
func (s *Store) Finish(ctx context.Context, rows []notify.OutboxKey, token, reason string) error {
	if len(rows) == 0 {
		return nil
	}
	ids, from, to := occurredSpan(rows)
	if _, err := s.pool.Exec(ctx, finishLeased, ids, token, reason, from, to); err != nil {
		return wrap(fmt.Sprintf("finish %d outbox rows", len(rows)), err)
	}
	return nil
}

// Reschedule ends the lease of a row leased to token and makes it due again
// after delay; with retry it counts a retry and keeps reason in last_error. A
// row no longer leased to token is left alone. The row's occurred_at
// confines the statement to its partition.
func (s *Store) Reschedule(ctx context.Context, row notify.OutboxKey, token string, delay time.Duration, reason string, retry bool) error {
	if delay < 0 {
		delay = 0
	}
	_, from, to := occurredSpan([]notify.OutboxKey{row})
	if _, err := s.pool.Exec(ctx, rescheduleLeased, row.ID, token, delay.Microseconds(), reason, retry, from, to); err != nil {
		return wrap(fmt.Sprintf("reschedule outbox row %d", row.ID), err)
	}
	return nil
}

// occurredSpan returns the ids of rows and the span of their occurred_at,
// [from, to], for a statement that names outbox rows by id: with
// occurred_at BETWEEN from AND to beside id = ANY(ids), PostgreSQL plans
// and runs it on the partitions of those days alone (the outbox is
// partitioned by day on occurred_at, migration 0014), where id alone
// would plan over and probe every partition. The span only narrows the
// search: each row's own occurred_at lies in it, so the statement changes
// the rows it would change by id alone. A key without its time (zero)
// leaves the span unbounded, the statement then finds its rows by id in
// every partition, as before.
func occurredSpan(rows []notify.OutboxKey) (ids []int64, from, to pgtype.Timestamptz) {
	ids = make([]int64, len(rows))
	var lo, hi time.Time
	bounded := len(rows) > 0
	for i, r := range rows {
		ids[i] = r.ID
		switch {
		case r.OccurredAt.IsZero():
			bounded = false
		case i == 0:
			lo, hi = r.OccurredAt, r.OccurredAt
		default:
			lo, hi = minTime(lo, r.OccurredAt), maxTime(hi, r.OccurredAt)
		}
	}
	if !bounded {
		return ids, pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true},
			pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	}
	return ids, pgtype.Timestamptz{Time: lo, Valid: true}, pgtype.Timestamptz{Time: hi, Valid: true}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
