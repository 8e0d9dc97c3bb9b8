// Package postgres is the PostgreSQL store of the production shape: it keeps
// notifications, the outbox and the consumer's dedup table, and implements
// api.Store, relay.Source, relay.Waker, worker.Store and table.Queue on one
// *Store, with pgx and a connection pool.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strings"
	"sync"
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
// (a value given in the URL wins). The limits bound what one herald session
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
const keyedPlan = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true),
	set_config('enable_bitmapscan', 'off', true),
	set_config('enable_mergejoin', 'off', true),
	set_config('enable_material', 'off', true)`

// Store is the PostgreSQL store. It is safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool
	// listenConfig is the configuration of the listener's own connection.
	listenConfig *pgx.ConnConfig

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
		pcfg.ConnConfig.RuntimeParams["application_name"] = "herald"
	}
	for name, value := range sessionLimits {
		// A value given in the URL wins: an operator may know better.
		if _, ok := pcfg.ConnConfig.RuntimeParams[name]; !ok {
			pcfg.ConnConfig.RuntimeParams[name] = value
		}
	}
	listenConfig := pcfg.ConnConfig.Copy()
	listenConfig.RuntimeParams["application_name"] = listenerApplicationName
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	s := &Store{
		pool:         pool,
		listenConfig: listenConfig,
		notifyc:      make(chan struct{}, 1),
		statusEvents: !cfg.NoStatusEvents,
	}
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
