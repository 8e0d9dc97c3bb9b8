package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// selectStale: see the PostgreSQL store (only notification.requested
	// rows count; a disabled destination's, and a failing one's written
	// since the cut-off, are left alone). SQLite's single writer keeps
	// reconcile passes apart without a lock of their own.
	selectStale = `
SELECT n.id, n.user_id, n.channel, n.recipient, n.subject, n.body, n.priority
FROM notifications n
WHERE n.status = 'pending'
  AND n.updated_at < ?1
  AND (n.retry_due_at IS NULL OR n.retry_due_at < ?1)
  AND (n.claimed_until IS NULL OR n.claimed_until < ?3)
  AND NOT EXISTS (
      SELECT 1 FROM outbox o
      WHERE o.processed_at IS NULL AND json_extract(o.payload, '$.notification_id') = CAST(n.id AS TEXT)
        AND o.event_type = '` + notify.EventRequested + `')
  AND NOT EXISTS (SELECT 1 FROM destinations d WHERE d.key = n.destination
      AND (d.state = 'disabled' OR d.updated_at >= ?1))
ORDER BY n.updated_at, n.id
LIMIT ?2`

	touchReconciled = `UPDATE notifications SET updated_at = ?, retry_due_at = NULL WHERE id = ?`
)

// Reconcile gives stale pending notifications a fresh outbox event. See
// reconcile.Reannouncer.
// The process's clock is the database's here (SQLite is embedded: one
// machine, and every timestamp in the file was written by this clock), so
// the cut-off is taken from it.
func (s *Store) Reconcile(ctx context.Context, after time.Duration, limit int) ([]int64, error) {
	var ids []int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		at := now()
		rows, err := tx.QueryContext(ctx, selectStale, formatTime(at.Add(-after)), limit, formatTime(at))
		if err != nil {
			return classify(err)
		}
		stale, err := collect(rows, func(r *sql.Rows) (notify.Notification, error) {
			var (
				n    notify.Notification
				rank int
			)
			err := r.Scan(&n.ID, &n.UserID, &n.Channel, &n.To, &n.Subject, &n.Body, &rank)
			n.Priority = notify.PriorityOfRank(rank)
			return n, err
		})
		if err != nil {
			return classify(err)
		}
		t := formatTime(now())
		for _, n := range stale {
			payload, err := notify.RequestedPayload(n)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insertOutbox, notify.EventRequested, string(payload), t, t, nil, n.Priority.Rank()); err != nil {
				return fmt.Errorf("insert outbox event: %w", classify(err))
			}
			if _, err := tx.ExecContext(ctx, touchReconciled, t, n.ID); err != nil {
				return classify(err)
			}
			ids = append(ids, n.ID)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	if len(ids) > 0 {
		s.hub.Wake()
	}
	return ids, nil
}
