package migrate

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"
)

// Record is one row of schema_migrations.
type Record struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// State is one migration as a database stands: shipped with this binary or
// only recorded (a newer binary migrated the database), applied or pending.
type State struct {
	Migration
	// Applied is true when schema_migrations records the version.
	Applied bool
	// AppliedAt is when it was applied (zero when pending).
	AppliedAt time.Time
	// Unknown is true for a version the database records but this binary
	// does not ship: a newer herald migrated it.
	Unknown bool
}

// Status pairs the shipped migrations ms with the records of a database, in
// version order.
func Status(ms []Migration, records []Record) []State {
	byVersion := make(map[int]Record, len(records))
	for _, r := range records {
		byVersion[r.Version] = r
	}
	out := make([]State, 0, len(ms)+len(records))
	shipped := make(map[int]bool, len(ms))
	for _, m := range ms {
		shipped[m.Version] = true
		r, ok := byVersion[m.Version]
		out = append(out, State{Migration: m, Applied: ok, AppliedAt: r.AppliedAt})
	}
	for _, r := range records {
		if !shipped[r.Version] {
			out = append(out, State{Migration: Migration{Version: r.Version, Name: r.Name}, Applied: true, AppliedAt: r.AppliedAt, Unknown: true})
		}
	}
	return out
}

// Report loads the migrations in dir of fsys (see Load) and pairs them with
// the records that records reads (see Status): an engine's
// MigrationStatus, as Apply is its Migrate. records reads the database's
// schema_migrations, none before the first migration, and changes
// nothing; its error is returned as it is, for the engine to have wrapped.
func Report(ctx context.Context, fsys fs.FS, dir string, records func(context.Context) ([]Record, error)) ([]State, error) {
	ms, err := Load(fsys, dir)
	if err != nil {
		return nil, err
	}
	rs, err := records(ctx)
	if err != nil {
		return nil, err
	}
	return Status(ms, rs), nil
}

// ErrNotMigrated is returned by Check for a database that lacks migrations
// this binary ships.
var ErrNotMigrated = errors.New("database not migrated: run `herald migrate`")

// Check returns ErrNotMigrated, naming the pending migrations, unless every
// shipped migration is applied.
func Check(states []State) error {
	var pending []string
	for _, s := range states {
		if !s.Applied {
			pending = append(pending, s.String())
		}
	}
	if len(pending) == 0 {
		return nil
	}
	return fmt.Errorf("%w (pending: %s)", ErrNotMigrated, strings.Join(pending, ", "))
}
