package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
)

const insertProcessed = `
INSERT INTO processed_messages (message_id, processed_at) VALUES (?, ?)
ON CONFLICT (message_id) DO NOTHING`

const selectStatus = `SELECT status FROM notifications WHERE id = ?`

// markSent uses one timestamp for sent_at and updated_at (?1).
const markSent = `
UPDATE notifications SET status = 'sent', attempts = attempts + 1, sent_at = ?1, updated_at = ?1
WHERE id = ?2 AND status = 'pending'`

const recordRetry = `
UPDATE notifications SET attempts = attempts + 1, last_error = ?1, updated_at = ?2
WHERE id = ?3 AND status = 'pending'`

const recordDead = `
UPDATE notifications SET status = 'failed', attempts = attempts + 1, last_error = ?1,
    failed_at = ?2, updated_at = ?2
WHERE id = ?3 AND status = 'pending'`

// Deliver applies message msgID to notification notificationID at most once,
// calling send inside the transaction that records it. It implements
// worker.Store.
//
// The write transaction (and so the store's only write connection) is held
// while send runs: writes of this process wait for it and those of other
// processes on the file wait up to the busy timeout. That is the price of
// the dedup row, the status change and the send agreeing; it is paid only
// for as long as an SMTP hand-off takes.
func (s *Store) Deliver(ctx context.Context, msgID, notificationID int64, send func(context.Context) error) (notify.Outcome, error) {
	tx, err := s.beginDetachable(ctx)
	if err != nil {
		return "", fmt.Errorf("deliver message %d: %w", msgID, err)
	}
	defer tx.end()

	t := formatTime(now())
	res, err := tx.ExecContext(ctx, insertProcessed, msgID, t)
	if err != nil {
		return "", fmt.Errorf("deliver message %d: record: %w", msgID, classify(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return "", fmt.Errorf("deliver message %d: record: %w", msgID, err)
	} else if n == 0 {
		return notify.OutcomeDuplicate, nil
	}
	// The write lock is the row lock: nothing can change the notification
	// between this read and the update below.
	var status string
	err = tx.QueryRowContext(ctx, selectStatus, notificationID).Scan(&status)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notify.Permanent(fmt.Errorf("deliver message %d: notification %d: %w", msgID, notificationID, notify.ErrNotFound))
	}
	if err != nil {
		return "", fmt.Errorf("deliver message %d: read notification %d: %w", msgID, notificationID, classify(err))
	}
	if notify.Status(status) != notify.StatusPending {
		// Settled already (by an earlier message, or dead-lettered):
		// keep the dedup row so that later copies stop at once.
		if err := tx.Commit(); err != nil {
			return "", fmt.Errorf("deliver message %d: commit: %w", msgID, classify(err))
		}
		return notify.OutcomeDuplicate, nil
	}
	if !tx.detach() {
		return "", fmt.Errorf("deliver message %d: %w", msgID, ctx.Err())
	}
	if err := send(ctx); err != nil {
		return "", err
	}
	// The mail is gone: record it even if ctx ended meanwhile (a worker
	// shutting down), or the redelivery would send it again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if _, err := tx.ExecContext(mctx, markSent, formatTime(now()), notificationID); err != nil {
		return "", fmt.Errorf("deliver message %d: mark sent: %w", msgID, classify(err))
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("deliver message %d: commit: %w", msgID, classify(err))
	}
	return notify.OutcomeSent, nil
}

// RecordFailure records a failed attempt on a pending notification
// (attempts+1, last_error); with dead it also marks it failed and records
// msgID in processed_messages, in the same transaction, so that no later
// copy of the message is applied. A notification that is missing or no
// longer pending is left alone; with dead, msgID is recorded all the same (as
// the PostgreSQL store does): the message is settled either way. It
// implements worker.Store.
func (s *Store) RecordFailure(ctx context.Context, msgID, notificationID int64, reason string, dead bool) error {
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t := formatTime(now())
		if !dead {
			if _, err := tx.ExecContext(ctx, recordRetry, reason, t, notificationID); err != nil {
				return fmt.Errorf("update notification %d: %w", notificationID, classify(err))
			}
			return nil
		}
		if _, err := tx.ExecContext(ctx, recordDead, reason, t, notificationID); err != nil {
			return fmt.Errorf("update notification %d: %w", notificationID, classify(err))
		}
		if _, err := tx.ExecContext(ctx, insertProcessed, msgID, t); err != nil {
			return fmt.Errorf("record message %d: %w", msgID, classify(err))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record failure of message %d: %w", msgID, err)
	}
	return nil
}
