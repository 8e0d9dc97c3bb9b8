package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// pgView is the PostgreSQL store: the run's scratch database, which herald
// already reaches through the database proxies.
type pgView struct {
	db     *pgxpool.Pool
	dbName string
}

// openPostgres is the postgres row's open.
func openPostgres(ctx context.Context, h *harness) (storeView, error) {
	return pgView{db: h.db, dbName: h.dbName}, nil
}

func (v pgView) drained(ctx context.Context, ids, drops []int64) (bool, string) {
	var unprocessed, pending, dropsPending int
	if err := v.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE processed_at IS NULL`).Scan(&unprocessed); err != nil {
		return false, "count unprocessed: " + err.Error()
	}
	if err := v.db.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE status = 'pending' AND id = ANY($1)`, ids).Scan(&pending); err != nil {
		return false, "count pending: " + err.Error()
	}
	if err := v.db.QueryRow(ctx, `SELECT count(*) FROM notifications WHERE status = 'pending' AND id = ANY($1)`, drops).Scan(&dropsPending); err != nil {
		return false, "count pending: " + err.Error()
	}
	if unprocessed > 0 || pending > 0 || dropsPending > 0 {
		return false, fmt.Sprintf("%d unprocessed outbox rows, %d accepted notifications pending, %d of %d smtp-drop notifications pending",
			unprocessed, pending, dropsPending, len(drops))
	}
	return true, ""
}

// deadLetters are the outbox rows finished with a reason: a dead letter,
// unless its notification was sent (a retry's reason stays on the row).
func (v pgView) deadLetters(ctx context.Context) (map[int64]bool, int, error) {
	ids := map[int64]bool{}
	rows, err := v.db.Query(ctx, `
SELECT o.id FROM outbox o
LEFT JOIN notifications n ON jsonb_typeof(o.payload) = 'object'
	AND o.payload->>'notification_id' ~ '^[0-9]{1,18}$'
	AND n.id = (o.payload->>'notification_id')::bigint
WHERE o.processed_at IS NOT NULL AND o.last_error IS NOT NULL
  AND (n.id IS NULL OR n.status <> 'sent' OR o.event_type <> 'notification.requested')`)
	if err != nil {
		return nil, 0, fmt.Errorf("list dead outbox rows: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, 0, err
		}
		ids[id] = true
		n++
	}
	return ids, n, rows.Err()
}

func (v pgView) states(ctx context.Context, ids []int64) (map[int64]string, map[int64]int, error) {
	rows, err := v.db.Query(ctx, `SELECT id, status, attempts FROM notifications WHERE id = ANY($1)`, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read notifications: %w", err)
	}
	defer rows.Close()
	status, attempts := map[int64]string{}, map[int64]int{}
	for rows.Next() {
		var id int64
		var s string
		var a int
		if err := rows.Scan(&id, &s, &a); err != nil {
			return nil, nil, fmt.Errorf("read notifications: %w", err)
		}
		status[id], attempts[id] = s, a
	}
	return status, attempts, rows.Err()
}

func (v pgView) tally(ctx context.Context, drops []int64) (*tally, error) {
	t := &tally{byKey: map[string]row{}}
	if err := v.readNotifications(ctx, t); err != nil {
		return nil, err
	}
	if err := v.db.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE processed_at IS NULL`).Scan(&t.unprocessed); err != nil {
		return nil, fmt.Errorf("count unprocessed: %w", err)
	}
	if err := v.db.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE NOT (id = ANY(COALESCE($1::bigint[], '{}')))) FROM notifications WHERE status = 'failed'`,
		drops).Scan(&t.failed, &t.otherFailed); err != nil {
		return nil, fmt.Errorf("count failed: %w", err)
	}
	return t, nil
}

// readNotifications reads every notification row into t.byKey (id and
// status by idempotency key), counting the rows without a key.
func (v pgView) readNotifications(ctx context.Context, t *tally) error {
	rows, err := v.db.Query(ctx, `SELECT id, idempotency_key, status FROM notifications`)
	if err != nil {
		return fmt.Errorf("read notifications: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rw row
		var key *string
		if err := rows.Scan(&rw.id, &key, &rw.status); err != nil {
			return fmt.Errorf("read notifications: %w", err)
		}
		if key == nil {
			t.keyless++
			continue
		}
		t.byKey[*key] = rw
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read notifications: %w", err)
	}
	return nil
}

// events returns the ids of the notifications' requested events.
func (v pgView) events(ctx context.Context, ids []int64) (map[int64]bool, error) {
	out := map[int64]bool{}
	rows, err := v.db.Query(ctx, `SELECT id FROM outbox WHERE jsonb_typeof(payload) = 'object' AND payload->>'notification_id' = ANY($1) AND event_type = 'notification.requested'`, idStrings(ids))
	if err != nil {
		return nil, fmt.Errorf("read the drop notifications' events: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

func (v pgView) throttleSpent(ctx context.Context) (int, error) {
	var spent int
	err := v.db.QueryRow(ctx, `SELECT count(*) FROM delivery_attempts WHERE outcome IS DISTINCT FROM 'deferred' AND error LIKE '%' || $1 || '%'`,
		throttleMarker).Scan(&spent)
	if err != nil {
		return 0, fmt.Errorf("count throttled attempts: %w", err)
	}
	return spent, nil
}

func (v pgView) conns(ctx context.Context) int {
	n := -1
	_ = v.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND application_name IS DISTINCT FROM $2`,
		v.dbName, appName).Scan(&n)
	return n
}
