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

	// reconcilePlan keeps selectStale on notifications_pending_idx, the
	// one index that yields pending rows already in (updated_at, id) order
	// and starts at the cut-off. Statistics gathered while every
	// notification was sent make the pending ones look like a handful, and
	// the planner then prefers notifications_status_created_idx plus a sort,
	// which reads every pending notification per pass; without a sort that
	// plan is not a choice. For this transaction only.
	reconcilePlan = `SET LOCAL enable_sort = off`

	// selectStale finds, from notifications_pending_idx, the pending
	// notifications with no unprocessed notification.requested outbox row
	// (a status event of an earlier settling, before a redrive, does not
	// count: it carries no delivery) (one lookup each in
	// outbox_notification_idx; "unprocessed" is written so that
	// outbox_unprocessed_idx cannot answer it, see migration 0007) that have not changed for $1
	// microseconds and whose scheduled retry, if any, was due that long
	// ago. Rows a worker holds are skipped: it is recording their outcome
	// right now. So are the notifications to a destination that is failing
	// or disabled (a record in destinations): their event is parked in the
	// broker until the destination's next turn, as long as the outage
	// lasts, and a fresh event each HERALD_RECONCILE_AFTER would add a
	// parked copy each time; they are reconciled once the record goes. A
	// failing record no worker has written for as long as the cut-off
	// says nothing any more: during an outage every trial of the
	// destination (at most a sender backoff ceiling apart, a minute by
	// default) writes it again, so a record that old was left by workers
	// that are gone, or is kept by no parked event at all (a queue
	// purged by hand): those notifications are reconciled. The cut-off is the database's clock minus the duration
	// (the timestamps it is compared with were written on that clock, never
	// an app's), computed once, in a subquery: a value the index scan can
	// start from, which clock_timestamp() itself, volatile, is not.
	selectStale = `
WITH cut AS MATERIALIZED (SELECT clock_timestamp() - $1::bigint * interval '1 microsecond' AS t)
SELECT n.id, n.user_id, n.channel, n.recipient, n.subject, n.body, n.priority
FROM notifications n
WHERE n.status = 'pending'
  AND n.updated_at < (SELECT t FROM cut)
  AND (n.retry_due_at IS NULL OR n.retry_due_at < (SELECT t FROM cut))
  AND (n.claimed_until IS NULL OR n.claimed_until < clock_timestamp())
  AND NOT EXISTS (
      SELECT 1 FROM outbox o
      WHERE o.payload->>'notification_id' = n.id::text
        AND o.event_type = '` + notify.EventRequested + `'
        AND COALESCE(o.processed_at, 'infinity') = 'infinity')
  AND NOT EXISTS (SELECT 1 FROM destinations d WHERE d.key = n.destination
      AND (d.state = 'disabled' OR d.updated_at >= (SELECT t FROM cut)))
ORDER BY n.updated_at, n.id
LIMIT $2
FOR UPDATE OF n SKIP LOCKED`

	// touchReconciled restarts the clock of a reconciled notification, so
	// that the next pass leaves it alone for another interval.
	touchReconciled = `UPDATE notifications SET updated_at = now(), retry_due_at = NULL WHERE id = $1`
)

// Reconcile gives stale pending notifications a fresh outbox event. See
// reconcile.Reannouncer.
func (s *Store) Reconcile(ctx context.Context, after time.Duration, limit int) ([]int64, error) {
	tx, err := s.begin(ctx)
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
	if _, err := tx.Exec(ctx, reconcilePlan); err != nil {
		return nil, wrap("reconcile: plan", err)
	}
	rows, err := tx.Query(ctx, selectStale, after.Microseconds(), limit)
	if err != nil {
		return nil, wrap("reconcile: select", err)
	}
	stale, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (notify.Notification, error) {
		var (
			n    notify.Notification
			rank int16
		)
		err := r.Scan(&n.ID, &n.UserID, &n.Channel, &n.To, &n.Subject, &n.Body, &rank)
		n.Priority = notify.PriorityOfRank(int(rank))
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
		if _, err := tx.Exec(ctx, insertOutbox, notify.EventRequested, payload, "", nil, int16(n.Priority.Rank())); err != nil {
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
