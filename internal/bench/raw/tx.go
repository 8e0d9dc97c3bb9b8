package raw

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// TxOptions shapes a raw transaction ceiling.
type TxOptions struct {
	// N is the number of transactions. Required.
	N int
	// Clients is the number of concurrent clients, each with a connection
	// of its own on PostgreSQL (SQLite has one writer). Required.
	Clients int
	// Notify adds the store's pg_notify to each PostgreSQL transaction, to
	// measure what waking the relays inside it would cost. Default false
	// (the bare transaction: two INSERTs and a COMMIT).
	Notify bool
}

func (o TxOptions) validate() error {
	if o.N < 1 || o.Clients < 1 || o.Clients > math.MaxInt32 {
		return fmt.Errorf("raw tx: n and clients must be at least 1, got %d and %d", o.N, o.Clients)
	}
	return nil
}

// scratchSchema holds the PostgreSQL raw ceiling's tables: herald's own,
// made by herald's own migrations, beside the bench's in the scratch
// database, so that the ceiling runs the store's statements unchanged and
// leaves herald's tables untouched.
const scratchSchema = "bench_raw"

// PostgresTx measures bare create transactions per second on the scratch
// database at dbURL (see ScratchPostgres): the store's create of a
// notification without an idempotency key, one statement that inserts the
// notification and its outbox event (postgres.CreateGroup, a group of one:
// the ceiling of creates that are not grouped), or, with the NOTIFY
// inside, BEGIN, the two INSERTs (postgres.CreateInTx), the NOTIFY and
// COMMIT, from o.Clients connections at once. It works in a schema of its own, migrated by the
// store and dropped afterwards.
func PostgresTx(ctx context.Context, dbURL string, o TxOptions) (float64, error) {
	if err := o.validate(); err != nil {
		return 0, err
	}
	pool, done, err := scratchPool(ctx, dbURL, o.Clients)
	if err != nil {
		return 0, fmt.Errorf("raw tx: %w", err)
	}
	defer done()
	return bench.Ceiling(ctx, o.N, o.Clients, func(ctx context.Context, i int) error {
		return pgCreate(ctx, pool, i, o.Notify)
	})
}

// scratchPool makes the raw ceilings' schema in the scratch database at
// dbURL (see ScratchPostgres), migrated by the store, and a pool of
// clients connections to it, opened before any clock starts; done closes
// the pool and drops the schema.
func scratchPool(ctx context.Context, dbURL string, clients int) (_ *pgxpool.Pool, done func(), err error) {
	if !IsScratch(dbURL) {
		return nil, nil, errors.New("refusing to write outside a herald_bench_ scratch database")
	}
	rawURL, drop, err := ScratchSchema(ctx, dbURL, scratchSchema)
	if err != nil {
		return nil, nil, err
	}
	// The scratch database is dropped anyway; dropping the schema only
	// keeps it tidy.
	defer func() {
		if err != nil {
			_ = drop()
		}
	}()
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, nil, fmt.Errorf("parse database url: %w", err)
	}
	cfg.MaxConns, cfg.MinConns = int32(clients), int32(clients)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("open pool: %w", err)
	}
	if err = migratePostgres(ctx, rawURL); err == nil {
		err = warm(ctx, pool, clients)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); _ = drop() }, nil
}

// scratchSQLite opens and migrates the raw ceilings' scratch file beside
// path; done closes it and removes the file.
func scratchSQLite(ctx context.Context, path string) (_ *sqlite.Store, done func() error, err error) {
	scratch, remove := ScratchFile(path, scratchSchema)
	s, err := sqlite.Open(ctx, scratch, sqlite.Config{})
	if err != nil {
		return nil, nil, err
	}
	done = func() error { return errors.Join(s.Close(), remove()) }
	if err := s.Migrate(ctx); err != nil {
		return nil, nil, errors.Join(fmt.Errorf("migrate the scratch file: %w", err), done())
	}
	return s, done, nil
}

// onScratchSQLite runs measure on the raw ceilings' scratch file beside
// path (see scratchSQLite), and closes and removes the file afterwards;
// what ("raw insert", "raw tx") prefixes the errors of opening, migrating
// and removing it.
func onScratchSQLite(ctx context.Context, path, what string, measure func(s *sqlite.Store) (float64, error)) (_ float64, err error) {
	s, done, err := scratchSQLite(ctx, path)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		if derr := done(); derr != nil {
			err = errors.Join(err, fmt.Errorf("%s: %w", what, derr))
		}
	}()
	return measure(s)
}

// migratePostgres gives the scratch schema herald's tables and indexes.
func migratePostgres(ctx context.Context, rawURL string) error {
	s, err := postgres.Open(ctx, rawURL, postgres.Config{MaxConns: 1})
	if err != nil {
		return fmt.Errorf("raw tx: %w", err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		return fmt.Errorf("raw tx: migrate the scratch schema: %w", err)
	}
	return nil
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

func pgCreate(ctx context.Context, pool *pgxpool.Pool, i int, withNotify bool) error {
	if !withNotify {
		if _, err := postgres.CreateGroup(ctx, pool, []notify.NewNotification{newNotification(i)}); err != nil {
			return fmt.Errorf("raw tx: %w", err)
		}
		return nil
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("raw tx: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after a commit: nothing to undo
	if _, err := postgres.CreateInTx(ctx, tx, newNotification(i)); err != nil {
		return fmt.Errorf("raw tx: %w", err)
	}
	if withNotify {
		if err := postgres.NotifyInTx(ctx, tx); err != nil {
			return fmt.Errorf("raw tx: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("raw tx: commit: %w", err)
	}
	return nil
}

// SQLiteTx measures bare create transactions per second on a scratch SQLite
// file beside path (the bench's own file, which it leaves untouched), from
// o.Clients goroutines at once. It runs the store itself: SQLite is in
// process, so the store's write connection (WAL, synchronous=NORMAL, BEGIN
// IMMEDIATE, one writer) is the connection a bare transaction would use, and
// with no subscriber its Create is the bare transaction: the two INSERTs
// and a COMMIT. The scratch file is removed afterwards.
func SQLiteTx(ctx context.Context, path string, o TxOptions) (float64, error) {
	if err := o.validate(); err != nil {
		return 0, err
	}
	return onScratchSQLite(ctx, path, "raw tx", func(s *sqlite.Store) (float64, error) {
		return bench.Ceiling(ctx, o.N, o.Clients, func(ctx context.Context, i int) error {
			_, err := s.Create(ctx, newNotification(i))
			return err
		})
	})
}
