package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// claimDue leases due rows of every type but the status events, which
	// are for the relay, never for a worker (it would take one for poison):
	// the notifications, and a row of a type herald does not know, which
	// the worker dead-letters as poison. The type condition is the
	// predicate of outbox_work_unprocessed_idx, written the same way. The CTE is materialized so the locking
	// subquery runs exactly once; rows another worker is claiming right now
	// are skipped, not waited for. Due times and leases are judged and
	// started on clock_timestamp(), the statement's time (see deliver.go,
	// "Clocks").
	claimDue = `
WITH due AS MATERIALIZED (
	SELECT id FROM outbox
	WHERE processed_at IS NULL
	  AND event_type NOT IN ('` + notify.EventSent + `', '` + notify.EventFailed + `')
	  AND available_at <= clock_timestamp()
	  AND (locked_until IS NULL OR locked_until < clock_timestamp())
	ORDER BY id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE outbox o
SET locked_by = $1, locked_until = clock_timestamp() + $3::bigint * interval '1 microsecond'
FROM due
WHERE o.id = due.id
RETURNING o.id, o.event_type, o.payload, o.attempts, o.occurred_at, COALESCE(o.traceparent, '')`

	finishLeased = `
UPDATE outbox
SET processed_at = now(), locked_until = NULL, last_error = COALESCE(NULLIF($3, ''), last_error)
WHERE id = ANY($1) AND locked_by = $2 AND processed_at IS NULL`

	rescheduleLeased = `
UPDATE outbox
SET locked_by = NULL,
    locked_until = NULL,
    available_at = clock_timestamp() + $3::bigint * interval '1 microsecond',
    attempts = attempts + CASE WHEN $5 THEN 1 ELSE 0 END,
    last_error = CASE WHEN $5 THEN NULLIF($4, '') ELSE last_error END
WHERE id = $1 AND locked_by = $2 AND processed_at IS NULL`
)

// Claim leases up to limit due outbox rows that are not status events
// (unprocessed, available, with no live lease) to token until now + lease, and returns them in id order as
// messages whose RetryCount is the row's attempts.
func (s *Store) Claim(ctx context.Context, token string, limit int, lease time.Duration) ([]notify.Message, error) {
	if limit < 1 {
		return nil, fmt.Errorf("claim outbox rows: limit must be at least 1, got %d", limit)
	}
	if lease <= 0 {
		return nil, fmt.Errorf("claim outbox rows: lease must be positive, got %s", lease)
	}
	// One round trip, one implicit transaction: claimPlan, then the claim.
	b := &pgx.Batch{}
	b.Queue(claimPlan)
	b.Queue(claimDue, token, limit, lease.Microseconds())
	br := s.pool.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, wrap("claim outbox rows", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, wrap("claim outbox rows", err)
	}
	defer rows.Close()
	var ms []notify.Message
	for rows.Next() {
		var m notify.Message
		if err := rows.Scan(&m.ID, &m.Type, &m.Payload, &m.RetryCount, &m.OccurredAt, &m.Traceparent); err != nil {
			return nil, wrap("claim outbox rows", err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("claim outbox rows", err)
	}
	rows.Close()
	if err := br.Close(); err != nil {
		return nil, wrap("claim outbox rows", err)
	}
	// RETURNING follows no order.
	slices.SortFunc(ms, func(a, b notify.Message) int { return cmp.Compare(a.ID, b.ID) })
	return ms, nil
}

// Finish marks rows leased to token processed, in one statement; a
// non-empty reason marks them dead-lettered and keeps the reason in
// last_error. A row no longer leased to token is left alone.
func (s *Store) Finish(ctx context.Context, ids []int64, token, reason string) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, finishLeased, ids, token, reason); err != nil {
		return wrap(fmt.Sprintf("finish %d outbox rows", len(ids)), err)
	}
	return nil
}

// Reschedule ends the lease of a row leased to token and makes it due again
// after delay; with retry it counts a retry and keeps reason in last_error. A
// row no longer leased to token is left alone.
func (s *Store) Reschedule(ctx context.Context, id int64, token string, delay time.Duration, reason string, retry bool) error {
	if delay < 0 {
		delay = 0
	}
	if _, err := s.pool.Exec(ctx, rescheduleLeased, id, token, delay.Microseconds(), reason, retry); err != nil {
		return wrap(fmt.Sprintf("reschedule outbox row %d", id), err)
	}
	return nil
}
