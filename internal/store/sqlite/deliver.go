package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/batch"
)

// A delivery's bookkeeping takes two short write transactions, a claim
// before the send and a record after it; the single write connection is
// never held across a send. The write lock is the row lock: nothing changes
// between a read and the write that depends on it inside one transaction,
// and there is no lock order to get wrong.

// selectClaimState reads what a claim decides on: the notification's state,
// and whether the message id is done and which retry count a copy of it
// must carry at least (next_retry_count, 0 without a row: no mark).
const selectClaimState = `
SELECT n.status, n.claimed_until, n.claim_attempt_id,
	COALESCE(pm.processed_at IS NOT NULL, 0), COALESCE(pm.next_retry_count, 0), n.expires_at
FROM notifications AS n LEFT JOIN processed_messages AS pm ON pm.message_id = ?2
WHERE n.id = ?1`

// expireNotification ends a pending notification found past its
// expires_at by a claim (?2 now): no send starts after it (issue 34). It
// returns what its status event says.
const expireNotification = `
UPDATE notifications SET status = 'expired', expired_at = ?2, updated_at = ?2,
	claim_attempt_id = NULL, claimed_until = NULL, retry_due_at = NULL
WHERE id = ?1 AND status = 'pending'
RETURNING user_id, channel, status, attempts, COALESCE(last_error, '')`

// markProcessed records a message id as done, unless it is done already.
const markProcessed = `
INSERT INTO processed_messages (message_id, processed_at) VALUES (?1, ?2)
ON CONFLICT (message_id) DO UPDATE SET processed_at = excluded.processed_at, lease_until = NULL
WHERE processed_messages.processed_at IS NULL`

const insertAttempt = `
INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at)
VALUES (?1, ?2, (SELECT COALESCE(max(attempt), 0) + 1 FROM delivery_attempts WHERE notification_id = ?1), ?3)
RETURNING id, attempt`

const leaseNotification = `UPDATE notifications SET claim_attempt_id = ?1, claimed_until = ?2 WHERE id = ?3`

// dropStaleLease removes the lease row of an expired claim on another
// message of the notification: its holder is presumed dead, and its late
// record will fail the compare-and-set. A row that holds a retry mark is
// kept, released (releaseMarked), for the mark.
const dropStaleLease = `
DELETE FROM processed_messages
WHERE attempt_id = ?1 AND message_id <> ?2 AND processed_at IS NULL AND next_retry_count = 0`

const releaseStaleMarked = `
UPDATE processed_messages SET lease_until = NULL, attempt_id = NULL
WHERE attempt_id = ?1 AND message_id <> ?2 AND processed_at IS NULL`

const leaseMessage = `
INSERT INTO processed_messages (message_id, processed_at, lease_until, attempt_id) VALUES (?1, NULL, ?2, ?3)
ON CONFLICT (message_id) DO UPDATE SET lease_until = excluded.lease_until, attempt_id = excluded.attempt_id
WHERE processed_messages.processed_at IS NULL`

// ClaimAndRecord records results, then answers claims, in one write
// transaction: the worker's
// grouped bookkeeping, one write lock for every delivery that finished or
// started while the previous group ran. It implements worker.Bookkeeper.
func (s *Store) ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, results []notify.DeliveryResult) ([]notify.Claim, []bool, error) {
	if err := notify.CheckBookkeeping(reqs, lease, results); err != nil {
		return nil, nil, err
	}
	claims := make([]notify.Claim, len(reqs))
	recorded := make([]bool, len(results))
	if len(reqs) == 0 && len(results) == 0 {
		return claims, recorded, nil
	}
	stmts, err := s.prepared(ctx, deliveryStatements...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim and record deliveries: %w", err)
	}
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		q := txStmts{ctx: ctx, tx: tx, stmts: stmts}
		t := now()
		if err := recordTx(ctx, q, results, t, s.statusEvents, recorded); err != nil {
			return fmt.Errorf("record deliveries: %w", err)
		}
		var dead []int64
		for i, r := range results {
			if recorded[i] && r.Outcome == notify.AttemptDead {
				dead = append(dead, r.Claim.NotificationID)
			}
		}
		if err := s.fallBack(ctx, tx, dead, t); err != nil {
			return fmt.Errorf("record deliveries: %w", err)
		}
		if err := claimTx(ctx, q, reqs, t, lease, s.statusEvents, claims); err != nil {
			return fmt.Errorf("claim deliveries: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for i, r := range results {
		if s.statusEvents && recorded[i] && (r.Outcome == notify.AttemptSent || r.Outcome == notify.AttemptDead) {
			s.hub.Wake() // a status event was written
			break
		}
	}
	return claims, recorded, nil
}

func claimTx(ctx context.Context, tx txStmts, reqs []notify.ClaimRequest, t time.Time, lease time.Duration, statusEvents bool, out []notify.Claim) error {
	ts := formatTime(t)
	until := t.Add(lease).Truncate(time.Microsecond)
	for _, i := range batch.FirstClaims(reqs, out) {
		c, err := claimOne(ctx, tx, reqs[i], ts, until, statusEvents)
		if err != nil {
			return err
		}
		out[i] = c
	}
	return nil
}

func claimOne(ctx context.Context, tx txStmts, r notify.ClaimRequest, ts string, until time.Time, statusEvents bool) (notify.Claim, error) {
	c := notify.Claim{MessageID: r.MessageID, NotificationID: r.NotificationID}
	c.RetryCount = r.RetryCount
	var (
		status       string
		claimedUntil sql.NullString
		stale        sql.NullInt64
		done         bool
		next         int64 // the least retry count a copy may carry
		expiresAt    sql.NullString
	)
	err := tx.QueryRowContext(ctx, selectClaimState, r.NotificationID, r.MessageID).Scan(&status, &claimedUntil, &stale, &done, &next, &expiresAt)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		c.Status = notify.ClaimMissing
	case err != nil:
		return c, fmt.Errorf("read notification %d: %w", r.NotificationID, classify(err))
	case done || notify.Status(status) != notify.StatusPending:
		c.Status = notify.ClaimDuplicate
	case int64(r.RetryCount) < next:
		// A stale copy: its attempt was spent and a retry recorded. The
		// message id stays open for the retry's copy.
		c.Status = notify.ClaimDuplicate
		return c, nil
	case claimedUntil.Valid && claimedUntil.String > ts:
		c.Status = notify.ClaimBusy
		return c, nil
	case expiresAt.Valid && expiresAt.String <= ts:
		// Past its expires_at: no send starts. It ends expired with its
		// status event, and the message is answered (and recorded) as a
		// duplicate: acknowledged, nothing sent.
		if err := expire(ctx, tx, r.NotificationID, ts, statusEvents); err != nil {
			return c, err
		}
		c.Status = notify.ClaimDuplicate
	default:
		c.Status = notify.ClaimTaken
	}
	if c.Status != notify.ClaimTaken {
		if _, err := tx.ExecContext(ctx, markProcessed, r.MessageID, ts); err != nil {
			return c, fmt.Errorf("record message %d: %w", r.MessageID, classify(err))
		}
		return c, nil
	}
	if err := tx.QueryRowContext(ctx, insertAttempt, r.NotificationID, r.MessageID, ts).Scan(&c.AttemptID, &c.Attempt); err != nil {
		return c, fmt.Errorf("insert attempt of notification %d: %w", r.NotificationID, classify(err))
	}
	u := formatTime(until)
	if _, err := tx.ExecContext(ctx, leaseNotification, c.AttemptID, u, r.NotificationID); err != nil {
		return c, fmt.Errorf("lease notification %d: %w", r.NotificationID, classify(err))
	}
	if stale.Valid {
		if _, err := tx.ExecContext(ctx, dropStaleLease, stale.Int64, r.MessageID); err != nil {
			return c, fmt.Errorf("drop stale lease of notification %d: %w", r.NotificationID, classify(err))
		}
		if _, err := tx.ExecContext(ctx, releaseStaleMarked, stale.Int64, r.MessageID); err != nil {
			return c, fmt.Errorf("release stale lease of notification %d: %w", r.NotificationID, classify(err))
		}
	}
	if _, err := tx.ExecContext(ctx, leaseMessage, r.MessageID, u, c.AttemptID); err != nil {
		return c, fmt.Errorf("lease message %d: %w", r.MessageID, classify(err))
	}
	c.Until = until
	return c, nil
}

// expire ends notification id expired at ts, with its status event when
// statusEvents.
func expire(ctx context.Context, tx txStmts, id int64, ts string, statusEvents bool) error {
	ev := notify.StatusEvent{NotificationID: notify.FormatID(id)}
	err := tx.QueryRowContext(ctx, expireNotification, id, ts).Scan(&ev.UserID, &ev.Channel, &ev.Status, &ev.Attempts, &ev.LastError)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("expire notification %d: %w", id, classify(err))
	}
	if !statusEvents {
		return nil
	}
	at, err := parseTime(ts)
	if err != nil {
		return err
	}
	ev.At = at
	return insertStatusEvent(ctx, tx, ev, ts)
}

// applyResult is the compare-and-set of a record: only the claim that still
// holds the notification, pending, changes it. ?1 outcome, ?2 error, ?3 now,
// ?4 notification id, ?5 attempt id, ?6 when a retry is due. It returns
// what a status event says of the notification; no row: the claim was
// lost.
const applyResult = `
UPDATE notifications SET
	status = CASE ?1 WHEN 'sent' THEN 'sent' WHEN 'dead' THEN 'failed' ELSE status END,
	attempts = attempts + CASE WHEN ?1 = 'deferred' THEN 0 ELSE 1 END,
	last_error = CASE WHEN ?1 IN ('retry', 'dead') THEN ?2 ELSE last_error END,
	sent_at = CASE WHEN ?1 = 'sent' THEN ?3 ELSE sent_at END,
	failed_at = CASE WHEN ?1 = 'dead' THEN ?3 ELSE failed_at END,
	updated_at = ?3,
	retry_due_at = CASE WHEN ?1 = 'retry' THEN ?6 END,
	claim_attempt_id = NULL,
	claimed_until = NULL
WHERE id = ?4 AND claim_attempt_id = ?5 AND status = 'pending'
RETURNING user_id, channel, status, attempts, COALESCE(last_error, '')`

// finishAttempt finishes an attempt row, even when its claim was lost: the
// send happened, and the history says so.
const finishAttempt = `
UPDATE delivery_attempts SET finished_at = ?1, outcome = ?2, error = ?3, deferral = ?5
WHERE id = ?4 AND finished_at IS NULL`

// previousDeferral finds the notification's attempt row before ?2 when it
// is a finished deferral of the kind ?3: the row an applied deferral of
// that kind is folded into (one row per outage, not one per probe).
const previousDeferral = `
SELECT id FROM (
	SELECT id, outcome, deferral FROM delivery_attempts
	WHERE notification_id = ?1 AND id < ?2 ORDER BY id DESC LIMIT 1
) WHERE outcome = 'deferred' AND deferral = ?3`

// foldInto counts one more repeat on the row ?1, with the latest error
// and time; dropAttempt removes the folded attempt's own row, so that
// the next claim numbers its attempt as this one was.
const (
	foldInto = `
UPDATE delivery_attempts SET repeats = repeats + 1, last_at = ?2, error = COALESCE(?3, error) WHERE id = ?1`
	dropAttempt = `DELETE FROM delivery_attempts WHERE id = ?1`
)

// releaseMessage deletes the lease row of a deferred claim that holds no
// retry mark; releaseMarked releases the row of a retried claim, or of a
// deferred one with a mark, and keeps it: a retry raises next_retry_count
// (?3, the claim's retry count + 1; 0 for deferred) so that a stale copy
// with the claim's count or less is refused.
const releaseMessage = `
DELETE FROM processed_messages
WHERE message_id = ?1 AND attempt_id = ?2 AND processed_at IS NULL AND next_retry_count = 0`

const releaseMarked = `
UPDATE processed_messages SET lease_until = NULL, attempt_id = NULL, next_retry_count = max(next_retry_count, ?3)
WHERE message_id = ?1 AND attempt_id = ?2 AND processed_at IS NULL`

// recordTx applies results; a settling one writes its status event when
// statusEvents is set.
func recordTx(ctx context.Context, tx txStmts, results []notify.DeliveryResult, t time.Time, statusEvents bool, out []bool) error {
	ts := formatTime(t)
	for i, r := range results {
		c := r.Claim
		ev := notify.StatusEvent{NotificationID: notify.FormatID(c.NotificationID), At: t}
		err := tx.QueryRowContext(ctx, applyResult, r.Outcome, r.Error, ts, c.NotificationID, c.AttemptID, formatTime(now().Add(r.RetryIn))).
			Scan(&ev.UserID, &ev.Channel, &ev.Status, &ev.Attempts, &ev.LastError)
		applied := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("update notification %d: %w", c.NotificationID, classify(err))
		}
		folded, err := foldDeferral(ctx, tx, r, applied, ts)
		if err != nil {
			return err
		}
		if !folded {
			kind := ""
			if r.Outcome == notify.AttemptDeferred {
				kind = r.Deferral
			}
			if _, err := tx.ExecContext(ctx, finishAttempt, ts, r.Outcome, nullString(r.Error), c.AttemptID, nullString(kind)); err != nil {
				return fmt.Errorf("finish attempt %d: %w", c.AttemptID, classify(err))
			}
		}
		if !applied {
			continue
		}
		out[i] = true
		switch r.Outcome {
		case notify.AttemptSent, notify.AttemptDead:
			// The settling writes its status event in the same
			// transaction.
			if statusEvents {
				if err := insertStatusEvent(ctx, tx, ev, ts); err != nil {
					return err
				}
			}
			_, err = tx.ExecContext(ctx, markProcessed, c.MessageID, ts)
		case notify.AttemptRetry:
			_, err = tx.ExecContext(ctx, releaseMarked, c.MessageID, c.AttemptID, c.RetryCount+1)
		default:
			if _, err = tx.ExecContext(ctx, releaseMessage, c.MessageID, c.AttemptID); err == nil {
				_, err = tx.ExecContext(ctx, releaseMarked, c.MessageID, c.AttemptID, 0)
			}
		}
		if err != nil {
			return fmt.Errorf("settle message %d: %w", c.MessageID, classify(err))
		}
	}
	return nil
}

// foldDeferral folds an applied deferral into the notification's previous
// attempt row when that row is a deferral of the same kind, and reports
// whether it did.
func foldDeferral(ctx context.Context, tx txStmts, r notify.DeliveryResult, applied bool, ts string) (bool, error) {
	if !applied || r.Outcome != notify.AttemptDeferred || r.Deferral == "" {
		return false, nil
	}
	c := r.Claim
	var prev int64
	err := tx.QueryRowContext(ctx, previousDeferral, c.NotificationID, c.AttemptID, r.Deferral).Scan(&prev)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read attempt before %d: %w", c.AttemptID, classify(err))
	}
	if _, err := tx.ExecContext(ctx, foldInto, prev, ts, nullString(r.Error)); err != nil {
		return false, fmt.Errorf("fold attempt %d into %d: %w", c.AttemptID, prev, classify(err))
	}
	if _, err := tx.ExecContext(ctx, dropAttempt, c.AttemptID); err != nil {
		return false, fmt.Errorf("drop folded attempt %d: %w", c.AttemptID, classify(err))
	}
	return true, nil
}

// insertStatusEvent writes the status event of a notification that ev's
// record settled.
func insertStatusEvent(ctx context.Context, tx txStmts, ev notify.StatusEvent, ts string) error {
	typ, err := notify.StatusEventType(notify.Status(ev.Status))
	if err != nil {
		return err
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode %s payload: %w", typ, err)
	}
	if _, err := tx.ExecContext(ctx, insertOutbox, typ, string(payload), ts, ts, nil, notify.RankNormal); err != nil {
		return fmt.Errorf("insert %s event of notification %s: %w", typ, ev.NotificationID, classify(err))
	}
	return nil
}

// deliveryStatements are the statements ClaimAndRecord runs, prepared once.
var deliveryStatements = []string{selectClaimState, expireNotification, markProcessed, insertAttempt, leaseNotification,
	dropStaleLease, releaseStaleMarked, leaseMessage, applyResult, finishAttempt, releaseMessage, releaseMarked,
	insertOutbox, previousDeferral, foldInto, dropAttempt}

// txStmts runs prepared statements inside one transaction.
type txStmts struct {
	ctx   context.Context
	tx    *sql.Tx
	stmts map[string]*sql.Stmt
}

func (q txStmts) stmt(query string) *sql.Stmt { return q.tx.StmtContext(q.ctx, q.stmts[query]) }

func (q txStmts) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return q.stmt(query).ExecContext(ctx, args...)
}

func (q txStmts) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return q.stmt(query).QueryRowContext(ctx, args...)
}
