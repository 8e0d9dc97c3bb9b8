package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// cancelNotification is the cancel's compare-and-set: a pending
	// notification (scheduled included) that no live claim holds becomes
	// canceled. The row lock it takes orders it with a worker's claim,
	// which locks the notification first (deliver.go, "Lock order") and
	// reads its status afresh: a claim after the cancel finds it canceled
	// (duplicate: acknowledged, never sent); a claim before it holds a
	// live lease (claimed_until), and the cancel changes nothing. A lease
	// that ran out (its worker presumed dead) does not hold it: its late
	// record fails its own compare-and-set on status.
	cancelNotification = `
UPDATE notifications
SET status = 'canceled', canceled_at = now(), updated_at = now(), claim_attempt_id = NULL, claimed_until = NULL
WHERE id = $1 AND status = 'pending' AND (claimed_until IS NULL OR claimed_until < clock_timestamp())
RETURNING ` + notificationColumns

	// settleCanceledEvents marks the notification's unprocessed
	// notification.requested rows processed, in the cancel's transaction:
	// a scheduled one's event never reaches a broker or a worker, and none
	// counts in the backlog. One lookup of outbox_notification_idx per
	// partition. A copy a relay is publishing right now may still reach
	// the broker; its worker's claim then finds the notification canceled.
	settleCanceledEvents = `
UPDATE outbox SET processed_at = now(), locked_until = NULL
WHERE payload->>'notification_id' = $1::text AND event_type = '` + notify.EventRequested + `' AND processed_at IS NULL`
)

// Cancel cancels a pending or scheduled notification that no send holds,
// with its notification.canceled status event, in one transaction. See
// api.Notifications.
func (s *Store) Cancel(ctx context.Context, id int64) (notify.Notification, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return notify.Notification{}, wrap("cancel notification: begin", err)
	}
	defer rollback(tx)
	n, err := scanNotification(tx.QueryRow(ctx, cancelNotification, id))
	if err == nil {
		if s.statusEvents {
			payload, err := notify.StatusPayload(n, *n.CanceledAt)
			if err != nil {
				return notify.Notification{}, err
			}
			if _, err := tx.Exec(ctx, insertOutbox, notify.EventCanceled, payload, "", nil, int16(notify.RankNormal)); err != nil {
				return notify.Notification{}, wrap("cancel notification: insert status event", err)
			}
		}
		if _, err := tx.Exec(ctx, settleCanceledEvents, notify.FormatID(id)); err != nil {
			return notify.Notification{}, wrap("cancel notification: settle its events", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return notify.Notification{}, wrap("cancel notification: commit", err)
		}
		s.announce()
		return n, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return notify.Notification{}, wrap("cancel notification", err)
	}
	_ = tx.Rollback(ctx)
	cur, err := s.Get(ctx, id)
	if err != nil {
		return notify.Notification{}, fmt.Errorf("cancel notification: %w", err)
	}
	return notify.CancelAnswer(cur)
}
