package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// destinationFailing inserts a failing record, or updates the one
	// there: a failing record keeps the earlier since and takes the new
	// reason; a disabled one is left as it is (the CASEs compare on its
	// state in the same statement, under the row's lock).
	destinationFailing = `
INSERT INTO destinations AS d (key, channel, state, reason, since, updated_at)
VALUES ($1, $2, 'failing', $3, $4, now())
ON CONFLICT (key) DO UPDATE SET
	reason     = CASE WHEN d.state = 'failing' THEN EXCLUDED.reason ELSE d.reason END,
	since      = CASE WHEN d.state = 'failing' THEN LEAST(d.since, EXCLUDED.since) ELSE d.since END,
	updated_at = CASE WHEN d.state = 'failing' THEN now() ELSE d.updated_at END
RETURNING key, channel, state, reason, since`

	destinationUp = `DELETE FROM destinations WHERE key = $1 AND state = 'failing'`

	disableDestination = `
UPDATE destinations SET state = 'disabled', reason = $2, updated_at = now()
WHERE key = $1 AND state = 'failing'`

	disabledDestinations = `SELECT key FROM destinations WHERE state = 'disabled' ORDER BY key`

	// listDestinations reads a page of records by key ($1: after this
	// key; $2: the state, '' for any; $3 rows) and counts each one's
	// pending notifications from notifications_destination_pending_idx
	// alone, for the page's rows only (the count is in the select list,
	// under the limit).
	listDestinations = `
SELECT d.key, d.channel, d.state, d.reason, d.since,
	(SELECT count(*) FROM notifications AS n WHERE n.destination = d.key AND n.status = 'pending')
FROM destinations AS d
WHERE d.key > $1 AND ($2 = '' OR d.state = $2)
ORDER BY d.key
LIMIT $3`

	enableDestination = `DELETE FROM destinations WHERE key = $1`
)

// DestinationFailing records key (of channel) as failing with reason since
// at: a new record, or the one there with its earlier since kept and its
// reason updated. A disabled record stays as it is. It returns the record
// as stored.
func (s *Store) DestinationFailing(ctx context.Context, channel, key, reason string, at time.Time) (notify.Destination, error) {
	var d notify.Destination
	err := s.pool.QueryRow(ctx, destinationFailing, key, channel, reason, at).
		Scan(&d.Key, &d.Channel, &d.State, &d.Reason, &d.Since)
	if err != nil {
		return notify.Destination{}, wrap(fmt.Sprintf("record destination %s failing", key), err)
	}
	d.Since = d.Since.UTC()
	return d, nil
}

// DestinationUp removes key's failing record; a disabled one stays, and no
// record is no error.
func (s *Store) DestinationUp(ctx context.Context, key string) error {
	if _, err := s.pool.Exec(ctx, destinationUp, key); err != nil {
		return wrap(fmt.Sprintf("record destination %s up", key), err)
	}
	return nil
}

// DisableDestination marks key's failing record disabled with reason, and
// reports false when there was no failing record.
func (s *Store) DisableDestination(ctx context.Context, key, reason string) (bool, error) {
	tag, err := s.pool.Exec(ctx, disableDestination, key, reason)
	if err != nil {
		return false, wrap(fmt.Sprintf("disable destination %s", key), err)
	}
	return tag.RowsAffected() == 1, nil
}

// DisabledDestinations lists the keys of the disabled destinations, sorted.
func (s *Store) DisabledDestinations(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, disabledDestinations)
	if err != nil {
		return nil, wrap("list disabled destinations", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, wrap("list disabled destinations", err)
	}
	return keys, nil
}

// ListDestinations returns the page of destination records f selects, by
// key, each with the number of its pending notifications.
func (s *Store) ListDestinations(ctx context.Context, f notify.DestinationFilter) (notify.DestinationPage, error) {
	if f.Limit < 1 {
		return notify.DestinationPage{}, fmt.Errorf("list destinations: limit must be at least 1, got %d", f.Limit)
	}
	rows, err := s.pool.Query(ctx, listDestinations, f.After, f.State, int64(f.Limit)+1)
	if err != nil {
		return notify.DestinationPage{}, wrap("list destinations", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (notify.Destination, error) {
		var d notify.Destination
		err := row.Scan(&d.Key, &d.Channel, &d.State, &d.Reason, &d.Since, &d.Pending)
		d.Since = d.Since.UTC()
		return d, err
	})
	if err != nil {
		return notify.DestinationPage{}, wrap("list destinations", err)
	}
	return notify.CutDestinations(out, f.Limit), nil
}

// EnableDestination removes key's record, disabled or failing: its
// deliveries go again. No record is notify.ErrNotFound.
func (s *Store) EnableDestination(ctx context.Context, key string) error {
	tag, err := s.pool.Exec(ctx, enableDestination, key)
	if err != nil {
		return wrap(fmt.Sprintf("enable destination %s", key), err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("enable destination %s: %w", key, notify.ErrNotFound)
	}
	return nil
}
