package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// selectPendingStats walks notifications_status_created_idx (migration
	// 0005) over the pending entries alone, oldest first, and stops after
	// ?1 of them: the oldest is the first entry.
	selectPendingStats = `
SELECT count(*), min(p.created_at)
FROM (
	SELECT created_at FROM notifications
	WHERE status = 'pending'
	ORDER BY status, created_at
	LIMIT ?1
) AS p`

	beatProcess = `
INSERT INTO processes (id, host, pid, roles, version, started_at, seen_at, senders)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
ON CONFLICT (id) DO UPDATE SET seen_at = excluded.seen_at, senders = excluded.senders`
	pruneProcesses  = `DELETE FROM processes WHERE seen_at < ?`
	leaveProcess    = `DELETE FROM processes WHERE id = ?`
	selectProcesses = `
SELECT id, host, pid, roles, version, started_at, seen_at, senders
FROM processes
ORDER BY started_at, id`
)

// PendingStats counts the pending notifications (up to notify.PendingCap)
// and the age of the oldest.
func (s *Store) PendingStats(ctx context.Context) (notify.PendingStats, error) {
	var (
		st     notify.PendingStats
		oldest sql.NullString
	)
	if err := s.read.QueryRowContext(ctx, selectPendingStats, notify.PendingCap+1).Scan(&st.Pending, &oldest); err != nil {
		return notify.PendingStats{}, fmt.Errorf("pending stats: %w", classify(err))
	}
	if st.Pending > notify.PendingCap {
		st.Pending, st.Capped = notify.PendingCap, true
	}
	if oldest.Valid {
		t, err := parseTime(oldest.String)
		if err != nil {
			return notify.PendingStats{}, fmt.Errorf("pending stats: %w", err)
		}
		st.OldestAge = max(time.Since(t), 0)
	}
	return st, nil
}

// BeatProcess writes p's row (seen now) and deletes the rows of processes
// not seen for longer than forget.
func (s *Store) BeatProcess(ctx context.Context, p notify.Process, forget time.Duration) error {
	senders := p.Senders
	if senders == nil {
		senders = []notify.SenderReport{}
	}
	js, err := json.Marshal(senders)
	if err != nil {
		return fmt.Errorf("beat process: %w", err)
	}
	at := now()
	err = s.inTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, beatProcess, p.ID, p.Host, p.PID, strings.Join(p.Roles, ","), p.Version,
			formatTime(p.StartedAt), formatTime(at), string(js)); err != nil {
			return classify(err)
		}
		_, err := tx.ExecContext(ctx, pruneProcesses, formatTime(at.Add(-forget)))
		return classify(err)
	})
	if err != nil {
		return fmt.Errorf("beat process: %w", err)
	}
	return nil
}

// LeaveProcess deletes id's row: the process stops.
func (s *Store) LeaveProcess(ctx context.Context, id string) error {
	if _, err := s.write.ExecContext(ctx, leaveProcess, id); err != nil {
		return fmt.Errorf("leave process: %w", classify(err))
	}
	return nil
}

// Processes lists the processes' rows, oldest start first, each with its
// age by this process's clock.
func (s *Store) Processes(ctx context.Context) ([]notify.Process, error) {
	rows, err := s.read.QueryContext(ctx, selectProcesses)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", classify(err))
	}
	out, err := collect(rows, func(r *sql.Rows) (notify.Process, error) {
		var (
			p                    notify.Process
			roles, started, seen string
			senders              string
			err                  error
		)
		if err = r.Scan(&p.ID, &p.Host, &p.PID, &roles, &p.Version, &started, &seen, &senders); err != nil {
			return p, err
		}
		if roles != "" {
			p.Roles = strings.Split(roles, ",")
		}
		if p.StartedAt, err = parseTime(started); err != nil {
			return p, err
		}
		if p.SeenAt, err = parseTime(seen); err != nil {
			return p, err
		}
		p.Age = max(time.Since(p.SeenAt), 0)
		if err = json.Unmarshal([]byte(senders), &p.Senders); err != nil {
			return p, fmt.Errorf("process %s: senders: %w", p.ID, err)
		}
		return p, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", classify(err))
	}
	return out, nil
}
