package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// destinationFailing inserts a failing record, or updates the one
	// there: a failing record keeps the earlier since (times are
	// fixed-width text, which compares as the times do) and takes the new
	// reason; a disabled one is left as it is.
	destinationFailing = `
INSERT INTO destinations (key, channel, state, reason, since, updated_at)
VALUES (?1, ?2, 'failing', ?3, ?4, ?5)
ON CONFLICT (key) DO UPDATE SET
	reason     = CASE WHEN state = 'failing' THEN excluded.reason ELSE reason END,
	since      = CASE WHEN state = 'failing' THEN min(since, excluded.since) ELSE since END,
	updated_at = CASE WHEN state = 'failing' THEN excluded.updated_at ELSE updated_at END
RETURNING key, channel, state, reason, since`

	destinationUp = `DELETE FROM destinations WHERE key = ? AND state = 'failing'`

	disableDestination = `
UPDATE destinations SET state = 'disabled', reason = ?, updated_at = ?
WHERE key = ? AND state = 'failing'`

	disabledDestinations = `SELECT key FROM destinations WHERE state = 'disabled' ORDER BY key`

	// listDestinations reads a page of records by key (?1: after this
	// key; ?2: the state, '' for any; ?3 rows) and counts each one's
	// pending notifications from notifications_destination_pending_idx
	// alone.
	listDestinations = `
SELECT d.key, d.channel, d.state, d.reason, d.since,
	(SELECT count(*) FROM notifications AS n WHERE n.destination = d.key AND n.status = 'pending')
FROM destinations AS d
WHERE d.key > ?1 AND (?2 = '' OR d.state = ?2)
ORDER BY d.key
LIMIT ?3`

	enableDestination = `DELETE FROM destinations WHERE key = ?`
)

// DestinationFailing records key (of channel) as failing with reason since
// at: a new record, or the one there with its earlier since kept and its
// reason updated. A disabled record stays as it is. It returns the record
// as stored.
func (s *Store) DestinationFailing(ctx context.Context, channel, key, reason string, at time.Time) (notify.Destination, error) {
	var (
		d     notify.Destination
		since string
	)
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		return classify(tx.QueryRowContext(ctx, destinationFailing, key, channel, reason, formatTime(at), formatTime(now())).
			Scan(&d.Key, &d.Channel, &d.State, &d.Reason, &since))
	})
	if err != nil {
		return notify.Destination{}, fmt.Errorf("record destination %s failing: %w", key, err)
	}
	if d.Since, err = parseTime(since); err != nil {
		return notify.Destination{}, fmt.Errorf("record destination %s failing: %w", key, err)
	}
	return d, nil
}

// DestinationUp removes key's failing record; a disabled one stays, and no
// record is no error.
func (s *Store) DestinationUp(ctx context.Context, key string) error {
	if _, err := s.write.ExecContext(ctx, destinationUp, key); err != nil {
		return fmt.Errorf("record destination %s up: %w", key, classify(err))
	}
	return nil
}

// DisableDestination marks key's failing record disabled with reason, and
// reports false when there was no failing record.
func (s *Store) DisableDestination(ctx context.Context, key, reason string) (bool, error) {
	res, err := s.write.ExecContext(ctx, disableDestination, reason, formatTime(now()), key)
	if err != nil {
		return false, fmt.Errorf("disable destination %s: %w", key, classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("disable destination %s: %w", key, classify(err))
	}
	return n == 1, nil
}

// DisabledDestinations lists the keys of the disabled destinations, sorted.
func (s *Store) DisabledDestinations(ctx context.Context) ([]string, error) {
	rows, err := s.read.QueryContext(ctx, disabledDestinations)
	if err != nil {
		return nil, fmt.Errorf("list disabled destinations: %w", classify(err))
	}
	keys, err := collect(rows, func(r *sql.Rows) (string, error) {
		var k string
		err := r.Scan(&k)
		return k, err
	})
	if err != nil {
		return nil, fmt.Errorf("list disabled destinations: %w", classify(err))
	}
	return keys, nil
}

// ListDestinations returns the page of destination records f selects, by
// key, each with the number of its pending notifications.
func (s *Store) ListDestinations(ctx context.Context, f notify.DestinationFilter) (notify.DestinationPage, error) {
	if f.Limit < 1 {
		return notify.DestinationPage{}, fmt.Errorf("list destinations: limit must be at least 1, got %d", f.Limit)
	}
	rows, err := s.read.QueryContext(ctx, listDestinations, f.After, f.State, int64(f.Limit)+1)
	if err != nil {
		return notify.DestinationPage{}, fmt.Errorf("list destinations: %w", classify(err))
	}
	out, err := collect(rows, func(r *sql.Rows) (notify.Destination, error) {
		var (
			d     notify.Destination
			since string
		)
		err := r.Scan(&d.Key, &d.Channel, &d.State, &d.Reason, &since, &d.Pending)
		if err == nil {
			d.Since, err = parseTime(since)
		}
		return d, err
	})
	if err != nil {
		return notify.DestinationPage{}, fmt.Errorf("list destinations: %w", classify(err))
	}
	return notify.CutDestinations(out, f.Limit), nil
}

// EnableDestination removes key's record, disabled or failing: its
// deliveries go again. No record is notify.ErrNotFound.
func (s *Store) EnableDestination(ctx context.Context, key string) error {
	res, err := s.write.ExecContext(ctx, enableDestination, key)
	if err != nil {
		return fmt.Errorf("enable destination %s: %w", key, classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("enable destination %s: %w", key, classify(err))
	}
	if n == 0 {
		return fmt.Errorf("enable destination %s: %w", key, notify.ErrNotFound)
	}
	return nil
}
