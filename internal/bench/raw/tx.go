package raw

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, as the store uses it

	"github.com/heraldhq/herald/internal/bench"
)

// TxOptions shapes a raw transaction ceiling.
type TxOptions struct {
	// N is the number of transactions. Required.
	N int
	// Clients is the number of concurrent clients, each with a connection
	// of its own on PostgreSQL (SQLite has one writer). Required.
	Clients int
	// Notify adds the store's pg_notify to each PostgreSQL transaction, to
	// measure what waking the relays costs. Default false (the bare
	// transaction: two INSERTs and a COMMIT).
	Notify bool
}

func (o TxOptions) validate() error {
	if o.N < 1 || o.Clients < 1 || o.Clients > math.MaxInt32 {
		return fmt.Errorf("raw tx: n and clients must be at least 1, got %d and %d", o.N, o.Clients)
	}
	return nil
}

// The PostgreSQL scratch tables copy herald's (columns, defaults, indexes
// and constraints, the unique idempotency key and the partial outbox index
// included), so the raw transaction maintains the same indexes as the
// store's. They need herald's schema in the same database: migrate first.
const (
	pgCreateRaw = `
CREATE TABLE IF NOT EXISTS bench_raw_notifications (LIKE notifications INCLUDING ALL);
CREATE TABLE IF NOT EXISTS bench_raw_outbox (LIKE outbox INCLUDING ALL)`
	pgDropRaw = `DROP TABLE IF EXISTS bench_raw_notifications, bench_raw_outbox`

	// The statements are the store's (store/postgres/notification.go) on
	// the scratch tables.
	pgInsertNotification = `
INSERT INTO bench_raw_notifications (user_id, channel, recipient, subject, body, idempotency_key)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''))
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, status, attempts, created_at, updated_at`
	pgInsertOutbox = `INSERT INTO bench_raw_outbox (event_type, payload) VALUES ($1, $2)`
	pgNotify       = `SELECT pg_notify('herald_bench_raw', '')`
)

// PostgresTx measures bare create transactions per second on the scratch
// database at dbURL (see ScratchPostgres): BEGIN, the notification INSERT,
// the outbox INSERT, COMMIT, from o.Clients connections at once. The scratch
// tables are dropped afterwards.
func PostgresTx(ctx context.Context, dbURL string, o TxOptions) (float64, error) {
	if err := o.validate(); err != nil {
		return 0, err
	}
	if !IsScratch(dbURL) {
		return 0, errors.New("raw tx: refusing to write outside a herald_bench_ scratch database")
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0, fmt.Errorf("raw tx: parse database url: %w", err)
	}
	cfg.MaxConns = int32(o.Clients)
	cfg.MinConns = int32(o.Clients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("raw tx: open pool: %w", err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, pgCreateRaw); err != nil {
		return 0, fmt.Errorf("raw tx: create scratch tables: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		// The scratch database is dropped anyway; this only keeps it tidy.
		_, _ = pool.Exec(cctx, pgDropRaw)
	}()
	// Connections are opened before the clock starts.
	if err := warm(ctx, pool, o.Clients); err != nil {
		return 0, err
	}
	return bench.Ceiling(ctx, o.N, o.Clients, func(ctx context.Context, i int) error {
		return pgCreate(ctx, pool, i, o.Notify)
	})
}

func warm(ctx context.Context, pool *pgxpool.Pool, n int) error {
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return fmt.Errorf("raw tx: connect: %w", err)
		}
		conns = append(conns, c)
	}
	return nil
}

func pgCreate(ctx context.Context, pool *pgxpool.Pool, i int, notify bool) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("raw tx: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after a commit: nothing to undo
	r := request(i)
	var (
		id                   int64
		status               string
		attempts             int
		createdAt, updatedAt time.Time
	)
	if err := tx.QueryRow(ctx, pgInsertNotification, r.UserID, r.Channel, r.To, r.Subject, r.Body, "").
		Scan(&id, &status, &attempts, &createdAt, &updatedAt); err != nil {
		return fmt.Errorf("raw tx: insert notification: %w", err)
	}
	r.NotificationID = fmt.Sprint(id)
	payload, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("raw tx: encode payload: %w", err)
	}
	if _, err := tx.Exec(ctx, pgInsertOutbox, "notification.requested", payload); err != nil {
		return fmt.Errorf("raw tx: insert outbox: %w", err)
	}
	if notify {
		if _, err := tx.Exec(ctx, pgNotify); err != nil {
			return fmt.Errorf("raw tx: notify: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("raw tx: commit: %w", err)
	}
	return nil
}

// The SQLite scratch tables are copies of herald's, derived from the
// migrated schema itself (SQLite has no CREATE TABLE ... LIKE): the DDL of
// notifications, outbox and their indexes, renamed. Like PostgreSQL's, they
// need herald's schema in the same file: migrate first.
const (
	sqliteSchema = `
SELECT sql FROM sqlite_master
WHERE tbl_name IN ('notifications', 'outbox') AND sql IS NOT NULL
ORDER BY type DESC` // tables before indexes
	sqliteDropRaw = `DROP TABLE IF EXISTS bench_raw_notifications; DROP TABLE IF EXISTS bench_raw_outbox`

	sqliteInsertNotification = `
INSERT INTO bench_raw_notifications (user_id, channel, recipient, subject, body, idempotency_key, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id`
	sqliteInsertOutbox = `
INSERT INTO bench_raw_outbox (event_type, payload, occurred_at, available_at)
VALUES (?, ?, ?, ?)`

	sqliteTimeLayout = "2006-01-02T15:04:05.000000Z"
)

// SQLiteTx measures bare create transactions per second on the SQLite file
// at path (a scratch file: the bench's own), with the store's connection
// settings: WAL, synchronous=NORMAL, BEGIN IMMEDIATE and one write
// connection that o.Clients goroutines share, as SQLite has one writer. The
// scratch tables are dropped afterwards.
func SQLiteTx(ctx context.Context, path string, o TxOptions) (float64, error) {
	if err := o.validate(); err != nil {
		return 0, err
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return 0, fmt.Errorf("raw tx: open sqlite: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if err := sqliteCreateScratch(ctx, db); err != nil {
		return 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_, _ = db.ExecContext(cctx, sqliteDropRaw)
	}()
	return bench.Ceiling(ctx, o.N, o.Clients, func(ctx context.Context, i int) error {
		return sqliteCreate(ctx, db, i)
	})
}

// scratchName renames herald's tables and indexes in a CREATE statement.
var scratchName = regexp.MustCompile(`^(CREATE (?:UNIQUE )?(?:TABLE|INDEX) )(\w+)|( ON )(notifications|outbox)\b`)

// sqliteCreateScratch creates the scratch tables from herald's own DDL.
func sqliteCreateScratch(ctx context.Context, db *sql.DB) error {
	rows, err := db.QueryContext(ctx, sqliteSchema)
	if err != nil {
		return fmt.Errorf("raw tx: read herald's schema: %w", err)
	}
	var ddl []string
	for rows.Next() {
		var stmt string
		if err := rows.Scan(&stmt); err != nil {
			rows.Close()
			return fmt.Errorf("raw tx: read herald's schema: %w", err)
		}
		ddl = append(ddl, scratchName.ReplaceAllString(stmt, "${1}${3}bench_raw_${2}${4}"))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("raw tx: read herald's schema: %w", err)
	}
	if len(ddl) == 0 {
		return errors.New("raw tx: the SQLite file has no herald schema: migrate it first")
	}
	for _, stmt := range ddl {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("raw tx: create scratch tables: %w", err)
		}
	}
	return nil
}

func sqliteCreate(ctx context.Context, db *sql.DB, i int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("raw tx: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }() // after a commit: nothing to undo
	r := request(i)
	now := time.Now().UTC().Format(sqliteTimeLayout)
	var id int64
	if err := tx.QueryRowContext(ctx, sqliteInsertNotification,
		r.UserID, r.Channel, r.To, r.Subject, r.Body, nil, now, now).Scan(&id); err != nil {
		return fmt.Errorf("raw tx: insert notification: %w", err)
	}
	r.NotificationID = fmt.Sprint(id)
	payload, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("raw tx: encode payload: %w", err)
	}
	if _, err := tx.ExecContext(ctx, sqliteInsertOutbox, "notification.requested", string(payload), now, now); err != nil {
		return fmt.Errorf("raw tx: insert outbox: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("raw tx: commit: %w", err)
	}
	return nil
}
