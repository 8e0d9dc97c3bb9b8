package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/store/migrate"
)

// selectMigrations reads schema_migrations when it exists (to_regclass is
// NULL before the first migration, and nothing is created by asking).
const (
	migrationsTableExists = `SELECT to_regclass('schema_migrations') IS NOT NULL`
	selectMigrations      = `SELECT version, name, applied_at FROM schema_migrations ORDER BY version`
)

// MigrationStatus reports each migration this binary ships, and any the
// database records beyond them, as applied or pending. It changes nothing.
func (s *Store) MigrationStatus(ctx context.Context) ([]migrate.State, error) {
	return migrate.Report(ctx, migrationFS, "migrations", s.migrationRecords)
}

// migrationRecords reads schema_migrations, none before the first
// migration.
func (s *Store) migrationRecords(ctx context.Context) ([]migrate.Record, error) {
	var exists bool
	if err := s.pool.QueryRow(ctx, migrationsTableExists).Scan(&exists); err != nil {
		return nil, wrap("read schema_migrations", err)
	}
	var records []migrate.Record
	if exists {
		rows, err := s.pool.Query(ctx, selectMigrations)
		if err != nil {
			return nil, wrap("read schema_migrations", err)
		}
		records, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (migrate.Record, error) {
			var rec migrate.Record
			err := r.Scan(&rec.Version, &rec.Name, &rec.AppliedAt)
			return rec, err
		})
		if err != nil {
			return nil, wrap("read schema_migrations", err)
		}
	}
	return records, nil
}
