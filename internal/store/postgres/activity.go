package postgres

import (
	"context"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// The console's overview. Each count reads a range of an index of
// migrations 0002 and 0005, never the whole table: created from
// notifications_created_idx (index only), delivered from
// notifications_status_created_idx (status 'sent', created since the window
// began less notify.ActivityLookback), failed from notifications_failed_idx.
const (
	selectCreatedPerMinute = `
SELECT date_trunc('minute', created_at), count(*)
FROM notifications
WHERE created_at >= $1
GROUP BY 1`
	selectDeliveredPerMinute = `
SELECT date_trunc('minute', sent_at), count(*)
FROM notifications
WHERE status = 'sent' AND created_at >= $2 AND sent_at >= $1
GROUP BY 1`
	selectFailedSince = `
SELECT count(*) FROM notifications WHERE status = 'failed' AND failed_at >= $1`
)

// Activity counts the notifications created and delivered per minute since
// since, and those dead-lettered since then.
func (s *Store) Activity(ctx context.Context, since time.Time) (notify.Activity, error) {
	a := notify.Activity{Created: map[time.Time]int64{}, Delivered: map[time.Time]int64{}}
	for _, q := range []struct {
		sql  string
		args []any
		into map[time.Time]int64
	}{
		{selectCreatedPerMinute, []any{since}, a.Created},
		{selectDeliveredPerMinute, []any{since, since.Add(-notify.ActivityLookback)}, a.Delivered},
	} {
		rows, err := s.pool.Query(ctx, q.sql, q.args...)
		if err != nil {
			return notify.Activity{}, wrap("activity", err)
		}
		for rows.Next() {
			var (
				m time.Time
				n int64
			)
			if err := rows.Scan(&m, &n); err != nil {
				rows.Close()
				return notify.Activity{}, wrap("activity: scan", err)
			}
			q.into[m.UTC()] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return notify.Activity{}, wrap("activity", err)
		}
	}
	if err := s.pool.QueryRow(ctx, selectFailedSince, since).Scan(&a.Failed); err != nil {
		return notify.Activity{}, wrap("activity: failed", err)
	}
	return a, nil
}
