package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// migrationFS holds the schema migrations, numbered NNNN_name.sql and applied
// in that order.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// migrateLockKey is the pg_advisory_xact_lock key that serializes concurrent
// migrations ("herald" in ASCII).
const migrateLockKey = 0x68657261_6c64

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	var ms []migration
	seen := make(map[int]string)
	for _, f := range files {
		base := path.Base(f)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", base)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", other, base, v)
		}
		seen[v] = base
		b, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		ms = append(ms, migration{version: v, name: base, sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

const (
	createMigrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INT         PRIMARY KEY,
	applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
)`
	selectMigrations = `SELECT version FROM schema_migrations`
	insertMigration  = `INSERT INTO schema_migrations (version) VALUES ($1)`
)

// Migrate applies the migrations not yet recorded in schema_migrations, all
// in one transaction under an advisory lock: two herald migrate running at
// once apply each migration once, and a failure leaves the schema as it was.
// Running it again changes nothing.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return wrap("migrate: begin", err)
	}
	defer rollback(tx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLockKey)); err != nil {
		return wrap("migrate: lock", err)
	}
	if _, err := tx.Exec(ctx, createMigrationsTable); err != nil {
		return wrap("migrate: create schema_migrations", err)
	}
	rows, err := tx.Query(ctx, selectMigrations)
	if err != nil {
		return wrap("migrate: read schema_migrations", err)
	}
	applied := make(map[int]bool)
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return wrap("migrate: read schema_migrations", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return wrap("migrate: read schema_migrations", err)
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		// Without arguments pgx uses the simple protocol, which runs every
		// statement of the file.
		if _, err := tx.Exec(ctx, m.sql); err != nil {
			return wrap("migrate: apply "+m.name, err)
		}
		if _, err := tx.Exec(ctx, insertMigration, m.version); err != nil {
			return wrap("migrate: record "+m.name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return wrap("migrate: commit", err)
	}
	return nil
}
