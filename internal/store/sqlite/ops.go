package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// selectDeadLetters walks notifications_failed_idx newest first. Every
// filter is optional (NULL or empty switches it off) so that the statement
// stays one constant; the ids come as one JSON array, which json_each
// unpacks, rather than as a variable number of parameters. LIMIT -1 is no
// limit.
const selectDeadLetters = `
SELECT ` + notificationColumns + `
FROM notifications
WHERE status = 'failed'
  AND (?1 IS NULL OR id IN (SELECT value FROM json_each(?1)))
  AND (?2 IS NULL OR failed_at >= ?2)
  AND (?3 = '' OR instr(lower(coalesce(last_error, '')), lower(?3)) > 0)
  AND (?5 IS NULL OR failed_at < ?5 OR (failed_at = ?5 AND id < ?6))
ORDER BY failed_at DESC, id DESC
LIMIT ?4`

// DeadLetters returns the failed notifications that match f, newest failure
// first (failed_at, then id, descending), resuming after f.After when it is
// set. ErrorContains ignores the case of
// ASCII letters (SQLite's lower() folds nothing else).
func (s *Store) DeadLetters(ctx context.Context, f notify.DeadLetterFilter) ([]notify.Notification, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("list dead letters: limit must not be negative, got %d", f.Limit)
	}
	var ids, since sql.NullString
	if len(f.IDs) > 0 {
		b, err := json.Marshal(f.IDs)
		if err != nil {
			return nil, fmt.Errorf("list dead letters: encode ids: %w", err)
		}
		ids = sql.NullString{String: string(b), Valid: true}
	}
	if !f.Since.IsZero() {
		since = sql.NullString{String: formatTime(f.Since), Valid: true}
	}
	limit := -1
	if f.Limit > 0 {
		limit = f.Limit
	}
	var afterAt sql.NullString
	var afterID int64
	if f.After != nil {
		afterAt, afterID = sql.NullString{String: formatTime(f.After.FailedAt), Valid: true}, f.After.ID
	}
	rows, err := s.read.QueryContext(ctx, selectDeadLetters, ids, since, f.ErrorContains, limit, afterAt, afterID)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", classify(err))
	}
	out, err := collect(rows, collectNotification)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", classify(err))
	}
	return out, nil
}

// redriveNotification is the compare-and-set that makes a redrive safe: only
// a failed notification goes back to pending, so one that was sent (or
// redriven already) is never delivered again. last_error describes the
// current state, so it is cleared until a new failure; attempts keeps
// counting, and delivery_attempts keeps the history.
const redriveNotification = `
UPDATE notifications SET status = 'pending', failed_at = NULL, last_error = NULL, updated_at = ?1
WHERE id = ?2 AND status = 'failed'
RETURNING id, user_id, channel, recipient, subject, body, priority`

// Redrive puts a dead-lettered notification back to pending and writes a
// fresh notification.requested event for it, in one transaction, then wakes
// the subscribers. The event gets a new outbox id: the dead message's id
// stays in processed_messages, and the new delivery must not be taken for a
// duplicate of it. Redrive reports false, writing nothing, for a notification
// that is not failed (pending or sent); a missing one is notify.ErrNotFound.
func (s *Store) Redrive(ctx context.Context, id int64) (bool, error) {
	redriven := false
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		t := formatTime(now())
		var (
			n    notify.Notification
			rank int
		)
		err := tx.QueryRowContext(ctx, redriveNotification, t, id).
			Scan(&n.ID, &n.UserID, &n.Channel, &n.To, &n.Subject, &n.Body, &rank)
		if errors.Is(err, sql.ErrNoRows) {
			var exists bool
			if err := tx.QueryRowContext(ctx,
				`SELECT EXISTS (SELECT 1 FROM notifications WHERE id = ?)`, id).Scan(&exists); err != nil {
				return classify(err)
			}
			if !exists {
				return notify.ErrNotFound
			}
			return nil
		}
		if err != nil {
			return classify(err)
		}
		payload, err := notify.RequestedPayload(n)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insertOutbox, notify.EventRequested, string(payload), t, t, nil, rank); err != nil {
			return fmt.Errorf("insert outbox event: %w", classify(err))
		}
		redriven = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("redrive notification %d: %w", id, err)
	}
	if redriven {
		s.hub.Wake()
	}
	return redriven, nil
}

// pruneOutbox deletes one batch of processed rows, oldest first, from
// outbox_processed_idx (a comparison on processed_at implies the index's
// NOT NULL condition).
const pruneOutbox = `
DELETE FROM outbox
WHERE id IN (
    SELECT id FROM outbox
    WHERE processed_at < ?1
    ORDER BY processed_at
    LIMIT ?2)`

// pruneProcessed deletes one batch of old dedup rows whose outbox row is
// gone. While the outbox row exists its event may still be delivered, and the
// dedup row is what makes that delivery a duplicate. A row a claim holds
// (processed_at NULL, a send in flight) never compares below the cut, so it
// is never pruned.
const pruneProcessed = `
DELETE FROM processed_messages
WHERE message_id IN (
    SELECT pm.message_id FROM processed_messages AS pm
    WHERE pm.processed_at < ?1
      AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.id = pm.message_id)
    ORDER BY pm.processed_at
    LIMIT ?2)`

// Prune deletes the outbox rows processed before before (dead-lettered ones
// included: the failed notification is the lasting record, and a redrive
// writes a fresh event), then the processed_messages rows recorded before
// before whose outbox row is gone. It deletes in batches of at most batch
// rows, each its own write transaction, so that the single write lock is
// taken only briefly and other writers get their turn in between, until a
// batch comes back short. Notifications are never pruned. On an error the
// result counts what was deleted so far.
func (s *Store) Prune(ctx context.Context, before time.Time, batch int) (notify.PruneResult, error) {
	var res notify.PruneResult
	if batch < 1 {
		return res, fmt.Errorf("prune: batch must be at least 1, got %d", batch)
	}
	cut := formatTime(before)
	var err error
	res.Outbox, err = s.pruneBatches(ctx, pruneOutbox, cut, batch)
	if err != nil {
		return res, fmt.Errorf("prune outbox: %w", err)
	}
	res.ProcessedMessages, err = s.pruneBatches(ctx, pruneProcessed, cut, batch)
	if err != nil {
		return res, fmt.Errorf("prune processed messages: %w", err)
	}
	return res, nil
}

// pruneBatches runs one batch delete until it deletes fewer than batch rows,
// and returns the total.
func (s *Store) pruneBatches(ctx context.Context, query, cut string, batch int) (int64, error) {
	var total int64
	for {
		var n int64
		err := s.inTx(ctx, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, query, cut, batch)
			if err != nil {
				return classify(err)
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(batch) {
			return total, nil
		}
	}
}

// PruneOlderThan is Prune with the cut-off age before now. The process's
// clock is the database's here (SQLite is embedded: every timestamp in the
// file was written by this clock).
func (s *Store) PruneOlderThan(ctx context.Context, age time.Duration, batch int) (notify.PruneResult, error) {
	return s.Prune(ctx, now().Add(-age), batch)
}
