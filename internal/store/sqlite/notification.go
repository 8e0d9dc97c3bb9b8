package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

const notificationColumns = `id, user_id, channel, recipient, subject, body, status, attempts,
	last_error, idempotency_key, created_at, updated_at, sent_at, failed_at,
	send_at, expires_at, canceled_at, expired_at, priority, html, template, template_version, locale, request_digest, category, unsubscribe_url,
	fallback, COALESCE(fallback_of, 0), COALESCE(fallback_next, 0)`

// The user's idempotency key is the conflict target: a second create with
// the same user and key inserts nothing and returns no row, and Create then compares the
// request with the stored one.
const insertNotification = `
INSERT INTO notifications (user_id, channel, recipient, subject, body, idempotency_key, created_at, updated_at, destination, send_at, expires_at, priority,
	html, template, template_version, locale, request_digest, category, status, unsubscribe_url, fallback, fallback_of)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, 0))
ON CONFLICT (user_id, idempotency_key) DO NOTHING
RETURNING id`

const selectNotificationByKey = `SELECT ` + notificationColumns + ` FROM notifications WHERE user_id = ? AND idempotency_key = ?`

// expireKey releases a user's idempotency key held by a notification
// created at or before the given time (the window's start), so that the
// insert that follows can take it. SQLite has one writer: no create runs
// between the two statements.
const expireKey = `
UPDATE notifications SET idempotency_key = NULL
WHERE user_id = ? AND idempotency_key = ? AND created_at <= ?`

// insertOutbox's last argument is the priority's rank (notify.Rank*).
const insertOutbox = `
INSERT INTO outbox (event_type, payload, occurred_at, available_at, traceparent, priority)
VALUES (?, ?, ?, ?, ?, ?)`

// Create writes the notification and its notification.requested outbox event
// in one transaction, then wakes the subscribers. See api.Notifications. Concurrent
// creates commit together (see groupcommit.go): one fsync for the group,
// each still all or nothing.
func (s *Store) Create(ctx context.Context, nn notify.NewNotification) (notify.Created, error) {
	c, err := s.groupCreate(ctx, nn)
	if err != nil {
		return notify.Created{}, fmt.Errorf("create notification: %w", err)
	}
	return c, nil
}

// createIn runs one create's statements inside tx at time t.
func (s *Store) createIn(ctx context.Context, tx *sql.Tx, nn notify.NewNotification, t time.Time) (notify.Created, error) {
	r := nn.Request
	if nn.RecipientRevision != 0 {
		// One writer: nothing changes the recipient between this read
		// and the commit.
		var rev int64
		err := tx.QueryRowContext(ctx, selectRecipientRevision, r.UserID).Scan(&rev)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && rev != nn.RecipientRevision) {
			return notify.Created{}, notify.ErrRecipientChanged
		}
		if err != nil {
			return notify.Created{}, fmt.Errorf("read recipient revision: %w", classify(err))
		}
	}
	if nn.IdempotencyKey != "" {
		if _, err := tx.ExecContext(ctx, expireKey, r.UserID, nn.IdempotencyKey,
			formatTime(t.Add(-notify.IdempotencyWindow))); err != nil {
			return notify.Created{}, fmt.Errorf("expire idempotency key: %w", classify(err))
		}
	}
	suppressed := false
	if nn.CheckPreference {
		// One writer: no preference changes between this read and the
		// commit.
		if err := tx.QueryRowContext(ctx, selectOptedOut, r.UserID, r.Category, r.Channel).Scan(&suppressed); err != nil {
			return notify.Created{}, fmt.Errorf("read preference: %w", classify(err))
		}
	}
	status := notify.StatusPending
	if suppressed {
		status = notify.StatusSuppressed
	}
	fallback, err := notify.EncodeHops(nn.Fallback)
	if err != nil {
		return notify.Created{}, err
	}
	var id int64
	err = tx.QueryRowContext(ctx, insertNotification,
		r.UserID, r.Channel, r.To, r.Subject, r.Body, nullString(nn.IdempotencyKey),
		formatTime(t), formatTime(t), nullString(nn.Destination), nullTime(r.SendAt), nullTime(r.ExpiresAt), r.Priority.Rank(),
		r.HTML, r.Template, r.TemplateVersion, r.Locale, nn.Digest, r.Category, string(status), r.Unsubscribe, fallback, nn.FallbackOf).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		stored, err := scanNotification(tx.QueryRowContext(ctx, selectNotificationByKey, r.UserID, nn.IdempotencyKey))
		if err != nil {
			return notify.Created{}, fmt.Errorf("read notification with the same idempotency key: %w", err)
		}
		return nn.Replay(stored)
	}
	if err != nil {
		return notify.Created{}, fmt.Errorf("insert notification: %w", classify(err))
	}
	if suppressed {
		// Its status event only (when status events are on): no
		// notification.requested event, so no worker ever sees it.
		c := notify.Created{Notification: nn.Suppressed(id, t)}
		if s.statusEvents {
			payload, err := notify.StatusPayload(c.Notification, t)
			if err != nil {
				return notify.Created{}, err
			}
			if _, err := tx.ExecContext(ctx, insertOutbox,
				notify.EventSuppressed, string(payload), formatTime(t), formatTime(t), nil, notify.RankNormal); err != nil {
				return notify.Created{}, fmt.Errorf("insert outbox event: %w", classify(err))
			}
		}
		if nn.Fault == notify.FaultAfterOutboxInsert {
			return notify.Created{}, notify.ErrInjectedFault
		}
		return c, nil
	}
	c := notify.Created{Notification: nn.Pending(id, t)}
	payload, err := notify.RequestedPayload(c.Notification)
	if err != nil {
		return notify.Created{}, err
	}
	// The event is due at the notification's send_at, or at once: a
	// send_at in the past is due now, behind the rows due before it.
	due := t
	if r.SendAt != nil && r.SendAt.After(t) {
		due = *r.SendAt
	}
	if _, err := tx.ExecContext(ctx, insertOutbox,
		notify.EventRequested, string(payload), formatTime(t), formatTime(due), nullString(nn.Traceparent), r.Priority.Rank()); err != nil {
		return notify.Created{}, fmt.Errorf("insert outbox event: %w", classify(err))
	}
	if nn.Fault == notify.FaultAfterOutboxInsert {
		return notify.Created{}, notify.ErrInjectedFault
	}
	return c, nil
}

// Get returns one notification, or an error wrapping notify.ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (notify.Notification, error) {
	var wKey, wState, wReason, wSince sql.NullString
	n, err := scanNotification(withExtra{s.read.QueryRowContext(ctx, selectNotification, id), []any{&wKey, &wState, &wReason, &wSince}})
	if errors.Is(err, sql.ErrNoRows) {
		return notify.Notification{}, fmt.Errorf("get notification %d: %w", id, notify.ErrNotFound)
	}
	if err != nil {
		return notify.Notification{}, fmt.Errorf("get notification %d: %w", id, classify(err))
	}
	if wKey.Valid {
		since, err := parseTime(wSince.String)
		if err != nil {
			return notify.Notification{}, fmt.Errorf("get notification %d: %w", id, err)
		}
		n.Waiting = &notify.Waiting{Destination: wKey.String, State: wState.String, Reason: wReason.String, Since: since}
	}
	return n, nil
}

// selectNotification reads a notification with, while it is pending, the
// record of its destination or else of its channel's one provider
// (waiting).
const selectNotification = `SELECT ` + notificationColumns + `, w.w_key, w.w_state, w.w_reason, w.w_since
FROM (
	SELECT *, (
		SELECT d.key FROM destinations AS d
		WHERE notifications.status = 'pending' AND d.key IN (notifications.destination, notifications.channel)
		ORDER BY d.key = notifications.destination DESC LIMIT 1
	) AS waits_on
	FROM notifications WHERE id = ?
) AS n
LEFT JOIN (
	SELECT key AS w_key, state AS w_state, reason AS w_reason, since AS w_since FROM destinations
) AS w ON w.w_key = n.waits_on`

// withExtra scans a row's first columns as its row would, and the columns
// after them into extra.
type withExtra struct {
	row   interface{ Scan(...any) error }
	extra []any
}

func (r withExtra) Scan(dest ...any) error { return r.row.Scan(append(dest, r.extra...)...) }

// collectNotification is scanNotification for collect.
func collectNotification(rows *sql.Rows) (notify.Notification, error) { return scanNotification(rows) }

// scanNotification reads one row of notificationColumns, from a *sql.Row
// or *sql.Rows.
func scanNotification(row interface{ Scan(...any) error }) (notify.Notification, error) {
	var (
		n                              notify.Notification
		status                         string
		lastErr, key, sentAt, failedAt sql.NullString
		sendAt, expiresAt              sql.NullString
		canceledAt, expiredAt          sql.NullString
		createdAt, updatedAt           string
		rank                           int
		fallback                       string
	)
	if err := row.Scan(&n.ID, &n.UserID, &n.Channel, &n.To, &n.Subject, &n.Body, &status, &n.Attempts,
		&lastErr, &key, &createdAt, &updatedAt, &sentAt, &failedAt,
		&sendAt, &expiresAt, &canceledAt, &expiredAt, &rank,
		&n.HTML, &n.Template, &n.TemplateVersion, &n.Locale, &n.Digest, &n.Category, &n.Unsubscribe,
		&fallback, &n.FallbackOf, &n.FallbackNext); err != nil {
		return notify.Notification{}, err
	}
	n.Priority = notify.PriorityOfRank(rank)
	n.Status = notify.Status(status)
	n.LastError = lastErr.String
	n.IdempotencyKey = key.String
	var err error
	if n.Fallback, err = notify.DecodeHops(fallback); err != nil {
		return notify.Notification{}, err
	}
	if n.CreatedAt, err = parseTime(createdAt); err != nil {
		return notify.Notification{}, err
	}
	if n.UpdatedAt, err = parseTime(updatedAt); err != nil {
		return notify.Notification{}, err
	}
	for _, c := range []struct {
		v   sql.NullString
		dst **time.Time
	}{{sentAt, &n.SentAt}, {failedAt, &n.FailedAt}, {sendAt, &n.SendAt}, {expiresAt, &n.ExpiresAt}, {canceledAt, &n.CanceledAt}, {expiredAt, &n.ExpiredAt}} {
		if *c.dst, err = parseNullTime(c.v); err != nil {
			return notify.Notification{}, err
		}
	}
	return n, nil
}

// nullTime stores a nil time as NULL, others as the store's text.
func nullTime(t *time.Time) sql.NullString {
	if t == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: formatTime(*t), Valid: true}
}

// parseNullTime reads back what nullTime stored: NULL is nil.
func parseNullTime(v sql.NullString) (*time.Time, error) {
	if !v.Valid {
		return nil, nil
	}
	t, err := parseTime(v.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// Subscribe returns a channel that receives a value (coalesced: at most one
// pending) after every committed Create or Redrive in this process, and is
// closed when ctx ends. It implements relay.Waker. Creates in other processes
// on the same file are not seen: their readers fall back to polling.
func (s *Store) Subscribe(ctx context.Context) <-chan struct{} {
	return s.hub.Subscribe(ctx)
}
