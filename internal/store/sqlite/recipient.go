package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/sqlrows"
)

const (
	selectRecipientRevision = `SELECT revision FROM recipients WHERE user_id = ?`

	upsertRecipient = `
INSERT INTO recipients (user_id, addresses, locale, time_zone, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (user_id) DO UPDATE SET addresses = excluded.addresses, locale = excluded.locale, time_zone = excluded.time_zone,
	revision = recipients.revision + 1, updated_at = excluded.updated_at
RETURNING revision`

	selectRecipient = `SELECT user_id, addresses, locale, time_zone, revision, updated_at
FROM recipients WHERE user_id = ?`

	deleteRecipient = `DELETE FROM recipients WHERE user_id = ?`

	eraseNotifications = `UPDATE notifications SET recipient = '', subject = '', body = '', html = '', unsubscribe_url = '', fallback = '', last_error = NULL
WHERE user_id = ? RETURNING id`
	eraseAttempts = `UPDATE delivery_attempts SET error = NULL
WHERE notification_id IN (SELECT id FROM notifications WHERE user_id = ?) AND error IS NOT NULL`
	// selectUserEvents reads the whole outbox: an erasure is rare, and
	// retention keeps the outbox small.
	selectUserEvents = `SELECT id, payload FROM outbox WHERE json_extract(payload, '$.user_id') = ?`
	eraseEvent       = `UPDATE outbox SET payload = ?, last_error = NULL WHERE id = ?`

	// insertTemplateVersion numbers the version one past the name's
	// newest: one writer, so no two puts take the same number.
	insertTemplateVersion = `
INSERT INTO template_versions (name, version, channel, locale, subject, text_part, html_part, created_at)
SELECT ?1, COALESCE(max(version), 0) + 1, ?2, ?3, ?4, ?5, ?6, ?7 FROM template_versions WHERE name = ?1
RETURNING version`

	// templateColumns read a variant and its name's newest version.
	templateColumns = `t.name, t.version, t.channel, t.locale, t.subject, t.text_part, t.html_part, t.created_at,
	(SELECT max(version) FROM template_versions WHERE name = t.name)`

	// selectTemplateAsOf is, for each channel and locale of the name, its
	// newest version at or below ?2 (0: the newest).
	selectTemplateAsOf = `SELECT ` + templateColumns + `
FROM template_versions AS t
WHERE t.name = ?1 AND t.version = (
	SELECT max(version) FROM template_versions
	WHERE name = t.name AND channel = t.channel AND locale = t.locale AND (?2 = 0 OR version <= ?2))
ORDER BY t.channel, t.locale`

	selectTemplates = `SELECT ` + templateColumns + `
FROM template_versions AS t
WHERE t.version = (
	SELECT max(version) FROM template_versions
	WHERE name = t.name AND channel = t.channel AND locale = t.locale)
ORDER BY t.name, t.channel, t.locale`
)

// PutRecipient creates or replaces the recipient r.UserID and returns it
// with its revision and update time.
func (s *Store) PutRecipient(ctx context.Context, r notify.Recipient) (notify.Recipient, error) {
	t := now()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, upsertRecipient, r.UserID, string(notify.EncodeAddresses(r.Addresses)), r.Locale, r.TimeZone, formatTime(t)).
			Scan(&r.Revision)
	})
	if err != nil {
		return notify.Recipient{}, fmt.Errorf("put recipient: %w", classify(err))
	}
	r.Addresses = notify.CompactAddresses(r.Addresses)
	r.UpdatedAt = t
	return r, nil
}

// Recipient returns the recipient userID, or notify.ErrNotFound.
func (s *Store) Recipient(ctx context.Context, userID string) (notify.Recipient, error) {
	var (
		r         notify.Recipient
		addrs, at string
	)
	err := s.read.QueryRowContext(ctx, selectRecipient, userID).Scan(&r.UserID, &addrs, &r.Locale, &r.TimeZone, &r.Revision, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return notify.Recipient{}, fmt.Errorf("get recipient: %w", notify.ErrNotFound)
	}
	if err != nil {
		return notify.Recipient{}, fmt.Errorf("get recipient: %w", classify(err))
	}
	if r.UpdatedAt, err = parseTime(at); err != nil {
		return notify.Recipient{}, fmt.Errorf("get recipient: %w", err)
	}
	if r.Addresses, err = notify.DecodeAddresses([]byte(addrs)); err != nil {
		return notify.Recipient{}, fmt.Errorf("get recipient: %w", err)
	}
	return r, nil
}

// DeleteRecipient deletes the recipient userID, or answers
// notify.ErrNotFound. Its notifications are kept as they are:
// EraseRecipient anonymises them.
func (s *Store) DeleteRecipient(ctx context.Context, userID string) error {
	var n int64
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, deleteRecipient, userID)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("delete recipient: %w", classify(err))
	}
	if n == 0 {
		return fmt.Errorf("delete recipient: %w", notify.ErrNotFound)
	}
	return nil
}

// EraseRecipient erases a user's personal data in one transaction, as the
// PostgreSQL store does (see its EraseRecipient).
func (s *Store) EraseRecipient(ctx context.Context, userID string) (notify.Erasure, error) {
	var out notify.Erasure
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		out = notify.Erasure{}
		res, err := tx.ExecContext(ctx, deleteRecipient, userID)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		out.Recipient = n > 0
		res, err = tx.ExecContext(ctx, eraseAttempts, userID)
		if err != nil {
			return err
		}
		if out.Attempts, err = res.RowsAffected(); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, eraseNotifications, userID)
		if err != nil {
			return err
		}
		for rows.Next() {
			out.Notifications++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, selectUserEvents, userID)
		if err != nil {
			return err
		}
		type ev struct {
			id      int64
			payload string
		}
		var evs []ev
		for rows.Next() {
			var e ev
			if err := rows.Scan(&e.id, &e.payload); err != nil {
				rows.Close()
				return err
			}
			evs = append(evs, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, e := range evs {
			p, _ := notify.ErasePayload([]byte(e.payload))
			if _, err := tx.ExecContext(ctx, eraseEvent, string(p), e.id); err != nil {
				return err
			}
			out.Events++
		}
		return nil
	})
	if err != nil {
		return notify.Erasure{}, fmt.Errorf("erase recipient: %w", classify(err))
	}
	return out, nil
}

// PutTemplate stores v as the next version of its template and returns it
// with its version number and creation time.
func (s *Store) PutTemplate(ctx context.Context, v notify.TemplateVersion) (notify.TemplateVersion, error) {
	t := now()
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, insertTemplateVersion, v.Name, v.Channel, v.Locale, v.Subject, v.Text, v.HTML, formatTime(t)).
			Scan(&v.Version)
	})
	if err != nil {
		return notify.TemplateVersion{}, fmt.Errorf("put template: %w", classify(err))
	}
	v.CreatedAt = t
	return v, nil
}

// Template returns the template name as of version (0: its newest), or
// notify.ErrNotFound.
func (s *Store) Template(ctx context.Context, name string, version int) (notify.Template, error) {
	ts, err := s.templates(ctx, selectTemplateAsOf, name, version)
	if err != nil {
		return notify.Template{}, fmt.Errorf("get template: %w", err)
	}
	if len(ts) == 0 {
		return notify.Template{}, fmt.Errorf("get template %q: %w", name, notify.ErrNotFound)
	}
	return ts[0], nil
}

// Templates returns every template as of its newest version, by name.
func (s *Store) Templates(ctx context.Context) ([]notify.Template, error) {
	ts, err := s.templates(ctx, selectTemplates)
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	return ts, nil
}

func (s *Store) templates(ctx context.Context, query string, args ...any) ([]notify.Template, error) {
	rows, err := s.read.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	ts, err := sqlrows.Templates(rows, func() (notify.TemplateVersion, int, error) {
		var (
			v      notify.TemplateVersion
			at     string
			latest int
		)
		if err := rows.Scan(&v.Name, &v.Version, &v.Channel, &v.Locale, &v.Subject, &v.Text, &v.HTML, &at, &latest); err != nil {
			return v, 0, err
		}
		t, err := parseTime(at)
		v.CreatedAt = t
		return v, latest, err
	})
	return ts, classify(err) // a parse error is no driver error: classify keeps it as it is
}
