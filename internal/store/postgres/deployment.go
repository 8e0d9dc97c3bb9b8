package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// selectPendingStats reads the pending entries alone, never the
	// settled history: the count from a pending index (the partial
	// notifications_pending_idx of migration 0006, or the pending range of
	// notifications_status_created_idx of 0005), stopped after $1 entries;
	// the oldest as the first entry of notifications_status_created_idx's
	// pending range, in its order (a walk of one entry).
	selectPendingStats = `
SELECT
	(SELECT count(*) FROM (SELECT 1 FROM notifications WHERE status = 'pending' LIMIT $1) AS p),
	COALESCE(EXTRACT(EPOCH FROM now() - (
		SELECT created_at FROM notifications WHERE status = 'pending' ORDER BY status, created_at LIMIT 1)), 0)::float8`

	// beatProcess writes a process's row with the database's clock, and
	// pruneProcesses deletes the rows of processes gone for longer than
	// $1 (a table of one row per process: no index needed).
	beatProcess = `
INSERT INTO processes (id, host, pid, roles, version, started_at, seen_at, senders)
VALUES ($1, $2, $3, $4, $5, $6, now(), $7)
ON CONFLICT (id) DO UPDATE SET seen_at = now(), senders = EXCLUDED.senders`
	pruneProcesses  = `DELETE FROM processes WHERE seen_at < now() - $1::bigint * interval '1 microsecond'`
	leaveProcess    = `DELETE FROM processes WHERE id = $1`
	selectProcesses = `
SELECT id, host, pid, roles, version, started_at, seen_at,
	GREATEST(EXTRACT(EPOCH FROM now() - seen_at), 0)::float8, senders
FROM processes
ORDER BY started_at, id`
)

// PendingStats counts the pending notifications (up to notify.PendingCap)
// and the age of the oldest.
func (s *Store) PendingStats(ctx context.Context) (notify.PendingStats, error) {
	var (
		st  notify.PendingStats
		age float64
	)
	if err := s.pool.QueryRow(ctx, selectPendingStats, notify.PendingCap+1).Scan(&st.Pending, &age); err != nil {
		return notify.PendingStats{}, wrap("pending stats", err)
	}
	if st.Pending > notify.PendingCap {
		st.Pending, st.Capped = notify.PendingCap, true
	}
	st.OldestAge = time.Duration(age * float64(time.Second))
	return st, nil
}

// BeatProcess writes p's row (seen now, by the database's clock) and
// deletes the rows of processes not seen for longer than forget.
func (s *Store) BeatProcess(ctx context.Context, p notify.Process, forget time.Duration) error {
	senders, err := json.Marshal(nonNil(p.Senders))
	if err != nil {
		return fmt.Errorf("beat process: %w", err)
	}
	b := &pgx.Batch{}
	b.Queue(beatProcess, p.ID, p.Host, p.PID, strings.Join(p.Roles, ","), p.Version, p.StartedAt, senders)
	b.Queue(pruneProcesses, forget.Microseconds())
	if err := s.sendBatch(ctx, b).Close(); err != nil {
		return wrap("beat process", err)
	}
	return nil
}

// LeaveProcess deletes id's row: the process stops.
func (s *Store) LeaveProcess(ctx context.Context, id string) error {
	if _, err := s.pool.Exec(ctx, leaveProcess, id); err != nil {
		return wrap("leave process", err)
	}
	return nil
}

// Processes lists the processes' rows, oldest start first, each with its
// age by the database's clock.
func (s *Store) Processes(ctx context.Context) ([]notify.Process, error) {
	rows, err := s.pool.Query(ctx, selectProcesses)
	if err != nil {
		return nil, wrap("list processes", err)
	}
	// AppendRows on nil, not CollectRows: no row gives nil.
	out, err := pgx.AppendRows([]notify.Process(nil), rows, func(r pgx.CollectableRow) (notify.Process, error) {
		var (
			p       notify.Process
			roles   string
			age     float64
			senders []byte
		)
		if err := r.Scan(&p.ID, &p.Host, &p.PID, &roles, &p.Version, &p.StartedAt, &p.SeenAt, &age, &senders); err != nil {
			return p, err
		}
		p.Roles = splitRoles(roles)
		p.StartedAt, p.SeenAt = p.StartedAt.UTC(), p.SeenAt.UTC()
		p.Age = time.Duration(age * float64(time.Second))
		if err := json.Unmarshal(senders, &p.Senders); err != nil {
			return p, fmt.Errorf("process %s: senders: %w", p.ID, err)
		}
		return p, nil
	})
	if err != nil {
		return nil, wrap("list processes", err)
	}
	return out, nil
}

func splitRoles(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func nonNil(s []notify.SenderReport) []notify.SenderReport {
	if s == nil {
		return []notify.SenderReport{}
	}
	return s
}
