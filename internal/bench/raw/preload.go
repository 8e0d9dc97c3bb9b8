package raw

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// preloadSpan is how far back the preloaded history reaches: within the
// default retention (168h), so that retention does not delete it during
// the run.
const preloadSpan = 6 * 24 * time.Hour

// The preload's statements write a delivered history in bulk, as herald
// would have left it. Only rows past the tables' last ids before the
// preload are read, so that a history can be added to a database in use.
const (
	// preloadNotifications writes $1 notifications, sent, created evenly
	// over the $2 microseconds up to now.
	preloadNotifications = `
INSERT INTO notifications (user_id, channel, recipient, subject, body, status, attempts, created_at, updated_at, sent_at)
SELECT 'preload-' || (g % 10000), 'email', 'preload-' || g || '@example.com', 'preloaded', 'a delivered notification',
	'sent', 1, at.t, at.t + interval '1 second', at.t + interval '1 second'
FROM generate_series(1, $1::bigint) AS g,
	LATERAL (SELECT now() - ($1::bigint - g) * ($2::bigint / $1::bigint) * interval '1 microsecond' AS t) AS at`

	// preloadOutbox writes each new notification's event (past id $1),
	// processed when it was sent.
	preloadOutbox = `
INSERT INTO outbox (event_type, payload, occurred_at, available_at, processed_at)
SELECT 'notification.requested', jsonb_build_object('notification_id', n.id::text, 'user_id', n.user_id,
	'channel', n.channel, 'to', n.recipient, 'subject', n.subject, 'body', n.body),
	n.created_at, n.created_at, n.sent_at
FROM notifications AS n WHERE n.id > $1 ORDER BY n.id`

	// preloadProcessed and preloadAttempts write each new event's (past
	// id $1) dedup row and its one attempt, sent.
	preloadProcessed = `INSERT INTO processed_messages (message_id, processed_at) SELECT id, processed_at FROM outbox WHERE id > $1`
	preloadAttempts  = `
INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at, finished_at, outcome)
SELECT (o.payload->>'notification_id')::bigint, o.id, 1, o.processed_at, o.processed_at, 'sent'
FROM outbox AS o WHERE o.id > $1`
)

// PreloadPostgres writes n notifications already sent into the scratch
// database at dbURL (made by ScratchPostgres and migrated), with what their
// delivery left behind in the outbox, processed_messages and
// delivery_attempts, in one transaction of bulk INSERT ... SELECT
// generate_series, then analyses the tables: a deployment that holds such a
// history has had autovacuum gather statistics on it. It refuses any
// database but a scratch one.
func PreloadPostgres(ctx context.Context, dbURL string, n int) error {
	if !IsScratch(dbURL) {
		return fmt.Errorf("preload: refusing a database not made by the bench")
	}
	if n < 1 {
		return fmt.Errorf("preload: want at least 1 notification, got %d", n)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("preload: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var lastNotification, lastEvent int64
		if err := tx.QueryRow(ctx, `SELECT (SELECT COALESCE(max(id), 0) FROM notifications), (SELECT COALESCE(max(id), 0) FROM outbox)`).
			Scan(&lastNotification, &lastEvent); err != nil {
			return err
		}
		for _, st := range []struct {
			q    string
			args []any
		}{
			{preloadNotifications, []any{int64(n), preloadSpan.Microseconds()}},
			{preloadOutbox, []any{lastNotification}},
			{preloadProcessed, []any{lastEvent}},
			{preloadAttempts, []any{lastEvent}},
		} {
			if _, err := tx.Exec(ctx, st.q, st.args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	if _, err := conn.Exec(ctx, `ANALYZE notifications, outbox, processed_messages, delivery_attempts`); err != nil {
		return fmt.Errorf("preload: analyze: %w", err)
	}
	return nil
}

// herald's tables whose sequential scans SeqScans counts.
var scannedTables = []string{"notifications", "outbox", "processed_messages", "delivery_attempts"}

// SeqScans returns the sequential scans of each of herald's tables in the
// database at dbURL so far, from pg_stat_user_tables. A backend reports its
// counts when it goes idle (at most once a second) and when it exits: wait,
// at most until ctx ends, for every other connection to the database to
// close, so that the figures include theirs.
func SeqScans(ctx context.Context, dbURL string) (map[string]int64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("seq scans: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := waitAlone(ctx, conn); err != nil {
		return nil, fmt.Errorf("seq scans: %w", err)
	}
	// A partition's scans count as its partitioned table's (the outbox's,
	// migration 0014), except those of a partition that never gave a scan
	// a row: the empty partitions of the days ahead, which a statement
	// addressing rows by id alone scans, reading nothing.
	rows, err := conn.Query(ctx, `
SELECT t.name, sum(CASE WHEN pg_partition_root(s.relid) IS NULL OR s.seq_tup_read > 0 THEN COALESCE(s.seq_scan, 0) ELSE 0 END)::bigint
FROM pg_stat_user_tables AS s,
	LATERAL (SELECT COALESCE((SELECT c.relname FROM pg_class AS c WHERE c.oid = pg_partition_root(s.relid)), s.relname)::text AS name) AS t
WHERE t.name = ANY($1)
GROUP BY 1`, scannedTables)
	if err != nil {
		return nil, fmt.Errorf("seq scans: %w", err)
	}
	scans := map[string]int64{}
	for rows.Next() {
		var (
			table string
			n     int64
		)
		if err := rows.Scan(&table, &n); err != nil {
			return nil, fmt.Errorf("seq scans: %w", err)
		}
		scans[table] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("seq scans: %w", err)
	}
	return scans, nil
}

// waitAlone waits, at most until ctx ends, until conn is the only
// connection to its database: a backend reports its statistics to pg_stat_*
// when it exits, so that once the others have gone the counts include all
// they did. The idle ones are ended: a pooler (PgBouncer) keeps its server
// sessions open after its clients have gone, and nothing else uses the
// scratch database when waitAlone is called; an ended backend reports its
// counts as it exits.
func waitAlone(ctx context.Context, conn *pgx.Conn) error {
	for {
		var others int
		if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state IS DISTINCT FROM 'idle' OR NOT pg_terminate_backend(pid))
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&others); err != nil {
			return err
		}
		if others == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d connections still open: %w", others, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
