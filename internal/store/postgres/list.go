package postgres

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlrows"
)

// The listing's SQL is put together from these fragments, one per filter the
// request names, so that each shape gets a plan of its own from an index of
// migration 0005 (a single statement with "$1 IS NULL OR ..." for every
// filter would get one generic plan that fits none of them).
const (
	// listColumns are notificationColumns without the body: a page of 500
	// must not drag 500 bodies out of the table.
	listColumns = `id, user_id, channel, recipient, subject, '', status, attempts,
	COALESCE(last_error, ''), COALESCE(idempotency_key, ''), created_at, updated_at, sent_at, failed_at,
	send_at, expires_at, canceled_at, expired_at, priority, '', template, template_version, locale, request_digest, category, '',
	'', COALESCE(fallback_of, 0), COALESCE(fallback_next, 0)`

	listSelect   = `SELECT ` + listColumns + ` FROM notifications`
	listByUser   = `user_id = $%d`
	listByStatus = `status = $%d`
	// A scheduled notification is stored pending with a send_at ahead
	// (see notify.StatusAt): both filters walk the pending rows of
	// notifications_status_created_idx and tell them apart by send_at.
	listScheduled     = `status = 'pending' AND send_at > now()`
	listDuePending    = `status = 'pending' AND (send_at IS NULL OR send_at <= now())`
	listByChannel     = `channel = $%d`
	listCreatedAfter  = `created_at >= $%d`
	listCreatedBefore = `created_at < $%d`
	// listAfterPosition is a row comparison: the index scan starts right
	// past the cursor instead of filtering its way there.
	listAfterPosition = `(created_at, id) < ($%d, $%d)`
	listOrder         = ` ORDER BY created_at DESC, id DESC LIMIT $%d`

	// listPlan keeps the listing on the indexes of migration 0005, read in
	// order: it turns sorting off for the listing's own transaction (the
	// batch's implicit one). Every shape has such an index, so a sort is
	// never needed; but the planner picks one when statistics make a set
	// look tiny. A status filter of pending also matches
	// notifications_pending_idx (migration 0006), which is in updated_at
	// order: statistics gathered while no notification was pending (a
	// healthy system, or a young one) make "all pending, sorted" look like
	// one row, and when a backlog builds up every page then reads and sorts
	// the whole backlog (issue 24: 50,000 rows per listing). Without a sort
	// the page is read from notifications_status_created_idx and costs its
	// own size.
	listPlan = `SELECT set_config('enable_sort', 'off', true)`

	// selectAttempts answers one row per attempt of a page ($2: after
	// this attempt id, 0 from the start; $3 rows), in the order they
	// were made, or one row of NULLs when the page is empty, or no row when
	// the notification does not exist: one statement, one snapshot. The
	// page walks delivery_attempts_notification_idx from its end.
	selectAttempts = `
SELECT a.id, a.attempt, a.message_id, a.started_at, a.finished_at, a.outcome, a.error, a.deferral, a.repeats, a.last_at
FROM notifications n
LEFT JOIN LATERAL (
	SELECT a.* FROM delivery_attempts a
	WHERE a.notification_id = n.id AND a.id > $2::bigint
	ORDER BY a.id LIMIT $3
) a ON true
WHERE n.id = $1
ORDER BY a.id`

	// selectAttemptsNewest is selectAttempts newest first ($2: before this
	// attempt id, 0 from the end).
	selectAttemptsNewest = `
SELECT a.id, a.attempt, a.message_id, a.started_at, a.finished_at, a.outcome, a.error, a.deferral, a.repeats, a.last_at
FROM notifications n
LEFT JOIN LATERAL (
	SELECT a.* FROM delivery_attempts a
	WHERE a.notification_id = n.id AND a.id < COALESCE(NULLIF($2::bigint, 0), 9223372036854775807)
	ORDER BY a.id DESC LIMIT $3
) a ON true
WHERE n.id = $1
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
	add := func(fragment string, vals ...any) {
		nums := make([]any, len(vals))
		for i, v := range vals {
			args = append(args, v)
			nums[i] = len(args)
		}
		where = append(where, fmt.Sprintf(fragment, nums...))
	}
	if f.UserID != "" {
		add(listByUser, f.UserID)
	}
	switch f.Status {
	case "":
	case notify.StatusScheduled:
		add(listScheduled)
	case notify.StatusPending:
		add(listDuePending)
	default:
		add(listByStatus, string(f.Status))
	}
	if f.Channel != "" {
		add(listByChannel, f.Channel)
	}
	if !f.CreatedAfter.IsZero() {
		add(listCreatedAfter, f.CreatedAfter)
	}
	if !f.CreatedBefore.IsZero() {
		add(listCreatedBefore, f.CreatedBefore)
	}
	if f.After != nil {
		add(listAfterPosition, f.After.CreatedAt, f.After.ID)
	}
	q := listSelect
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	args = append(args, f.Limit+1)
	return q + fmt.Sprintf(listOrder, len(args)), args
}

// List returns a page of the notifications f selects, newest first, without
// their bodies, and where the next page starts.
func (s *Store) List(ctx context.Context, f notify.ListFilter) (notify.ListPage, error) {
	if f.Limit < 1 {
		return notify.ListPage{}, fmt.Errorf("list notifications: limit must be at least 1, got %d", f.Limit)
	}
	q, args := listQuery(f)
	// One round trip, one implicit transaction: listPlan holds for the
	// query and ends with it.
	b := &pgx.Batch{}
	b.Queue(listPlan)
	b.Queue(q, args...)
	br := s.sendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return notify.ListPage{}, wrap("list notifications: plan", err)
	}
	rows, err := br.Query()
	if err != nil {
		return notify.ListPage{}, wrap("list notifications", err)
	}
	items := make([]notify.Notification, 0, min(f.Limit+1, 64))
	items, err = pgx.AppendRows(items, rows, func(r pgx.CollectableRow) (notify.Notification, error) {
		n, err := scanNotification(r)
		if err != nil {
			return n, fmt.Errorf("scan: %w", err)
		}
		return n, nil
	})
	if err != nil {
		return notify.ListPage{}, wrap("list notifications", err)
	}
	if err := br.Close(); err != nil {
		return notify.ListPage{}, wrap("list notifications", err)
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
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return notify.AttemptPage{}, wrap(op, err)
	}
	defer rows.Close()
	p, err := sqlrows.AttemptPage(rows, f.Limit, func() (notify.Attempt, bool, error) {
		var (
			rowID            *int64
			attempt          *int32
			messageID        *int64
			startedAt        *time.Time
			finishedAt       *time.Time
			outcome, errText *string
			deferral         *string
			repeats          *int32
			lastAt           *time.Time
		)
		if err := rows.Scan(&rowID, &attempt, &messageID, &startedAt, &finishedAt, &outcome, &errText, &deferral, &repeats, &lastAt); err != nil {
			return notify.Attempt{}, false, fmt.Errorf("scan: %w", err)
		}
		if attempt == nil {
			return notify.Attempt{}, false, nil // the notification exists and has no attempt
		}
		a := notify.Attempt{ID: *rowID, Attempt: int(*attempt), MessageID: *messageID, StartedAt: startedAt.UTC(), FinishedAt: utcp(finishedAt)}
		if outcome != nil {
			a.Outcome = *outcome
		}
		if errText != nil {
			a.Error = *errText
		}
		if deferral != nil {
			a.Deferral = *deferral
		}
		if repeats != nil && *repeats > 0 {
			a.Repeats, a.LastAt = int(*repeats), utcp(lastAt)
		}
		return a, true, nil
	})
	if err != nil {
		return notify.AttemptPage{}, wrap(op, err)
	}
	return p, nil
}

func utcp(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
