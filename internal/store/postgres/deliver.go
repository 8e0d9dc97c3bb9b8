package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// insertProcessed claims a message id. A second transaction inserting
	// the same id waits for the first to end: it goes on only if the first
	// rolled back, so two deliveries of one message never both send.
	insertProcessed = `INSERT INTO processed_messages (message_id) VALUES ($1) ON CONFLICT DO NOTHING`

	lockNotification = `SELECT status FROM notifications WHERE id = $1 FOR UPDATE`

	markSent = `
UPDATE notifications
SET status = 'sent', attempts = attempts + 1, sent_at = now(), updated_at = now()
WHERE id = $1 AND status = 'pending'`

	recordRetry = `
UPDATE notifications
SET attempts = attempts + 1, last_error = $2, updated_at = now()
WHERE id = $1 AND status = 'pending'`

	recordDead = `
UPDATE notifications
SET status = 'failed', attempts = attempts + 1, last_error = $2, failed_at = now(), updated_at = now()
WHERE id = $1 AND status = 'pending'`
)

// Deliver applies message msgID to its notification at most once: in one
// transaction, held across send, it records msgID in processed_messages
// (already there: OutcomeDuplicate), locks the notification (missing: a
// permanent notify.ErrNotFound; no longer pending: OutcomeDuplicate, msgID
// kept), calls send and marks the notification sent. When send fails
// everything rolls back and send's error is returned as is.
func (s *Store) Deliver(ctx context.Context, msgID, notificationID int64, send func(context.Context) error) (notify.Outcome, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return "", wrap("deliver: begin", err)
	}
	defer rollback(tx)

	tag, err := tx.Exec(ctx, insertProcessed, msgID)
	if err != nil {
		return "", wrap(fmt.Sprintf("deliver message %d: record", msgID), err)
	}
	if tag.RowsAffected() == 0 {
		return notify.OutcomeDuplicate, nil
	}
	var status string
	err = tx.QueryRow(ctx, lockNotification, notificationID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notify.Permanent(fmt.Errorf("deliver message %d: notification %d: %w", msgID, notificationID, notify.ErrNotFound))
	}
	if err != nil {
		return "", wrap(fmt.Sprintf("deliver message %d: lock notification %d", msgID, notificationID), err)
	}
	if notify.Status(status) != notify.StatusPending {
		if err := tx.Commit(ctx); err != nil {
			return "", wrap(fmt.Sprintf("deliver message %d: commit", msgID), err)
		}
		return notify.OutcomeDuplicate, nil
	}
	if err := send(ctx); err != nil {
		return "", err
	}
	// The mail is gone: record it even if ctx ended meanwhile (a worker
	// shutting down), or the redelivery would send it again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if _, err := tx.Exec(mctx, markSent, notificationID); err != nil {
		return "", wrap(fmt.Sprintf("deliver message %d: mark sent", msgID), err)
	}
	if err := tx.Commit(mctx); err != nil {
		return "", wrap(fmt.Sprintf("deliver message %d: commit", msgID), err)
	}
	return notify.OutcomeSent, nil
}

// RecordFailure records a failed attempt on a pending notification: attempts
// and last_error, and with dead also status failed and, in the same
// transaction, msgID in processed_messages so that a redelivery of the
// message is a duplicate. A missing or no longer pending notification is left
// alone; with dead, msgID is still recorded.
func (s *Store) RecordFailure(ctx context.Context, msgID, notificationID int64, reason string, dead bool) error {
	if !dead {
		if _, err := s.pool.Exec(ctx, recordRetry, notificationID, reason); err != nil {
			return wrap(fmt.Sprintf("record failure of notification %d", notificationID), err)
		}
		return nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap("record dead letter: begin", err)
	}
	defer rollback(tx)
	if _, err := tx.Exec(ctx, recordDead, notificationID, reason); err != nil {
		return wrap(fmt.Sprintf("record dead letter of notification %d", notificationID), err)
	}
	if _, err := tx.Exec(ctx, insertProcessed, msgID); err != nil {
		return wrap(fmt.Sprintf("record dead letter: message %d", msgID), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap("record dead letter: commit", err)
	}
	return nil
}
