package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

// outboxChannel is the LISTEN/NOTIFY channel that wakes relays when outbox
// rows commit.
const outboxChannel = "herald_outbox"

const (
	// insertNotification does nothing when the idempotency key is taken; a
	// NULL key never conflicts. When the key's first create is still in
	// flight, PostgreSQL waits for it to end before deciding. The other
	// columns take their defaults: pending, no attempt, and one now() for
	// created_at and updated_at.
	insertNotification = `
INSERT INTO notifications (user_id, channel, recipient, subject, body, idempotency_key, destination, send_at, expires_at, priority,
	html, template, template_version, locale, request_digest, category, status, unsubscribe_url, fallback, fallback_of)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''), NULLIF($7, ''), $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, NULLIF($20, 0))
ON CONFLICT (user_id, idempotency_key) DO NOTHING
RETURNING id, created_at`

	// expireKey releases a user's idempotency key held by a notification
	// created longer than the window ($3, seconds) ago, so that the insert
	// that follows can take it. Concurrent creates with the key queue on
	// the old row's lock; the first clears it and inserts, and the others
	// find the key cleared and meet the first's row at the insert.
	expireKey = `
UPDATE notifications SET idempotency_key = NULL
WHERE user_id = $1 AND idempotency_key = $2 AND created_at <= now() - make_interval(secs => $3)`

	// insertOutbox writes the event, due at $4 (the notification's
	// send_at) or at once: a send_at in the past is due now, in its turn
	// behind the rows due before it, not ahead of every one of them. $5
	// is the priority's rank (notify.Rank*).
	insertOutbox = `INSERT INTO outbox (event_type, payload, traceparent, available_at, priority)
VALUES ($1, $2, NULLIF($3, ''), GREATEST(COALESCE($4::timestamptz, now()), now()), $5)`

	// insertCreates is the whole create of a group of notifications without
	// an idempotency key, in one statement: one round trip and one commit
	// for the group (see groupcreate.go), where a transaction per create
	// took four round trips (BEGIN, two INSERTs, COMMIT). Each event's
	// payload comes encoded with notification_id "0", and the statement
	// puts in the id it has just taken for its notification: ids are drawn
	// first, in the requests' order, so that each event finds its own and
	// the answer maps back by ordinal. One statement is one transaction:
	// every notification with its event, or none (guarantee 1). It reads no
	// table.
	// $1-$5 user ids, channels, recipients, subjects, bodies; $6 event
	// types; $7 payloads; $8 traceparents ('' for none); $9 destinations
	// ('' for none); $10 idempotency keys ('' for none; a batch's keys
	// that no notification holds, see CreateBatch); $11 priority ranks.
	insertCreates = `
WITH r AS MATERIALIZED (
	SELECT nextval(pg_get_serial_sequence('notifications', 'id')) AS id, r.*
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::jsonb[], $8::text[], $9::text[], $10::text[], $11::smallint[])
		WITH ORDINALITY AS r(user_id, channel, recipient, subject, body, event_type, payload, traceparent, destination, idempotency_key, priority, ord)
	ORDER BY r.ord
), n AS (
	INSERT INTO notifications (id, user_id, channel, recipient, subject, body, destination, idempotency_key, priority) OVERRIDING SYSTEM VALUE
	SELECT id, user_id, channel, recipient, subject, body, NULLIF(destination, ''), NULLIF(idempotency_key, ''), priority FROM r ORDER BY ord
	RETURNING id, created_at
), e AS (
	INSERT INTO outbox (event_type, payload, traceparent, priority)
	SELECT event_type, jsonb_set(payload, '{notification_id}', to_jsonb(id::text)), NULLIF(traceparent, ''), priority
	FROM r ORDER BY ord
)
SELECT r.ord, n.id, n.created_at FROM r JOIN n ON n.id = r.id`

	// insertCreate is insertCreates for a group of one: the same rows in
	// a statement with no arrays to unnest, no ids to draw ahead and no
	// answer to map back: a lone create (a quiet API, or herald bench's
	// raw ceiling) runs 16% faster on it (pgbench, 4 clients, commits
	// unsynced: 8,540 against 7,330 statements a second).
	insertCreate = `
WITH n AS (
	INSERT INTO notifications (user_id, channel, recipient, subject, body, destination, idempotency_key, priority)
	VALUES ($1, $2, $3, $4, $5, NULLIF($9, ''), NULLIF($10, ''), $11)
	RETURNING id, created_at
), e AS (
	INSERT INTO outbox (event_type, payload, traceparent, priority)
	SELECT $6, jsonb_set($7::jsonb, '{notification_id}', to_jsonb(n.id::text)), NULLIF($8, ''), $11
	FROM n
)
SELECT 1::bigint, id, created_at FROM n`

	// notifyOutbox runs after the commit, on its own (see announce): a
	// NOTIFY inside the create transaction would make every create's commit
	// wait on a server-wide lock held across the WAL flush, serialising
	// creates (the bare create transaction fell from 2357 to 960 per
	// second with it).
	notifyOutbox = `SELECT pg_notify('` + outboxChannel + `', '')`

	notificationColumns = `id, user_id, channel, recipient, subject, body, status, attempts,
	COALESCE(last_error, ''), COALESCE(idempotency_key, ''), created_at, updated_at, sent_at, failed_at,
	send_at, expires_at, canceled_at, expired_at, priority, html, template, template_version, locale, request_digest, category, unsubscribe_url,
	fallback, COALESCE(fallback_of, 0), COALESCE(fallback_next, 0)`

	// selectNotification reads a notification with, while it is pending,
	// the record of its destination or else of its channel's one provider
	// (waiting): two lookups of destinations' key.
	selectNotification = `SELECT ` + notificationColumns + `, w.w_key, w.w_state, w.w_reason, w.w_since
FROM notifications AS n
LEFT JOIN LATERAL (
	SELECT d.key AS w_key, d.state AS w_state, d.reason AS w_reason, d.since AS w_since
	FROM destinations AS d
	WHERE n.status = 'pending' AND d.key IN (n.destination, n.channel)
	ORDER BY d.key = n.destination DESC NULLS LAST
	LIMIT 1
) AS w ON true
WHERE n.id = $1`
	selectNotificationByKey = `SELECT ` + notificationColumns + ` FROM notifications WHERE user_id = $1 AND idempotency_key = $2`
)

// Create writes the notification and its notification.requested outbox event
// in one transaction, and wakes the relays at commit. A known idempotency key
// of the same user, within notify.IdempotencyWindow, with the same request
// answers the stored notification (Replayed) and writes nothing; with a
// different request it fails with notify.ErrConflict. The
// request is not validated here: the API does that.
func (s *Store) Create(ctx context.Context, nn notify.NewNotification) (notify.Created, error) {
	// A timed create (send_at, expires_at) takes the transaction too: the
	// group's statement writes neither column.
	if nn.IdempotencyKey == "" && nn.Fault == "" && !nn.Request.Timed() && nn.Plain() {
		return s.createOne(ctx, nn)
	}
	tx, err := s.begin(ctx)
	if err != nil {
		return notify.Created{}, wrap("create notification: begin", err)
	}
	defer rollback(tx)

	c, err := createInTx(ctx, tx, nn, s.statusEvents)
	if err != nil {
		return notify.Created{}, fmt.Errorf("create notification: %w", err)
	}
	if c.Replayed {
		return c, nil
	}
	if nn.Fault == notify.FaultAfterOutboxInsert {
		return notify.Created{}, fmt.Errorf("create notification: %w", notify.ErrInjectedFault)
	}
	if err := tx.Commit(ctx); err != nil {
		return notify.Created{}, wrap("create notification: commit", err)
	}
	s.announce()
	return c, nil
}

// createOne is Create for a request with no idempotency key (nothing to
// look up or replay) and no injected fault: it joins the next group
// (groupcreate.go), one statement and one commit for every create that
// queued meanwhile.
func (s *Store) createOne(ctx context.Context, nn notify.NewNotification) (notify.Created, error) {
	c, err := s.groupCreate(ctx, nn)
	if err != nil {
		return notify.Created{}, fmt.Errorf("create notification: %w", err)
	}
	return c, nil
}

// Querier runs a statement: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// CreateGroup writes what Create writes for each request of nns in one
// statement on q, insertCreates (or insertCreate for a group of one), and
// wakes no one: every notification with its event, or none. A request's
// idempotency key is written with it but not looked up: it must be one no
// notification holds (CreateBatch checks), else the statement fails with
// a unique violation. It answers in the
// order of nns. The store's groups run it; it is exported for herald
// bench's raw ceiling, which measures the database's create with the
// store's own statement, on connections of its own.
func CreateGroup(ctx context.Context, q Querier, nns []notify.NewNotification) ([]notify.Created, error) {
	n := len(nns)
	users, channels, tos, subjects, bodies := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	types, payloads, traces, dests, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	ranks := make([]int16, n)
	for i, nn := range nns {
		payload, err := notify.RequestedPayload(nn.Pending(0, time.Time{}))
		if err != nil {
			return nil, err
		}
		r := nn.Request
		users[i], channels[i], tos[i], subjects[i], bodies[i] = r.UserID, r.Channel, r.To, r.Subject, r.Body
		types[i], payloads[i], traces[i], dests[i], keys[i] = notify.EventRequested, string(payload), nn.Traceparent, nn.Destination, nn.IdempotencyKey
		ranks[i] = int16(r.Priority.Rank())
	}
	var (
		rows pgx.Rows
		err  error
	)
	if n == 1 {
		rows, err = q.Query(ctx, insertCreate, users[0], channels[0], tos[0], subjects[0], bodies[0], types[0], payloads[0], traces[0], dests[0], keys[0], ranks[0])
	} else {
		rows, err = q.Query(ctx, insertCreates, users, channels, tos, subjects, bodies, types, payloads, traces, dests, keys, ranks)
	}
	if err != nil {
		return nil, wrap("insert", err)
	}
	out := make([]notify.Created, n)
	got := 0
	for rows.Next() {
		var (
			ord int64
			id  int64
			at  time.Time
		)
		if err := rows.Scan(&ord, &id, &at); err != nil {
			rows.Close()
			return nil, wrap("insert", err)
		}
		if ord < 1 || ord > int64(n) {
			rows.Close()
			return nil, fmt.Errorf("insert: answer for request %d of %d", ord, n)
		}
		out[ord-1] = notify.Created{Notification: nns[ord-1].Pending(id, at)}
		got++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap("insert", err)
	}
	if got != n {
		return nil, fmt.Errorf("insert: %d answers to %d requests", got, n)
	}
	return out, nil
}

// CreateInTx writes what Create writes, the notification and its outbox
// event (or, for a known idempotency key, nothing: see Create), in tx, and
// neither commits nor wakes anyone. Create is this between a begin and a
// commit. It is exported for herald bench's raw ceiling, which measures the
// database's create transaction with the store's own statements, on
// connections of its own.
func CreateInTx(ctx context.Context, tx pgx.Tx, nn notify.NewNotification) (notify.Created, error) {
	return createInTx(ctx, tx, nn, true)
}

// createInTx is CreateInTx, writing a suppressed create's status event
// only when statusEvents (the store's status events are on).
func createInTx(ctx context.Context, tx pgx.Tx, nn notify.NewNotification, statusEvents bool) (notify.Created, error) {
	r := nn.Request
	var (
		id int64
		at time.Time
	)
	if nn.RecipientRevision != 0 {
		var rev int64
		err := tx.QueryRow(ctx, lockRecipient, r.UserID).Scan(&rev)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && rev != nn.RecipientRevision) {
			return notify.Created{}, notify.ErrRecipientChanged
		}
		if err != nil {
			return notify.Created{}, wrap("read recipient revision", err)
		}
	}
	if nn.IdempotencyKey != "" {
		if _, err := tx.Exec(ctx, expireKey, r.UserID, nn.IdempotencyKey, notify.IdempotencyWindow.Seconds()); err != nil {
			return notify.Created{}, wrap("expire idempotency key", err)
		}
	}
	suppressed := false
	if nn.CheckPreference {
		// The preference as committed when the create reads it: a PUT
		// that commits after this read applies from the next create.
		if err := tx.QueryRow(ctx, selectOptedOut, r.UserID, r.Category, r.Channel).Scan(&suppressed); err != nil {
			return notify.Created{}, wrap("read preference", err)
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
	err = tx.QueryRow(ctx, insertNotification, r.UserID, r.Channel, r.To, r.Subject, r.Body, nn.IdempotencyKey, nn.Destination, r.SendAt, r.ExpiresAt, int16(r.Priority.Rank()),
		r.HTML, r.Template, r.TemplateVersion, r.Locale, nn.Digest, r.Category, string(status), r.Unsubscribe, fallback, nn.FallbackOf).
		Scan(&id, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		stored, err := scanNotification(tx.QueryRow(ctx, selectNotificationByKey, r.UserID, nn.IdempotencyKey))
		if err != nil {
			// The conflicting row is committed (ON CONFLICT waited for
			// it) and rows are never deleted, so this is a store failure.
			return notify.Created{}, wrap("read by idempotency key", err)
		}
		return nn.Replay(stored)
	}
	if err != nil {
		return notify.Created{}, wrap("insert", err)
	}
	if suppressed {
		// Its status event only (when status events are on): no
		// notification.requested event, so no worker ever sees it.
		n := nn.Suppressed(id, at)
		if statusEvents {
			payload, err := notify.StatusPayload(n, at)
			if err != nil {
				return notify.Created{}, err
			}
			if _, err := tx.Exec(ctx, insertOutbox, notify.EventSuppressed, payload, "", nil, int16(notify.RankNormal)); err != nil {
				return notify.Created{}, wrap("insert outbox", err)
			}
		}
		return notify.Created{Notification: n}, nil
	}
	n := nn.Pending(id, at)
	payload, err := notify.RequestedPayload(n)
	if err != nil {
		return notify.Created{}, err
	}
	if _, err := tx.Exec(ctx, insertOutbox, notify.EventRequested, payload, nn.Traceparent, r.SendAt, int16(r.Priority.Rank())); err != nil {
		return notify.Created{}, wrap("insert outbox", err)
	}
	return notify.Created{Notification: n}, nil
}

// NotifyInTx sends, in tx, the NOTIFY that wakes other processes' relays.
// The store never does that: it sends the NOTIFY after the commit, outside
// any create (see notifyOutbox). It is exported for herald bench's raw
// ceiling, which measures what the NOTIFY would cost inside.
func NotifyInTx(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, notifyOutbox); err != nil {
		return wrap("notify", err)
	}
	return nil
}

// Get returns one notification, or notify.ErrNotFound.
func (s *Store) Get(ctx context.Context, id int64) (notify.Notification, error) {
	var (
		wKey, wState, wReason *string
		wSince                *time.Time
	)
	n, err := scanNotification(withExtra{s.pool.QueryRow(ctx, selectNotification, id), []any{&wKey, &wState, &wReason, &wSince}})
	if errors.Is(err, pgx.ErrNoRows) {
		return notify.Notification{}, fmt.Errorf("get notification %d: %w", id, notify.ErrNotFound)
	}
	if err != nil {
		return notify.Notification{}, wrap(fmt.Sprintf("get notification %d", id), err)
	}
	if wKey != nil {
		n.Waiting = &notify.Waiting{Destination: *wKey, State: *wState, Reason: *wReason, Since: wSince.UTC()}
	}
	return n, nil
}

// withExtra scans a row's first columns as its Row would, and the columns
// after them into extra.
type withExtra struct {
	pgx.Row
	extra []any
}

func (r withExtra) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

// collectNotification is scanNotification as a pgx.RowToFunc.
func collectNotification(row pgx.CollectableRow) (notify.Notification, error) {
	return scanNotification(row)
}

func scanNotification(row pgx.Row) (notify.Notification, error) {
	var (
		n                notify.Notification
		status           string
		sentAt, failedAt *time.Time
		rank             int16
		fallback         string
	)
	err := row.Scan(&n.ID, &n.UserID, &n.Channel, &n.To, &n.Subject, &n.Body, &status, &n.Attempts,
		&n.LastError, &n.IdempotencyKey, &n.CreatedAt, &n.UpdatedAt, &sentAt, &failedAt,
		&n.SendAt, &n.ExpiresAt, &n.CanceledAt, &n.ExpiredAt, &rank,
		&n.HTML, &n.Template, &n.TemplateVersion, &n.Locale, &n.Digest, &n.Category, &n.Unsubscribe,
		&fallback, &n.FallbackOf, &n.FallbackNext)
	if err != nil {
		return notify.Notification{}, err
	}
	if n.Fallback, err = notify.DecodeHops(fallback); err != nil {
		return notify.Notification{}, err
	}
	n.Priority = notify.PriorityOfRank(int(rank))
	n.Status = notify.Status(status)
	n.SentAt = sentAt
	n.FailedAt = failedAt
	for _, t := range []**time.Time{&n.SendAt, &n.ExpiresAt, &n.CanceledAt, &n.ExpiredAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	return n, nil
}
