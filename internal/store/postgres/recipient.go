package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlrows"
)

const (
	// lockRecipient reads a recipient's revision under a shared lock held
	// to the create's commit: an update or a delete of the recipient
	// (an erasure's) waits for the create, and the create never writes an
	// address they removed.
	lockRecipient = `SELECT revision FROM recipients WHERE user_id = $1 FOR SHARE`

	upsertRecipient = `
INSERT INTO recipients (user_id, addresses, locale, time_zone)
VALUES ($1, $2, $3, $4)
ON CONFLICT (user_id) DO UPDATE SET addresses = excluded.addresses, locale = excluded.locale, time_zone = excluded.time_zone,
	revision = recipients.revision + 1, updated_at = now()
RETURNING revision, updated_at`

	selectRecipient = `SELECT user_id, addresses, locale, time_zone, revision, updated_at
FROM recipients WHERE user_id = $1`

	deleteRecipient = `DELETE FROM recipients WHERE user_id = $1`

	// The erasure's statements (EraseRecipient).
	eraseNotifications = `UPDATE notifications SET recipient = '', subject = '', body = '', html = '', unsubscribe_url = '', fallback = '', last_error = NULL
WHERE user_id = $1 RETURNING id`
	eraseAttempts = `UPDATE delivery_attempts SET error = NULL
WHERE notification_id = ANY($1) AND error IS NOT NULL`
	// selectUserEvents reads every outbox row of the user's notifications:
	// the payload holds user_id (every event type does). It reads the
	// whole outbox, partitions included: an erasure is rare, and the
	// outbox is kept small by retention.
	selectUserEvents = `SELECT id, occurred_at, payload FROM outbox WHERE payload->>'user_id' = $1`
	eraseEvent       = `UPDATE outbox SET payload = $3, last_error = NULL WHERE id = $1 AND occurred_at = $2`

	// insertTemplateVersion numbers the version one past the name's
	// newest; two puts of one name at once meet at the primary key, and
	// the loser tries again.
	insertTemplateVersion = `
INSERT INTO template_versions (name, version, channel, locale, subject, text_part, html_part)
SELECT $1, COALESCE(max(version), 0) + 1, $2, $3, $4, $5, $6 FROM template_versions WHERE name = $1
RETURNING version, created_at`

	// selectTemplateAsOf is, for each channel and locale of the name, its
	// newest version at or below $2 (0: the newest), with the name's
	// newest version overall.
	selectTemplateAsOf = `
SELECT DISTINCT ON (channel, locale) name, version, channel, locale, subject, text_part, html_part, created_at,
	(SELECT max(version) FROM template_versions WHERE name = $1)
FROM template_versions WHERE name = $1 AND ($2 = 0 OR version <= $2)
ORDER BY channel, locale, version DESC`

	selectTemplates = `
SELECT DISTINCT ON (name, channel, locale) name, version, channel, locale, subject, text_part, html_part, created_at,
	max(version) OVER (PARTITION BY name)
FROM template_versions
ORDER BY name, channel, locale, version DESC`
)

// PutRecipient creates or replaces the recipient r.UserID and returns it
// with its revision and update time.
func (s *Store) PutRecipient(ctx context.Context, r notify.Recipient) (notify.Recipient, error) {
	err := s.pool.QueryRow(ctx, upsertRecipient, r.UserID, string(notify.EncodeAddresses(r.Addresses)), r.Locale, r.TimeZone).
		Scan(&r.Revision, &r.UpdatedAt)
	if err != nil {
		return notify.Recipient{}, wrap("put recipient", err)
	}
	r.Addresses = notify.CompactAddresses(r.Addresses)
	r.UpdatedAt = r.UpdatedAt.UTC()
	return r, nil
}

// Recipient returns the recipient userID, or notify.ErrNotFound.
func (s *Store) Recipient(ctx context.Context, userID string) (notify.Recipient, error) {
	var (
		r     notify.Recipient
		addrs []byte
	)
	err := s.pool.QueryRow(ctx, selectRecipient, userID).Scan(&r.UserID, &addrs, &r.Locale, &r.TimeZone, &r.Revision, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return notify.Recipient{}, fmt.Errorf("get recipient: %w", notify.ErrNotFound)
	}
	if err != nil {
		return notify.Recipient{}, wrap("get recipient", err)
	}
	if r.Addresses, err = notify.DecodeAddresses(addrs); err != nil {
		return notify.Recipient{}, fmt.Errorf("get recipient: %w", err)
	}
	r.UpdatedAt = r.UpdatedAt.UTC()
	return r, nil
}

// DeleteRecipient deletes the recipient userID (its addresses, locale and
// time zone), or answers notify.ErrNotFound. Its notifications are kept
// as they are: EraseRecipient anonymises them.
func (s *Store) DeleteRecipient(ctx context.Context, userID string) error {
	tag, err := s.pool.Exec(ctx, deleteRecipient, userID)
	if err != nil {
		return wrap("delete recipient", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("delete recipient: %w", notify.ErrNotFound)
	}
	return nil
}

// EraseRecipient erases a user's personal data, in one transaction: the
// recipient record is deleted; on every notification of the user, the
// address (to), subject, body, HTML part and last error are emptied; the
// errors of their delivery attempts are cleared; and in the payload of
// every outbox event of theirs the keys of notify.ErasedPayloadFields are
// emptied, with the event's last error. The user id, statuses, times and
// counts stay. A send already under way is not stopped.
func (s *Store) EraseRecipient(ctx context.Context, userID string) (notify.Erasure, error) {
	var out notify.Erasure
	tx, err := s.begin(ctx)
	if err != nil {
		return out, wrap("erase recipient: begin", err)
	}
	defer rollback(tx)
	tag, err := tx.Exec(ctx, deleteRecipient, userID)
	if err != nil {
		return out, wrap("erase recipient: delete recipient", err)
	}
	out.Recipient = tag.RowsAffected() > 0
	rows, err := tx.Query(ctx, eraseNotifications, userID)
	if err != nil {
		return out, wrap("erase recipient: notifications", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return out, wrap("erase recipient: notifications", err)
	}
	out.Notifications = int64(len(ids))
	if len(ids) > 0 {
		tag, err := tx.Exec(ctx, eraseAttempts, ids)
		if err != nil {
			return out, wrap("erase recipient: attempts", err)
		}
		out.Attempts = tag.RowsAffected()
	}
	type ev struct {
		id      int64
		at      time.Time
		payload []byte
	}
	rows, err = tx.Query(ctx, selectUserEvents, userID)
	if err != nil {
		return out, wrap("erase recipient: events", err)
	}
	var evs []ev
	for rows.Next() {
		var e ev
		if err := rows.Scan(&e.id, &e.at, &e.payload); err != nil {
			rows.Close()
			return out, wrap("erase recipient: events", err)
		}
		evs = append(evs, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, wrap("erase recipient: events", err)
	}
	for _, e := range evs {
		p, _ := notify.ErasePayload(e.payload)
		if _, err := tx.Exec(ctx, eraseEvent, e.id, e.at, p); err != nil {
			return out, wrap("erase recipient: event", err)
		}
		out.Events++
	}
	if err := tx.Commit(ctx); err != nil {
		return out, wrap("erase recipient: commit", err)
	}
	return out, nil
}

// PutTemplate stores v as the next version of its template and returns it
// with its version number and creation time.
func (s *Store) PutTemplate(ctx context.Context, v notify.TemplateVersion) (notify.TemplateVersion, error) {
	for try := 0; ; try++ {
		err := s.pool.QueryRow(ctx, insertTemplateVersion, v.Name, v.Channel, v.Locale, v.Subject, v.Text, v.HTML).
			Scan(&v.Version, &v.CreatedAt)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" && try < 10 {
			continue // another put of the name took the number
		}
		if err != nil {
			return notify.TemplateVersion{}, wrap("put template", err)
		}
		v.CreatedAt = v.CreatedAt.UTC()
		return v, nil
	}
}

// Template returns the template name as of version (0: its newest): for
// each channel and locale, the newest version at or below it. No version
// of the name at all is notify.ErrNotFound.
func (s *Store) Template(ctx context.Context, name string, version int) (notify.Template, error) {
	rows, err := s.pool.Query(ctx, selectTemplateAsOf, name, version)
	if err != nil {
		return notify.Template{}, wrap("get template", err)
	}
	ts, err := scanTemplates(rows)
	if err != nil {
		return notify.Template{}, wrap("get template", err)
	}
	if len(ts) == 0 {
		return notify.Template{}, fmt.Errorf("get template %q: %w", name, notify.ErrNotFound)
	}
	return ts[0], nil
}

// Templates returns every template, each as of its newest version, by
// name.
func (s *Store) Templates(ctx context.Context) ([]notify.Template, error) {
	rows, err := s.pool.Query(ctx, selectTemplates)
	if err != nil {
		return nil, wrap("list templates", err)
	}
	ts, err := scanTemplates(rows)
	if err != nil {
		return nil, wrap("list templates", err)
	}
	return ts, nil
}

// scanTemplates groups rows of variants, ordered by name, into templates.
func scanTemplates(rows pgx.Rows) ([]notify.Template, error) {
	defer rows.Close()
	return sqlrows.Templates(rows, func() (notify.TemplateVersion, int, error) {
		var (
			v      notify.TemplateVersion
			latest int
		)
		err := rows.Scan(&v.Name, &v.Version, &v.Channel, &v.Locale, &v.Subject, &v.Text, &v.HTML, &v.CreatedAt, &latest)
		v.CreatedAt = v.CreatedAt.UTC()
		return v, latest, err
	})
}
