package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// claimRelayBatch is answered from outbox_unprocessed_idx: it walks the
	// partial index in id order and stops after limit rows it could lock.
	claimRelayBatch = `
SELECT id, event_type, payload, occurred_at
FROM outbox
WHERE processed_at IS NULL
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED`

	markRelayed = `UPDATE outbox SET processed_at = now() WHERE id = ANY($1) AND processed_at IS NULL`

	// selectOutboxStats reads the backlog from outbox_unprocessed_idx and
	// counts the dead letters from notifications_failed_idx, in one round
	// trip and one snapshot.
	selectOutboxStats = `
SELECT backlog.n, backlog.age,
	(SELECT count(*) FROM notifications WHERE status = 'failed')
FROM (
	SELECT count(*) AS n, COALESCE(EXTRACT(EPOCH FROM now() - min(occurred_at)), 0)::float8 AS age
	FROM outbox
	WHERE processed_at IS NULL
) AS backlog`
)

// markTimeout bounds recording an effect that already happened (events the
// broker confirmed, a mail the server accepted). The recording runs even when
// the caller's context has ended meanwhile: skipping it would repeat the
// effect.
const markTimeout = 10 * time.Second

// RelayBatch claims up to limit unprocessed outbox rows in id order, skipping
// rows another relay holds, calls publish with them, and in the same
// transaction marks processed exactly the claimed rows whose ids publish
// returned, even when publish also failed (its error is returned, wrapped).
// It returns the number of rows claimed; 0 means publish was not called.
func (s *Store) RelayBatch(ctx context.Context, limit int, publish func(context.Context, []notify.Event) ([]int64, error)) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("relay batch: limit must be at least 1, got %d", limit)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, wrap("relay batch: begin", err)
	}
	defer rollback(tx)

	rows, err := tx.Query(ctx, claimRelayBatch, limit)
	if err != nil {
		return 0, wrap("relay batch: claim", err)
	}
	var events []notify.Event
	for rows.Next() {
		var e notify.Event
		if err := rows.Scan(&e.ID, &e.Type, &e.Payload, &e.OccurredAt); err != nil {
			rows.Close()
			return 0, wrap("relay batch: claim", err)
		}
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return 0, wrap("relay batch: claim", err)
	}
	if len(events) == 0 {
		return 0, nil
	}

	confirmed, pubErr := publish(ctx, events)
	// Only rows this transaction holds may be marked: an id from elsewhere
	// could belong to another relay's batch.
	var mark []int64
	for _, id := range confirmed {
		if slices.ContainsFunc(events, func(e notify.Event) bool { return e.ID == id }) {
			mark = append(mark, id)
		}
	}
	if len(mark) > 0 {
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
		defer cancel()
		if _, err := tx.Exec(mctx, markRelayed, mark); err != nil {
			return len(events), wrap("relay batch: mark processed", err)
		}
		if err := tx.Commit(mctx); err != nil {
			return len(events), wrap("relay batch: commit", err)
		}
	}
	if pubErr != nil {
		return len(events), fmt.Errorf("relay batch: publish: %w", pubErr)
	}
	return len(events), nil
}

// OutboxStats reports the backlog (the unprocessed rows and the age of the
// oldest of them, on the database's clock) and the number of dead letters.
func (s *Store) OutboxStats(ctx context.Context) (notify.OutboxStats, error) {
	var (
		st  notify.OutboxStats
		age float64
	)
	if err := s.pool.QueryRow(ctx, selectOutboxStats).Scan(&st.Unprocessed, &age, &st.DeadLetters); err != nil {
		return notify.OutboxStats{}, wrap("outbox stats", err)
	}
	if age > 0 {
		st.OldestAge = time.Duration(age * float64(time.Second))
	}
	return st, nil
}
