// Package migrate is the one migration runner of every store engine. It
// loads the numbered NNNN_name.sql files an engine embeds and applies, in
// version order, those its database has not recorded in schema_migrations
// (version, name, applied_at), all in one transaction that no other migrator
// runs beside: two herald migrate at once apply each migration once, a
// failure leaves the schema as it was, and a second run changes nothing.
//
// Each engine keeps its own SQL dialect and its own migrations folder; it
// gives the runner an Engine: how to begin the locked transaction, and how
// to check, run and record a migration inside it.
package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one numbered schema change.
type Migration struct {
	// Version is the file's number, 1 for 0001_init.sql.
	Version int
	// Name is the file's name without number and extension, "init" for
	// 0001_init.sql; schema_migrations records it beside the version.
	Name string
	// SQL is the file's content, run as one batch of statements.
	SQL string
}

// String names the migration as its file does.
func (m Migration) String() string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }

// Load reads the migrations in dir of fsys, every *.sql file named
// NNNN_name.sql, and returns them in version order. A malformed name or a
// version used twice is a mistake made at build time, so it fails every
// Load rather than being skipped.
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	files, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, fmt.Errorf("list migrations: %w", err)
	}
	ms := make([]Migration, 0, len(files))
	seen := make(map[int]string, len(files))
	for _, f := range files {
		base := path.Base(f)
		num, name, ok := strings.Cut(strings.TrimSuffix(base, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v < 1 || name == "" || len(num) != 4 || strings.Trim(num, "0123456789") != "" {
			return nil, fmt.Errorf("migration %s: name must be NNNN_name.sql", base)
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", other, base, v)
		}
		seen[v] = base
		body, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", base, err)
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(body)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	return ms, nil
}

// Engine is one database's side of a run.
type Engine interface {
	// Begin starts the run's transaction, holding whatever lock keeps
	// other migrators out until it ends (PostgreSQL: an advisory
	// transaction lock; SQLite: the write lock), with schema_migrations
	// created, or brought to its current shape, inside it.
	Begin(ctx context.Context) (Tx, error)
}

// Tx is the run's transaction.
type Tx interface {
	// Applied reports whether schema_migrations records version.
	Applied(ctx context.Context, version int) (bool, error)
	// Exec runs a migration's statements.
	Exec(ctx context.Context, sql string) error
	// Record adds m to schema_migrations.
	Record(ctx context.Context, m Migration) error
	// Commit commits the run.
	Commit(ctx context.Context) error
	// Rollback ends the transaction if it did not commit; after a commit
	// it does nothing.
	Rollback()
}

// Apply loads the migrations in dir of fsys (see Load) and runs them on e
// (see Run): an engine's Migrate.
func Apply(ctx context.Context, e Engine, fsys fs.FS, dir string) error {
	ms, err := Load(fsys, dir)
	if err != nil {
		return err
	}
	return Run(ctx, e, ms)
}

// Run applies the migrations of ms that e's database has not recorded, in
// the order given (Load's), and records each in the same transaction.
func Run(ctx context.Context, e Engine, ms []Migration) error {
	tx, err := e.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback()
	for _, m := range ms {
		// The check is inside the locked transaction, so no other
		// migrator can apply m in between.
		done, err := tx.Applied(ctx, m.Version)
		if err != nil {
			return fmt.Errorf("migrate: check %s: %w", m, err)
		}
		if done {
			continue
		}
		if err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m, err)
		}
		if err := tx.Record(ctx, m); err != nil {
			return fmt.Errorf("migrate: record %s: %w", m, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}
