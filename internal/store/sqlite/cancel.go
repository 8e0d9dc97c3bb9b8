package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// cancelNotification is the cancel's compare-and-set: a pending
	// notification (scheduled included) that no live claim holds (?2 is
	// now) becomes canceled. SQLite's single writer orders it with a
	// worker's claim, which reads the status in its own write
	// transaction: a claim after the cancel finds it canceled (duplicate:
	// acknowledged, never sent); a claim before it holds a live lease
	// (claimed_until), and the cancel changes nothing.
	cancelNotification = `
UPDATE notifications
SET status = 'canceled', canceled_at = ?2, updated_at = ?2, claim_attempt_id = NULL, claimed_until = NULL
WHERE id = ?1 AND status = 'pending' AND (claimed_until IS NULL OR claimed_until < ?2)
RETURNING ` + notificationColumns

	// settleCanceledEvents marks the notification's unprocessed
	// notification.requested rows processed, in the cancel's transaction,
	// found by outbox_notification_idx: a scheduled one's event never
	// reaches a worker or a broker.
	settleCanceledEvents = `
UPDATE outbox SET processed_at = ?2, locked_until = NULL
WHERE json_extract(payload, '$.notification_id') = ?1 AND event_type = '` + notify.EventRequested + `' AND processed_at IS NULL`
)

// Cancel cancels a pending or scheduled notification that no send holds,
// with its notification.canceled status event, in one write transaction.
// See api.Notifications.
func (s *Store) Cancel(ctx context.Context, id int64) (notify.Notification, error) {
	var (
		n       notify.Notification
		changed bool
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t := formatTime(now())
		var err error
		n, err = scanNotification(tx.QueryRowContext(ctx, cancelNotification, id, t))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return classify(err)
		}
		changed = true
		if s.statusEvents {
			payload, err := notify.StatusPayload(n, *n.CanceledAt)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insertOutbox, notify.EventCanceled, string(payload), t, t, nil, notify.RankNormal); err != nil {
				return fmt.Errorf("insert status event: %w", classify(err))
			}
		}
		if _, err := tx.ExecContext(ctx, settleCanceledEvents, notify.FormatID(id), t); err != nil {
			return fmt.Errorf("settle its events: %w", classify(err))
		}
		return nil
	})
	if err != nil {
		return notify.Notification{}, fmt.Errorf("cancel notification %d: %w", id, err)
	}
	if changed {
		s.hub.Wake()
		return n, nil
	}
	cur, err := s.Get(ctx, id)
	if err != nil {
		return notify.Notification{}, fmt.Errorf("cancel notification: %w", err)
	}
	return notify.CancelAnswer(cur)
}
