package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/heraldhq/herald/internal/store/migrate"
)

// migrationFS holds the schema migrations, numbered NNNN_name.sql and applied
// in that order.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

const (
	createMigrationsTable = `
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at TEXT    NOT NULL
) STRICT`

	selectMigration = `SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?)`
	insertMigration = `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`
)

// Migrate applies the embedded migrations not yet recorded in
// schema_migrations, all in one write transaction together with their
// records, so that a failure leaves the schema as it was. Running it again
// changes nothing; two processes running it at once queue on the write lock
// and the second finds the work done.
func (s *Store) Migrate(ctx context.Context) error {
	return migrate.Apply(ctx, migrator{s}, migrationFS, "migrations")
}

// migrator is the store's side of a migration run.
type migrator struct{ s *Store }

// Begin starts a write transaction: BEGIN IMMEDIATE takes the write lock
// before the first read, so that what Applied sees stays true until commit.
func (m migrator) Begin(ctx context.Context) (migrate.Tx, error) {
	tx, err := m.s.write.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", classify(err))
	}
	if _, err := tx.ExecContext(ctx, createMigrationsTable); err != nil {
		_ = tx.Rollback()
		return nil, fmt.Errorf("create schema_migrations: %w", classify(err))
	}
	return migrateTx{tx}, nil
}

type migrateTx struct{ tx *sql.Tx }

func (t migrateTx) Applied(ctx context.Context, version int) (bool, error) {
	var ok bool
	if err := t.tx.QueryRowContext(ctx, selectMigration, version).Scan(&ok); err != nil {
		return false, fmt.Errorf("read schema_migrations: %w", classify(err))
	}
	return ok, nil
}

func (t migrateTx) Exec(ctx context.Context, sql string) error {
	if _, err := t.tx.ExecContext(ctx, sql); err != nil {
		return classify(err)
	}
	return nil
}

func (t migrateTx) Record(ctx context.Context, m migrate.Migration) error {
	if _, err := t.tx.ExecContext(ctx, insertMigration, m.Version, m.Name, formatTime(now())); err != nil {
		return classify(err)
	}
	return nil
}

func (t migrateTx) Commit(context.Context) error {
	if err := t.tx.Commit(); err != nil {
		return classify(err)
	}
	return nil
}

// Rollback after a commit returns sql.ErrTxDone, which means nothing here.
func (t migrateTx) Rollback() { _ = t.tx.Rollback() }
