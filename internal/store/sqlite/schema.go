package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/heraldhq/herald/internal/store/migrate"
)

const (
	migrationsTableExists = `SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations')`
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
	if err := s.read.QueryRowContext(ctx, migrationsTableExists).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read schema_migrations: %w", classify(err))
	}
	var records []migrate.Record
	if exists {
		rows, err := s.read.QueryContext(ctx, selectMigrations)
		if err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", classify(err))
		}
		records, err = collect(rows, func(r *sql.Rows) (migrate.Record, error) {
			var (
				rec migrate.Record
				at  string
			)
			err := r.Scan(&rec.Version, &rec.Name, &at)
			if err == nil {
				rec.AppliedAt, err = parseTime(at)
			}
			return rec, err
		})
		if err != nil {
			return nil, fmt.Errorf("read schema_migrations: %w", classify(err))
		}
	}
	return records, nil
}
