package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// The console's overview. Timestamps are stored as fixed-width UTC text
// (timeLayout), so the minute is the text's first 16 characters, and each
// count reads a range of an index: created from notifications_created_idx,
// delivered from notifications_status_created_idx (status 'sent', created
// since the window began less notify.ActivityLookback), failed from
// notifications_failed_idx.
const (
	selectCreatedPerMinute = `
SELECT substr(created_at, 1, 16), count(*)
FROM notifications
WHERE created_at >= ?
GROUP BY 1`
	selectDeliveredPerMinute = `
SELECT substr(sent_at, 1, 16), count(*)
FROM notifications
WHERE status = 'sent' AND created_at >= ? AND sent_at >= ?
GROUP BY 1`
	selectFailedSince = `
SELECT count(*) FROM notifications WHERE status = 'failed' AND failed_at >= ?`

	minuteLayout = "2006-01-02T15:04"
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
		{selectCreatedPerMinute, []any{formatTime(since)}, a.Created},
		{selectDeliveredPerMinute, []any{formatTime(since.Add(-notify.ActivityLookback)), formatTime(since)}, a.Delivered},
	} {
		rows, err := s.read.QueryContext(ctx, q.sql, q.args...)
		if err != nil {
			return notify.Activity{}, fmt.Errorf("activity: %w", classify(err))
		}
		for rows.Next() {
			var (
				m string
				n int64
			)
			if err := rows.Scan(&m, &n); err != nil {
				rows.Close()
				return notify.Activity{}, fmt.Errorf("activity: scan: %w", classify(err))
			}
			t, err := time.Parse(minuteLayout, m)
			if err != nil {
				rows.Close()
				return notify.Activity{}, fmt.Errorf("activity: minute %q: %w", m, err)
			}
			q.into[t] = n
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return notify.Activity{}, fmt.Errorf("activity: %w", classify(err))
		}
	}
	if err := s.read.QueryRowContext(ctx, selectFailedSince, formatTime(since)).Scan(&a.Failed); err != nil {
		return notify.Activity{}, fmt.Errorf("activity: failed: %w", classify(err))
	}
	return a, nil
}
