// Package postgres is the PostgreSQL store of the production shape: it keeps
// notifications, the outbox and the consumer's dedup table, and implements
// api.Notifications, relay.Outbox, relay.Waker, worker.Bookkeeper and table.Queue on one
// *Store, with pgx and a connection pool.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/wake"
)

// Config tunes a Store.
type Config struct {
	// MaxConns is the largest number of pooled connections. The listener
	// behind Subscribe uses one more connection of its own. Default 10.
	MaxConns int
	// TracerProvider, when set, traces the pool's queries and batches
	// that run inside a traced operation (a span in their context: the
	// create's transaction, for one), through pgx's tracer hook. Queries
	// of the background loops, with no span, make none. Default: nil.
	TracerProvider trace.TracerProvider
	// DirectURL, when set, is a URL of the same database that reaches
	// PostgreSQL itself rather than a pooler in transaction mode. It
	// serves what needs a session of its own, which such a pooler cannot
	// give: the listener's LISTEN (wake-ups from other processes' creates)
	// and the connection that detaches and drops old outbox partitions
	// under a session advisory lock. Without it, behind such a pooler,
	// subscribers are woken only by this process's own creates (relays
	// and table workers poll for the rest) and old partitions are kept.
	// Default: none.
	DirectURL string
	// NoStatusEvents, when true, makes a record that settles a
	// notification write no status event (notification.sent or
	// notification.failed) and wake no relay for one: for a deployment
	// where nobody receives them. Default false: written.
	NoStatusEvents bool
}

func (c Config) withDefaults() Config {
	if c.MaxConns == 0 {
		c.MaxConns = 10
	}
	return c
}

func (c Config) validate() error {
	if c.MaxConns < 1 || c.MaxConns > math.MaxInt32 {
		return fmt.Errorf("postgres max conns must be between 1 and %d, got %d", math.MaxInt32, c.MaxConns)
	}
	return nil
}

// sessionLimits are the settings every connection of the pool starts with
// when it reaches PostgreSQL itself (a value given in the URL wins). Behind
// a pooler in transaction mode (see detectPooler) no connection starts
// with them: a server session serves many clients in turn, and PgBouncer
// refuses a startup packet that carries any of them ("unsupported startup
// parameter"). Each transaction then sets the three limits for itself
// (pooledBegin, pooledBatch), and plan_cache_mode is left out, as
// explained below. The limits bound what one herald session
// can hold, so that a peer gone half-open (a process frozen or cut off
// mid-transaction) cannot keep a row locked for minutes, and no statement
// waits without end. herald's
// transactions are short (no transaction is open across a send), so the
// limits are far above what they need:
//   - lock_timeout: a claim, record or create waits at most this long for
//     a row lock, then fails and is retried by its caller.
//   - statement_timeout: every statement; prune deletes in bounded batches
//     and stays far below it. Migrate lifts both for its own transaction
//     (see migrator.Begin): DDL on a large table may legitimately take
//     longer.
//   - idle_in_transaction_session_timeout: the server ends a session that
//     sits in an open transaction doing nothing for this long. It must
//     exceed the longest wait inside a transaction: the relay's publish of
//     a batch (broker dial and confirms) while it holds the claimed outbox
//     rows.
//
// plan_cache_mode: pgx prepares every statement once per connection and
// PostgreSQL, after five executions, may settle a prepared statement on a
// generic plan that it keeps until the next ANALYZE of a table it reads. A
// generic plan made while the database was young (tables of a few rows,
// where a sequential scan is cheapest) then scans whole tables for every
// batch once they have grown: delivery slowed with the database's own
// history (issue 24). force_custom_plan plans each execution with its
// values (how many ids the batch holds) and the tables' current size on
// disk, scaled by the last statistics (at least ten pages when there are
// none), so a per-key index lookup is chosen whenever a table is more than a
// few pages, however stale its statistics. The statements are short; the
// planning costs far less than one scan of a grown table.
//
// The delivery bookkeeping is the exception (keyedPlan): its statements
// are written so that a generic plan is a lookup by key on any statistics,
// and run on plans made once, whatever plan_cache_mode the session has.
//
// Behind a pooler the statements are not prepared per connection (pgx's
// cache_describe mode: each execution parses its statement again as the
// unnamed statement), and PostgreSQL plans an unnamed statement once, with
// the values of its execution: a custom plan every time, which is what
// force_custom_plan asks for on the direct path; so the setting is not
// needed there.
var sessionLimits = map[string]string{
	"lock_timeout":                        "10s",
	"statement_timeout":                   "30s",
	"idle_in_transaction_session_timeout": "60s",
	"plan_cache_mode":                     "force_custom_plan",
}

// keyedPlan goes first in the delivery bookkeeping's batch (ClaimAndRecord,
// deliver.go) and makes its statements run on generic plans, made once per
// connection and statement and reused, made without sequential or bitmap
// scans, merge joins or materialized inner sides. It is safe only for
// statements written so that every table they read has one reasonable
// access path, a lookup by key (deliver.go, "Plans"); planning those afresh
// for each execution cost more than executing them. Hash joins stay on:
// such statements join a table only on a condition that no hash join can
// use (a LATERAL reference, key = ANY(array)), so a hash join can only join
// CTEs to each other.
// The settings are local to the batch's implicit transaction: the pool's
// other statements keep the session's (sessionLimits).
//
// Behind a pooler (no statement prepared per connection, see
// sessionLimits) the same settings still give these statements the same
// plan shape, lookups by key, but the generic plan is made again at each
// execution of the unnamed statement instead of once per connection: the
// planning that a named statement saves is paid on each batch.
const keyedPlan = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true),
	set_config('enable_bitmapscan', 'off', true),
	set_config('enable_mergejoin', 'off', true),
	set_config('enable_material', 'off', true)`

// pooledLimits are the lock, statement and idle-in-transaction limits of
// sessionLimits, which a transaction behind a pooler sets for itself.
var pooledLimits = [...]string{"lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout"}

// pooledBegin begins a transaction behind a pooler: BEGIN and SET LOCAL of
// each limit, sent as one simple query, so in the round trip BEGIN takes
// alone.
var pooledBegin = func() string {
	q := "BEGIN"
	for _, name := range pooledLimits {
		q += "; SET LOCAL " + name + " = '" + sessionLimits[name] + "'"
	}
	return q
}()

// pooledBatch goes first in a batch (an implicit transaction) behind a
// pooler and sets its lock and statement limits; a batch is sent whole,
// so it never sits idle in its transaction.
var pooledBatch = "SELECT set_config('lock_timeout', '" + sessionLimits["lock_timeout"] + "', true), " +
	"set_config('statement_timeout', '" + sessionLimits["statement_timeout"] + "', true)"

// Store is the PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// listenConfig is the configuration of the listener's own connection:
	// the pool's, or DirectURL's when set.
	listenConfig *pgx.ConnConfig
	// directConfig is DirectURL's configuration; nil when unset.
	directConfig *pgx.ConnConfig
	// probeConfig is the URL's configuration without herald's session
	// settings: what detectPooler connects with.
	probeConfig *pgx.ConnConfig
	// pooler is what detectPooler found: poolerUnknown until a probe
	// succeeds, then poolerNone or poolerTransaction for the Store's life.
	pooler  atomic.Int32
	probeMu sync.Mutex

	// hub wakes this process's subscribers; its first subscriber starts
	// the listener and its last one stops it (see Subscribe).
	hub *wake.Hub
	// stopListen stops the running listener; nil when none runs. Only the
	// hub's OnFirst and OnLast, which run under its lock, touch it.
	stopListen context.CancelFunc
	// life ends when Close is called: its Done stops the notifier and the
	// committers, and it cancels a create group in flight.
	life context.Context
	end  context.CancelFunc
	// notifyc asks the notifier goroutine for one NOTIFY (see announce).
	notifyc   chan struct{}
	wg        sync.WaitGroup // listener and notifier goroutines
	closeOnce sync.Once
	// creates queues creates without an idempotency key for the
	// committers (groupcreate.go).
	creates chan createReq
	// statusEvents is !Config.NoStatusEvents: whether a settling record
	// writes its status event.
	statusEvents bool
}

// Open returns a Store on the database at url (postgres://...). It connects
// lazily, so that a process can start while the database is still down and
// report it through Ping; call Migrate before first use of a new database.
func Open(ctx context.Context, url string, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse errors never repeat the password.
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	pcfg.MaxConns = int32(cfg.MaxConns)
	if cfg.TracerProvider != nil {
		pcfg.ConnConfig.Tracer = newQueryTracer(cfg.TracerProvider)
	}
	if _, ok := pcfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		// PgBouncer passes application_name on (it tracks it per client).
		pcfg.ConnConfig.RuntimeParams["application_name"] = "herald"
	}
	s := &Store{
		notifyc:      make(chan struct{}, 1),
		statusEvents: !cfg.NoStatusEvents,
		probeConfig:  pcfg.ConnConfig.Copy(),
	}
	s.probeConfig.Tracer = nil
	s.listenConfig = pcfg.ConnConfig.Copy()
	if cfg.DirectURL != "" {
		dcfg, err := pgx.ParseConfig(cfg.DirectURL)
		if err != nil {
			return nil, fmt.Errorf("parse postgres direct url: %w", err)
		}
		if _, ok := dcfg.RuntimeParams["application_name"]; !ok {
			dcfg.RuntimeParams["application_name"] = "herald"
		}
		s.directConfig = dcfg
		s.listenConfig = dcfg.Copy()
	}
	s.listenConfig.Tracer = nil
	s.listenConfig.RuntimeParams["application_name"] = listenerApplicationName
	// A mode the URL asks for (default_query_exec_mode) is kept behind a
	// pooler too: cache_statement for a PgBouncer 1.21+ that tracks
	// prepared statements (max_prepared_statements), for one.
	urlMode := strings.Contains(url, "default_query_exec_mode")
	pcfg.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		pooled, err := s.detectPooler(ctx)
		if err != nil {
			return err
		}
		if pooled {
			// No statement prepared per connection: a transaction's
			// statements may each meet another server session, and
			// PgBouncer 1.18 (Debian 12's) does not carry prepared
			// statements across them. cache_describe keeps one round
			// trip per statement: pgx remembers each statement's
			// parameter and result types per client connection, and
			// sends the statement text with every execution.
			if !urlMode {
				cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
			}
			return nil
		}
		for name, value := range sessionLimits {
			// A value given in the URL wins: an operator may know better.
			if _, ok := cc.RuntimeParams[name]; !ok {
				cc.RuntimeParams[name] = value
			}
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	s.pool = pool
	s.life, s.end = context.WithCancel(context.Background())
	s.hub = &wake.Hub{OnFirst: s.startListener, OnLast: s.stopListener}
	s.wg.Add(1)
	go s.notifier()
	s.startCommitters()
	return s, nil
}

// Close closes every subscriber's channel, stops the listener and closes
// the pool, waiting for queries in progress. Calling it again does nothing.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.hub.Close()
		s.end()
		s.wg.Wait()
		s.pool.Close()
	})
}

// What detectPooler found.
const (
	poolerUnknown int32 = iota
	poolerNone
	poolerTransaction
)

// selectBackendPID names the server process serving the statement.
const selectBackendPID = `SELECT pg_backend_pid()`

// detectPooler reports whether the URL leads to a pooler rather than to
// PostgreSQL itself. It connects once, with no session setting in the
// startup packet, and compares the process id of the backend key the
// server gave at connect with the process that runs a statement: they are
// the same process when PostgreSQL answered, and differ behind a pooler,
// which hands each client a key of its own (PgBouncer, in any pool mode)
// because the client's session is served by whichever server session is
// free. A pooler in session mode is taken for one in transaction mode:
// what works through the latter works through the former. The answer is
// kept for the Store's life; until a probe succeeds each caller probes.
func (s *Store) detectPooler(ctx context.Context) (bool, error) {
	if p := s.pooler.Load(); p != poolerUnknown {
		return p == poolerTransaction, nil
	}
	s.probeMu.Lock()
	defer s.probeMu.Unlock()
	if p := s.pooler.Load(); p != poolerUnknown {
		return p == poolerTransaction, nil
	}
	conn, err := pgx.ConnectConfig(ctx, s.probeConfig.Copy())
	if err != nil {
		return false, err
	}
	defer closeListener(conn)
	// The simple protocol: nothing prepared, whatever the URL's mode.
	res, err := conn.PgConn().Exec(ctx, selectBackendPID).ReadAll()
	if err != nil {
		return false, err
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return false, fmt.Errorf("detect a pooler: unexpected answer to %s", selectBackendPID)
	}
	pid, err := strconv.ParseUint(string(res[0].Rows[0][0]), 10, 32)
	if err != nil {
		return false, fmt.Errorf("detect a pooler: %w", err)
	}
	pooled := uint32(pid) != conn.PgConn().PID()
	if pooled {
		s.pooler.Store(poolerTransaction)
	} else {
		s.pooler.Store(poolerNone)
	}
	return pooled, nil
}

// Pooled reports whether the store reaches PostgreSQL through a pooler
// (see detectPooler), probing when no connection has told yet.
func (s *Store) Pooled(ctx context.Context) (bool, error) {
	pooled, err := s.detectPooler(ctx)
	if err != nil {
		return false, wrap("detect a pooler", err)
	}
	return pooled, nil
}

// begin begins a transaction of the pool with herald's limits: the
// session's on the direct path, its own SET LOCAL behind a pooler.
func (s *Store) begin(ctx context.Context) (pgx.Tx, error) {
	pooled, err := s.detectPooler(ctx)
	if err != nil {
		return nil, err
	}
	if pooled {
		return s.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: pooledBegin})
	}
	return s.pool.Begin(ctx)
}

// sendBatch sends b on the pool. Behind a pooler the batch first sets its
// own limits (pooledBatch), whose result sendBatch reads, so the caller
// reads its own results as on the direct path; a failure there is what
// every read of the caller's reports.
func (s *Store) sendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if pooled, err := s.detectPooler(ctx); err != nil || !pooled {
		// When the probe failed, the pool's connect fails the same way
		// (it probes too) and the batch reports it.
		return s.pool.SendBatch(ctx, b)
	}
	b.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: pooledBatch}}, b.QueuedQueries...)
	br := s.pool.SendBatch(ctx, b)
	_, _ = br.Exec()
	return br
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return wrap("ping postgres", err)
	}
	return nil
}

// wrap adds context to err and marks a failure to reach the database with
// notify.ErrUnavailable, so callers can tell an outage (retry later, answer
// 503) from an error that retrying cannot cure.
func wrap(op string, err error) error {
	if unavailable(err) {
		return fmt.Errorf("%s: %w: %w", op, notify.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func unavailable(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08 is a connection exception; 57P01-57P03 a server shutting
		// down or starting; 53300 no free connection slot.
		return strings.HasPrefix(pgErr.Code, "08") || pgErr.Code == "53300" ||
			pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03"
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		pgconn.SafeToRetry(err)
}

// rollback ends a transaction that did not commit. It runs even when the
// caller's context has ended, so the connection goes back to the pool clean
// instead of being discarded.
func rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx) // after a commit, or on a broken connection: nothing to undo
}
