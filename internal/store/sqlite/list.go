package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlrows"
)

// The listing's SQL is put together from these fragments, one per filter the
// request names, so that each shape is planned on its own onto an index of
// migration 0005. Times are the store's fixed-width text, so comparing text
// is comparing times.
const (
	// listColumns are notificationColumns without the body: a page of 500
	// must not drag 500 bodies out of the file.
	listColumns = `id, user_id, channel, recipient, subject, '', status, attempts,
	last_error, idempotency_key, created_at, updated_at, sent_at, failed_at,
	send_at, expires_at, canceled_at, expired_at, priority, '', template, template_version, locale, request_digest, category, '',
	'', COALESCE(fallback_of, 0), COALESCE(fallback_next, 0)`

	listSelect   = `SELECT ` + listColumns + ` FROM notifications`
	listByUser   = `user_id = ?`
	listByStatus = `status = ?`
	// A scheduled notification is stored pending with a send_at ahead
	// (see notify.StatusAt); ? is now.
	listScheduled     = `status = 'pending' AND send_at > ?`
	listDuePending    = `status = 'pending' AND (send_at IS NULL OR send_at <= ?)`
	listByChannel     = `channel = ?`
	listCreatedAfter  = `created_at >= ?`
	listCreatedBefore = `created_at < ?`
	// listAfterPosition is a row-value comparison, which SQLite turns into
	// an index range starting right past the cursor.
	listAfterPosition = `(created_at, id) < (?, ?)`
	listOrder         = ` ORDER BY created_at DESC, id DESC LIMIT ?`

	// selectAttempts answers one row per attempt of a page (?2: after
	// this attempt id, 0 from the start; ?3 rows), in the order they
	// were made, or one row of NULLs when the page is empty, or no row when
	// the notification does not exist: one statement, one snapshot.
	selectAttempts = `
SELECT a.id, a.attempt, a.message_id, a.started_at, a.finished_at, a.outcome, a.error, a.deferral, a.repeats, a.last_at
FROM notifications n
LEFT JOIN (
	SELECT * FROM delivery_attempts WHERE notification_id = ?1 AND id > ?2 ORDER BY id LIMIT ?3
) a ON a.notification_id = n.id
WHERE n.id = ?1
ORDER BY a.id`

	// selectAttemptsNewest is selectAttempts newest first (?2: before this
	// attempt id, 0 from the end).
	selectAttemptsNewest = `
SELECT a.id, a.attempt, a.message_id, a.started_at, a.finished_at, a.outcome, a.error, a.deferral, a.repeats, a.last_at
FROM notifications n
LEFT JOIN (
	SELECT * FROM delivery_attempts WHERE notification_id = ?1 AND id < COALESCE(NULLIF(?2, 0), 9223372036854775807) ORDER BY id DESC LIMIT ?3
) a ON a.notification_id = n.id
WHERE n.id = ?1
ORDER BY a.id DESC`
)

// attemptStatements are AttemptPage's statements.
var attemptStatements = sqlrows.AttemptStatements{Oldest: selectAttempts, Newest: selectAttemptsNewest}

// listQuery returns the listing's statement and arguments for f. It reads
// one row past the limit to learn whether there is a next page.
func listQuery(f notify.ListFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	if f.UserID != "" {
		where, args = append(where, listByUser), append(args, f.UserID)
	}
	switch f.Status {
	case "":
	case notify.StatusScheduled:
		where, args = append(where, listScheduled), append(args, formatTime(now()))
	case notify.StatusPending:
		where, args = append(where, listDuePending), append(args, formatTime(now()))
	default:
		where, args = append(where, listByStatus), append(args, string(f.Status))
	}
	if f.Channel != "" {
		where, args = append(where, listByChannel), append(args, f.Channel)
	}
	if !f.CreatedAfter.IsZero() {
		where, args = append(where, listCreatedAfter), append(args, formatTime(f.CreatedAfter))
	}
	if !f.CreatedBefore.IsZero() {
		where, args = append(where, listCreatedBefore), append(args, formatTime(f.CreatedBefore))
	}
	if f.After != nil {
		where, args = append(where, listAfterPosition), append(args, formatTime(f.After.CreatedAt), f.After.ID)
	}
	q := listSelect
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	return q + listOrder, append(args, f.Limit+1)
}

// List returns a page of the notifications f selects, newest first, without
// their bodies, and where the next page starts.
//
// Bounds finer than the store's microseconds are truncated; a cursor always
// holds a stored time, so resuming is exact.
func (s *Store) List(ctx context.Context, f notify.ListFilter) (notify.ListPage, error) {
	if f.Limit < 1 {
		return notify.ListPage{}, fmt.Errorf("list notifications: limit must be at least 1, got %d", f.Limit)
	}
	q, args := listQuery(f)
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return notify.ListPage{}, fmt.Errorf("list notifications: %w", classify(err))
	}
	defer rows.Close()
	items := make([]notify.Notification, 0, min(f.Limit+1, 64))
	for rows.Next() {
		n, err := scanNotification(rows)
		if err != nil {
			return notify.ListPage{}, fmt.Errorf("list notifications: scan: %w", classify(err))
		}
		items = append(items, n)
	}
	if err := rows.Err(); err != nil {
		return notify.ListPage{}, fmt.Errorf("list notifications: %w", classify(err))
	}
	return notify.NewListPage(items, f.Limit), nil
}

// Attempts returns every delivery attempt of a notification in the order
// they were made, or notify.ErrNotFound when there is no such notification.
func (s *Store) Attempts(ctx context.Context, id int64) ([]notify.Attempt, error) {
	p, err := s.AttemptPage(ctx, id, notify.AttemptFilter{Limit: math.MaxInt32 - 1})
	return p.Items, err
}

// AttemptPage returns the page of a notification's attempts f selects, or
// notify.ErrNotFound when there is no such notification.
func (s *Store) AttemptPage(ctx context.Context, id int64, f notify.AttemptFilter) (notify.AttemptPage, error) {
	op := "attempts of notification " + strconv.FormatInt(id, 10)
	q, args, err := attemptStatements.For(id, f)
	if err != nil {
		return notify.AttemptPage{}, fmt.Errorf("%s: %w", op, err)
	}
	rows, err := s.read.QueryContext(ctx, q, args...)
	if err != nil {
		return notify.AttemptPage{}, fmt.Errorf("%s: %w", op, classify(err))
	}
	defer rows.Close()
	p, err := sqlrows.AttemptPage(rows, f.Limit, func() (notify.Attempt, bool, error) {
		var (
			rowID, attempt, messageID, repeats                    sql.NullInt64
			startedAt, finishedAt, outcome, msg, deferral, lastAt sql.NullString
			err                                                   error
		)
		if err = rows.Scan(&rowID, &attempt, &messageID, &startedAt, &finishedAt, &outcome, &msg, &deferral, &repeats, &lastAt); err != nil {
			return notify.Attempt{}, false, fmt.Errorf("scan: %w", err)
		}
		if !attempt.Valid {
			return notify.Attempt{}, false, nil // the notification exists and has no attempt
		}
		a := notify.Attempt{ID: rowID.Int64, Attempt: int(attempt.Int64), MessageID: messageID.Int64, Outcome: outcome.String, Error: msg.String,
			Deferral: deferral.String}
		if a.StartedAt, err = parseTime(startedAt.String); err != nil {
			return notify.Attempt{}, false, err
		}
		if a.FinishedAt, err = parseNullTime(finishedAt); err != nil {
			return notify.Attempt{}, false, err
		}
		if repeats.Int64 > 0 && lastAt.Valid {
			if a.LastAt, err = parseNullTime(lastAt); err != nil {
				return notify.Attempt{}, false, err
			}
			a.Repeats = int(repeats.Int64)
		}
		return a, true, nil
	})
	if err != nil {
		return notify.AttemptPage{}, fmt.Errorf("%s: %w", op, classify(err))
	}
	return p, nil
}
