// Package sqlite is herald's embedded store: notifications, the outbox and
// the consumer's deduplication table in one SQLite file, through the pure Go
// driver modernc.org/sqlite (no cgo).
//
// SQLite allows one writer at a time, so the store has exactly one write
// connection, whose transactions start with BEGIN IMMEDIATE: a transaction
// takes the write lock before it reads, so it never has to upgrade a read
// lock (which can fail with SQLITE_BUSY without waiting) and every
// read-then-write inside it sees the state it will change. Reads (Get,
// OutboxStats, Ping) use a separate pool and, thanks to WAL, never wait for
// the writer. Several processes may open the same file (herald api beside
// herald worker); they queue for the write lock for up to the busy timeout.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"strings"
	"sync"
	"time"

	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/wake"
)

// Config tunes a Store.
type Config struct {
	// BusyTimeout is how long a connection waits for a lock held by another
	// connection (another process on the same file) before failing with
	// SQLITE_BUSY. Default 5s.
	BusyTimeout time.Duration
	// ReadConns is the size of the read pool. Default 4.
	ReadConns int
	// Synchronous is SQLite's synchronous pragma for the commits of
	// creates: "FULL" (the default) fsyncs the write-ahead log at every
	// such commit, so a 201 survives a power loss (guarantee 1); "NORMAL"
	// fsyncs only at checkpoints and may lose the last commits on a power
	// loss or kernel crash (never on a process crash). Every other write
	// commits with NORMAL (see beginDurable).
	Synchronous string
	// NoStatusEvents, when true, makes a record that settles a
	// notification write no status event (notification.sent or
	// notification.failed) and wake no relay for one: for a deployment
	// where nobody receives them. Default false: written.
	NoStatusEvents bool
}

func (c Config) withDefaults() Config {
	if c.BusyTimeout == 0 {
		c.BusyTimeout = 5 * time.Second
	}
	if c.ReadConns == 0 {
		c.ReadConns = 4
	}
	if c.Synchronous == "" {
		c.Synchronous = "FULL"
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.BusyTimeout < time.Millisecond:
		return fmt.Errorf("sqlite busy timeout must be at least 1ms, got %s", c.BusyTimeout)
	case c.ReadConns < 1:
		return fmt.Errorf("sqlite read connections must be at least 1, got %d", c.ReadConns)
	case c.Synchronous != "FULL" && c.Synchronous != "NORMAL":
		return fmt.Errorf("sqlite synchronous must be FULL or NORMAL, got %q", c.Synchronous)
	}
	return nil
}

// Store is a herald store on one SQLite file. It is safe for concurrent use.
type Store struct {
	write *sql.DB // one connection: SQLite has one writer
	read  *sql.DB

	// hub wakes this process's subscribers after each commit that adds
	// outbox rows.
	hub wake.Hub

	// stmts are the delivery bookkeeping's statements, prepared once on
	// the write connection (see prepared): parsing them for every claim
	// and record cost a fifth of the worker's CPU.
	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt

	// creates carries concurrent creates to the one goroutine that commits
	// them in groups (see groupcommit.go); closed and stopped by Close.
	creates chan createReq
	closing chan struct{}
	// batchSlot lets one batch of creates at a time wait for the write
	// connection (see createBatch).
	batchSlot chan struct{}
	closeOnce sync.Once
	// synchronous is Config.Synchronous, for beginDurable.
	synchronous string
	// statusEvents is !Config.NoStatusEvents: whether a settling record
	// writes its status event.
	statusEvents bool
	committer    sync.WaitGroup
}

// prepared returns the statements for queries, prepared on the write
// connection. It must be called outside a write transaction (preparing
// needs the connection). SQLite re-prepares a statement by itself after a
// schema change.
func (s *Store) prepared(ctx context.Context, queries ...string) (map[string]*sql.Stmt, error) {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	// The map handed out is never written again: a new one replaces it
	// when a statement is added, so callers read theirs without the lock.
	var next map[string]*sql.Stmt
	for _, q := range queries {
		if _, ok := s.stmts[q]; ok {
			continue
		}
		st, err := s.write.PrepareContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("prepare: %w", classify(err))
		}
		if next == nil {
			next = maps.Clone(s.stmts)
			if next == nil {
				next = map[string]*sql.Stmt{}
			}
		}
		next[q] = st
	}
	if next != nil {
		s.stmts = next
	}
	return s.stmts, nil
}

// Open opens (creating if needed) the SQLite database at path and checks that
// it can be read and written. It does not create the schema: call Migrate.
func Open(ctx context.Context, path string, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch {
	case path == "":
		return nil, errors.New("open sqlite: empty path")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		// The read pool and the write connection must see the same
		// database: a private in-memory database would be one per
		// connection, and a URI would be parsed differently by the
		// driver. herald's store is a file.
		return nil, fmt.Errorf("open sqlite: %q is not a file path", path)
	case strings.ContainsRune(path, '?'):
		// The driver splits the name at '?' to find its parameters.
		return nil, fmt.Errorf("open sqlite: path %q must not contain '?'", path)
	}

	write, err := sql.Open("sqlite", dsn(path, cfg, false))
	if err != nil {
		return nil, fmt.Errorf("open sqlite write connection: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxIdleTime(0)
	write.SetConnMaxLifetime(0)
	// The write connection connects first: switching a new file to WAL
	// needs the exclusive lock, which read connections would not get.
	if err := write.PingContext(ctx); err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, classify(err))
	}

	read, err := sql.Open("sqlite", dsn(path, cfg, true))
	if err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("open sqlite read pool: %w", err)
	}
	read.SetMaxOpenConns(cfg.ReadConns)
	read.SetMaxIdleConns(cfg.ReadConns)
	if err := read.PingContext(ctx); err != nil {
		_ = read.Close()
		_ = write.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, classify(err))
	}
	st := &Store{write: write, read: read, creates: make(chan createReq), closing: make(chan struct{}), batchSlot: make(chan struct{}, 1), synchronous: cfg.Synchronous,
		statusEvents: !cfg.NoStatusEvents}
	st.committer.Add(1)
	go st.commitCreates()
	return st, nil
}

// dsn builds the driver's name for path. The settings are _pragma
// parameters because the driver applies them to every new connection,
// including the ones database/sql opens later on its own.
//
//   - journal_mode=WAL: readers do not block the writer nor the writer
//     readers, and a commit is one append to the log.
//   - synchronous=NORMAL: a commit survives a crash of the process; the
//     log is fsynced at checkpoints. The commits of creates raise it to
//     Config.Synchronous (FULL by default: a 201 survives a power loss or
//     kernel crash, guarantee 1); see beginDurable.
//   - busy_timeout: wait for another process's write lock instead of
//     failing at once.
//   - foreign_keys: honour any REFERENCES a later migration adds.
//   - _txlock=immediate: BEGIN IMMEDIATE for every write transaction (see
//     the package doc).
//   - query_only on the read pool: a read connection can never write, so
//     the one-writer rule cannot be broken by mistake.
func dsn(path string, cfg Config, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", cfg.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "foreign_keys(ON)")
	if readOnly {
		q.Add("_pragma", "query_only(ON)")
	} else {
		q.Set("_txlock", "immediate")
	}
	return path + "?" + q.Encode()
}

// Close closes the database. Subscriptions end with their contexts, not
// here.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { close(s.closing) })
	s.committer.Wait()
	s.stmtMu.Lock()
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	s.stmts = nil
	s.stmtMu.Unlock()
	return errors.Join(append(errs, s.read.Close(), s.write.Close())...)
}

// Ping checks that the database file can be read. A failure wraps
// notify.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	// database/sql's own ping may answer from an idle connection without
	// touching the file; a query on the schema reads it.
	var n int
	if err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
		return fmt.Errorf("ping sqlite: %w: %w", notify.ErrUnavailable, err)
	}
	return nil
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE) and commits when fn
// returns nil; otherwise it rolls back and returns fn's error untouched.
func (s *Store) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", classify(err))
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", classify(err))
	}
	return nil
}

// classify marks errors that mean the database cannot be used right now
// (locked beyond the busy timeout, I/O failure, disk full, file gone) with
// notify.ErrUnavailable, so that callers answer "try later" rather than
// "broken".
func classify(err error) error {
	var e *sqlitedriver.Error
	if !errors.As(err, &e) {
		return err
	}
	switch e.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR,
		sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_FULL:
		return fmt.Errorf("%w: %w", notify.ErrUnavailable, err)
	}
	return err
}

// collect reads every row of rows with scan, closes rows, and returns the
// values read, nil when there is none. It returns the first error, scan's
// or the rows', as it is: the caller wraps it.
func collect[T any](rows *sql.Rows, scan func(*sql.Rows) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// timeLayout is how every timestamp is stored: UTC, fixed width, microsecond
// precision (as PostgreSQL's timestamptz). Fixed width makes SQL text
// comparison (<, MIN, ORDER BY) agree with time order, and the text stays
// readable in the sqlite3 shell, which integer microseconds would not.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// now is the store's clock, at the precision it stores, so that a value
// returned from a write equals the value read back later.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("parse stored time %q: %w", s, err)
	}
	return t, nil
}

// nullString stores "" as NULL, for optional text columns.
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }
