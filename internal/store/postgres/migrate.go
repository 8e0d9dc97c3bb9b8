package postgres

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/store/migrate"
)

// migrationFS holds the schema migrations, numbered NNNN_name.sql and applied
// in that order.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// MigrationsDigest is a hash of the migrations this build carries (their
// names and contents): two builds with the same digest make the same
// schema. Tests name the template databases they copy by it.
func MigrationsDigest() string {
	h := sha256.New()
	err := fs.WalkDir(migrationFS, "migrations", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := migrationFS.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		panic(fmt.Sprintf("read the embedded migrations: %v", err))
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// migrateLockKey is the pg_advisory_xact_lock key that serializes concurrent
// migrations ("herald" in ASCII).
const migrateLockKey = 0x68657261_6c64

const (
	lockMigrations = `SELECT pg_advisory_xact_lock($1)`

	// liftLimits lifts the session limits for the migration's transaction
	// only: DDL on a large table may run long, and waits for the locks of
	// running herald processes, longer than a delivery ever should.
	liftLimits = `SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = '5min'; SET LOCAL idle_in_transaction_session_timeout = 0`

	createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INT         PRIMARY KEY,
	name       TEXT        NOT NULL,
	applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`
	// upgradeMigrationsTable brings a schema_migrations made before it had
	// a name column to the shape SQLite's has; the rows recorded then keep
	// an empty name. On a current table it does nothing.
	upgradeMigrationsTable = `ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS name TEXT NOT NULL DEFAULT ''`

	selectMigration = `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)`
	insertMigration = `INSERT INTO schema_migrations (version, name) VALUES ($1, $2)`
)

// Migrate applies the migrations not yet recorded in schema_migrations, all
// in one transaction under an advisory lock: two herald migrate running at
// once apply each migration once, and a failure leaves the schema as it was.
// Running it again changes nothing. Once the outbox is partitioned
// (0014), it then makes the partitions of the days ahead (see
// EnsurePartitions), in a transaction of its own.
func (s *Store) Migrate(ctx context.Context) error {
	if err := migrate.Apply(ctx, migrator{s}, migrationFS, "migrations"); err != nil {
		return err
	}
	if err := s.EnsurePartitions(ctx); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// migrator is the store's side of a migration run.
type migrator struct{ s *Store }

func (m migrator) Begin(ctx context.Context) (migrate.Tx, error) {
	tx, err := m.s.begin(ctx)
	if err != nil {
		return nil, wrap("begin", err)
	}
	if _, err := tx.Exec(ctx, liftLimits); err != nil {
		rollback(tx)
		return nil, wrap("lift session limits", err)
	}
	if _, err := tx.Exec(ctx, lockMigrations, int64(migrateLockKey)); err != nil {
		rollback(tx)
		return nil, wrap("lock", err)
	}
	for _, ddl := range []string{createMigrationsTable, upgradeMigrationsTable} {
		if _, err := tx.Exec(ctx, ddl); err != nil {
			rollback(tx)
			return nil, wrap("prepare schema_migrations", err)
		}
	}
	return migrateTx{tx}, nil
}

type migrateTx struct{ tx pgx.Tx }

func (t migrateTx) Applied(ctx context.Context, version int) (bool, error) {
	var ok bool
	if err := t.tx.QueryRow(ctx, selectMigration, version).Scan(&ok); err != nil {
		return false, wrap("read schema_migrations", err)
	}
	return ok, nil
}

// Exec runs sql without arguments, so pgx uses the simple protocol, which
// runs every statement of the file.
func (t migrateTx) Exec(ctx context.Context, sql string) error {
	if _, err := t.tx.Exec(ctx, sql); err != nil {
		return wrap("exec", err)
	}
	return nil
}

func (t migrateTx) Record(ctx context.Context, m migrate.Migration) error {
	if _, err := t.tx.Exec(ctx, insertMigration, m.Version, m.Name); err != nil {
		return wrap("insert", err)
	}
	return nil
}

func (t migrateTx) Commit(ctx context.Context) error {
	if err := t.tx.Commit(ctx); err != nil {
		return wrap("commit", err)
	}
	return nil
}

func (t migrateTx) Rollback() { rollback(t.tx) }
