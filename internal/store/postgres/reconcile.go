package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

// reconcileLockKey is the pg_advisory_xact_lock key that keeps reconcile
// passes of several api processes apart ("hrecon" in ASCII).
const reconcileLockKey = 0x68_7265_636f_6e

const (
	tryReconcileLock = `SELECT pg_try_advisory_xact_lock($1)`

	// selectStale finds, from notifications_pending_idx, the pending
	// notifications with no unprocessed outbox row (a short scan: the
	// unprocessed rows are the backlog) that have not changed since $1 and
	// whose scheduled retry, if any, was due before $1. Rows a worker holds
	// are skipped: it is recording their outcome right now.
	selectStale = `
SELECT n.id, n.user_id, n.channel, n.recipient, n.subject, n.body
FROM notifications n
WHERE n.status = 'pending'
  AND n.updated_at < $1
  AND (n.retry_due_at IS NULL OR n.retry_due_at < $1)
  AND (n.claimed_until IS NULL OR n.claimed_until < now())
  AND NOT EXISTS (
      SELECT 1 FROM outbox o
      WHERE o.processed_at IS NULL AND o.payload->>'notification_id' = n.id::text)
ORDER BY n.updated_at, n.id
LIMIT $2
FOR UPDATE OF n SKIP LOCKED`

	// touchReconciled restarts the clock of a reconciled notification, so
	// that the next pass leaves it alone for another interval.
	touchReconciled = `UPDATE notifications SET updated_at = now(), retry_due_at = NULL WHERE id = $1`
)

// Reconcile gives stale pending notifications a fresh outbox event. See
// reconcile.Store.
func (s *Store) Reconcile(ctx context.Context, staleBefore time.Time, limit int) ([]int64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, wrap("reconcile: begin", err)
	}
	defer rollback(tx)
	var locked bool
	if err := tx.QueryRow(ctx, tryReconcileLock, int64(reconcileLockKey)).Scan(&locked); err != nil {
		return nil, wrap("reconcile: lock", err)
	}
	if !locked {
		return nil, nil // another process is reconciling
	}
	rows, err := tx.Query(ctx, selectStale, staleBefore, limit)
	if err != nil {
		return nil, wrap("reconcile: select", err)
	}
	stale, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (notify.Notification, error) {
		var n notify.Notification
		err := r.Scan(&n.ID, &n.UserID, &n.Channel, &n.To, &n.Subject, &n.Body)
		return n, err
	})
	if err != nil {
		return nil, wrap("reconcile: select", err)
	}
	ids := make([]int64, 0, len(stale))
	for _, n := range stale {
		payload, err := notify.RequestedPayload(n)
		if err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, insertOutbox, notify.EventRequested, payload); err != nil {
			return nil, wrap("reconcile: insert outbox", err)
		}
		if _, err := tx.Exec(ctx, touchReconciled, n.ID); err != nil {
			return nil, wrap("reconcile: touch", err)
		}
		ids = append(ids, n.ID)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, wrap("reconcile: commit", err)
	}
	if len(ids) > 0 {
		s.announce()
	}
	return ids, nil
}
