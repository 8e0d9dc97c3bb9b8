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

const markSent = `
UPDATE notifications SET status = 'sent', attempts = attempts + 1, sent_at = ?, updated_at = ?
WHERE id = ? AND status = 'pending'`

// errSendFailed carries send's error out of the transaction untouched.
type errSendFailed struct{ err error }

func (e errSendFailed) Error() string { return e.err.Error() }

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
	var outcome notify.Outcome
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t := formatTime(now())
		res, err := tx.ExecContext(ctx, insertProcessed, msgID, t)
		if err != nil {
			return fmt.Errorf("record message %d: %w", msgID, classify(err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("record message %d: %w", msgID, err)
		} else if n == 0 {
			outcome = notify.OutcomeDuplicate
			return errRollback
		}
		// The write lock is the row lock: nothing can change the
		// notification between this read and the update below.
		var status string
		err = tx.QueryRowContext(ctx, `SELECT status FROM notifications WHERE id = ?`, notificationID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return notify.Permanent(fmt.Errorf("notification %d: %w", notificationID, notify.ErrNotFound))
		}
		if err != nil {
			return fmt.Errorf("read notification %d: %w", notificationID, classify(err))
		}
		if notify.Status(status) != notify.StatusPending {
			// Settled already (by an earlier copy, or dead-lettered):
			// keep the dedup row so later copies stop at once.
			outcome = notify.OutcomeDuplicate
			return nil
		}
		if err := send(ctx); err != nil {
			return errSendFailed{err}
		}
		res, err = tx.ExecContext(ctx, markSent, t, t, notificationID)
		if err != nil {
			return fmt.Errorf("mark notification %d sent: %w", notificationID, classify(err))
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("mark notification %d sent: %w", notificationID, err)
		} else if n == 0 {
			// Cannot happen under the write lock; if it did, the
			// notification was settled by someone else.
			outcome = notify.OutcomeDuplicate
			return nil
		}
		outcome = notify.OutcomeSent
		return nil
	})
	var sendErr errSendFailed
	switch {
	case errors.Is(err, errRollback):
		return outcome, nil
	case errors.As(err, &sendErr):
		return "", sendErr.err
	case notify.IsPermanent(err):
		return "", err
	case err != nil:
		return "", fmt.Errorf("deliver message %d: %w", msgID, err)
	}
	return outcome, nil
}

// errRollback ends a transaction that has nothing to write, without being an
// error for the caller.
var errRollback = errors.New("rollback")

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
		q := `UPDATE notifications SET attempts = attempts + 1, last_error = ?, updated_at = ?
			WHERE id = ? AND status = 'pending'`
		args := []any{reason, t, notificationID}
		if dead {
			q = `UPDATE notifications SET attempts = attempts + 1, last_error = ?, updated_at = ?,
				status = 'failed', failed_at = ?
				WHERE id = ? AND status = 'pending'`
			args = []any{reason, t, t, notificationID}
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return fmt.Errorf("update notification %d: %w", notificationID, classify(err))
		}
		if !dead {
			return nil
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
