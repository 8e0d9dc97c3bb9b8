package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/store/migrate"
	"github.com/heraldhq/herald/internal/store/mongo"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// The store: which engine HERALD_DATABASE_URL names, opened, migrated or
// checked, and its size of pool (see build.go).

// storeOptions is what a process asks of the store it opens, beside the
// URL: see openStore.
type storeOptions struct {
	direct       string // HERALD_DATABASE_DIRECT_URL
	conns        int    // the pool's size, 0 for the engine's default
	create       bool   // whether the database may be created (a SQLite file)
	tp           trace.TracerProvider
	statusEvents bool
}

// storeEngine is one row of the store table: the URL schemes that pick the
// engine and its constructor. A new store engine is its package plus one
// row here (and its settings rows, if it has any).
type storeEngine struct {
	// name is the engine as reports, bench and the tests name it.
	name string
	// title is the engine as a person reads it: "PostgreSQL".
	title string
	// schemes are the prefixes of HERALD_DATABASE_URL that pick it.
	schemes []string
	// file is whether the database is a local file (the URL's path) rather
	// than a server: SQLite.
	file bool
	// direct is whether HERALD_DATABASE_DIRECT_URL applies (a store behind
	// a pooler).
	direct bool
	open   func(ctx context.Context, url string, o storeOptions) (store, func(), error)
	// bench is herald bench's hook: its scratch database and raw ceilings
	// (store_bench.go).
	bench *storeBench
}

// stores is the store choice: the first row whose scheme starts
// HERALD_DATABASE_URL opens the store.
var stores = []storeEngine{
	{name: "postgres", title: "PostgreSQL", schemes: []string{"postgres://", "postgresql://"}, direct: true, open: openPostgres, bench: postgresBench},
	{name: "sqlite", title: "SQLite", schemes: []string{"sqlite:"}, file: true, open: openSQLite, bench: sqliteBench},
	{name: "mongodb", title: "MongoDB", schemes: []string{"mongodb://", "mongodb+srv://"}, open: openMongo, bench: mongoBench},
}

// storeFor finds the row of a HERALD_DATABASE_URL.
func storeFor(url string) (storeEngine, bool) {
	for _, e := range stores {
		for _, s := range e.schemes {
			if strings.HasPrefix(url, s) {
				return e, true
			}
		}
	}
	return storeEngine{}, false
}

// unknownStore is the error of a HERALD_DATABASE_URL no row takes.
func unknownStore(url string) error {
	var schemes []string
	for _, e := range stores {
		schemes = append(schemes, e.schemes[0])
	}
	last := len(schemes) - 1
	return usageError{fmt.Errorf("HERALD_DATABASE_URL must start with %s or %s, got %q", strings.Join(schemes[:last], ", "), schemes[last], redact(url))}
}

// storeKind names the engine a HERALD_DATABASE_URL picks ("" for none).
func storeKind(url string) string {
	e, _ := storeFor(url)
	return e.name
}

// openStore opens the store HERALD_DATABASE_URL names (url), with
// HERALD_DATABASE_DIRECT_URL (direct, PostgreSQL only). conns sizes a
// PostgreSQL pool (0: the store's default); see poolSize. Only create (serve
// and migrate) may create a SQLite file: every other command on a missing
// file says so instead of leaving an empty database behind. statusEvents
// is whether a settling record writes its status event (see
// writeStatusEvents); only a worker's records settle.
func openStore(ctx context.Context, url, direct string, conns int, create bool, tp trace.TracerProvider, statusEvents bool) (store, func(), error) {
	e, ok := storeFor(url)
	if !ok {
		return nil, nil, unknownStore(url)
	}
	if direct != "" && !e.direct {
		return nil, nil, usageError{fmt.Errorf("HERALD_DATABASE_DIRECT_URL is for a PostgreSQL store behind a pooler; HERALD_DATABASE_URL is %s", redact(url))}
	}
	return e.open(ctx, url, storeOptions{direct: direct, conns: conns, create: create, tp: tp, statusEvents: statusEvents})
}

func openPostgres(ctx context.Context, url string, o storeOptions) (store, func(), error) {
	s, err := postgres.Open(ctx, url, postgres.Config{MaxConns: o.conns, TracerProvider: o.tp, NoStatusEvents: !o.statusEvents, DirectURL: o.direct})
	if err != nil {
		return nil, nil, fmt.Errorf("open postgres store: %w", err)
	}
	return s, s.Close, nil
}

func openSQLite(ctx context.Context, url string, o storeOptions) (store, func(), error) {
	path := sqlitePath(url)
	if path == "" {
		return nil, nil, usageError{fmt.Errorf("HERALD_DATABASE_URL %q names no file (want sqlite:PATH)", url)}
	}
	if _, err := os.Stat(path); !o.create && errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("database %s does not exist: run `herald migrate` (or `herald serve`, which migrates) first", path)
	}
	s, err := sqlite.Open(ctx, path, sqlite.Config{NoStatusEvents: !o.statusEvents})
	if err != nil {
		return nil, nil, fmt.Errorf("open sqlite store %s: %w", path, err)
	}
	return s, func() { _ = s.Close() }, nil
}

func openMongo(ctx context.Context, url string, o storeOptions) (store, func(), error) {
	s, err := mongo.Open(ctx, url, mongo.Config{NoStatusEvents: !o.statusEvents})
	if err != nil {
		return nil, nil, fmt.Errorf("open mongodb store: %w", err)
	}
	return s, func() { _ = s.Close() }, nil
}

// describeStore names the database a URL opens for a person: the engine
// and where, no secrets; a file engine names its file (and, with isNew,
// whether it is about to be created). at says where a server is (redact or
// where).
func describeStore(url string, at func(string) string, isNew bool) string {
	e, ok := storeFor(url)
	switch {
	case !ok:
		return redact(url)
	case !e.file:
		return e.title + " " + at(url)
	}
	path := sqlitePath(url)
	if _, err := os.Stat(path); isNew && errors.Is(err, fs.ErrNotExist) {
		return e.title + " file " + path + " (new: it will be created)"
	}
	return e.title + " file " + path
}

// openOneShot opens the configured store for a one-shot command (migrate,
// the admin commands, bench's scratch schema): the store's default pool and
// no tracing. It settles no delivery, so statusEvents is moot (left on).
// create is openStore's.
func openOneShot(ctx context.Context, cfg Config, create bool) (store, func(), error) {
	return openStore(ctx, cfg.DatabaseURL, cfg.DatabaseDirectURL, 0, create, nil, true)
}

// openMigrated opens the store of a one-shot command: it must exist and be
// migrated.
func openMigrated(ctx context.Context, cfg Config) (store, func(), error) {
	st, closeStore, err := openOneShot(ctx, cfg, false)
	if err != nil {
		return nil, nil, err
	}
	if err := checkMigrated(ctx, st); err != nil {
		closeStore()
		return nil, nil, err
	}
	return st, closeStore, nil
}

// partitionKeeper is a store whose outbox is partitioned by day
// (PostgreSQL): the partitions must exist before their day.
type partitionKeeper interface {
	EnsurePartitions(ctx context.Context) error
}

// ensurePartitions makes the outbox partitions of today and the days ahead
// on a store that has them, before the process serves: a deployment that
// was stopped for longer than the partitions reach finds today's made
// before its first create. A process whose database role may not create
// tables fails only when the present day has no partition (see
// postgres.ErrNoPartitionNow).
// Any other failure is logged: creates work today, and the retention
// passes try again.
func ensurePartitions(ctx context.Context, st store, log *slog.Logger) error {
	p, ok := st.(partitionKeeper)
	if !ok {
		return nil
	}
	err := p.EnsurePartitions(ctx)
	if err == nil || errors.Is(err, postgres.ErrNoPartitionNow) {
		return err
	}
	log.Warn("could not make the outbox partitions of the days ahead", "err", err)
	return nil
}

// checkMigrated fails unless every migration this binary ships is applied.
func checkMigrated(ctx context.Context, st store) error {
	states, err := st.MigrationStatus(ctx)
	if err != nil {
		return err
	}
	return migrate.Check(states)
}

// writeStatusEvents decides HERALD_STATUS_EVENTS: whether the records
// that settle notifications write their status events. auto writes them
// when they have a destination: a broker (other services bind to them
// there), or HERALD_STATUS_WEBHOOK_URL. On the outbox table without a
// status webhook nobody receives them, and each would cost an outbox row
// that a status relay only marks processed. on always writes them, off
// never; off with HERALD_STATUS_WEBHOOK_URL is a contradiction, refused.
func writeStatusEvents(cfg Config) (bool, error) {
	switch cfg.StatusEvents {
	case "on":
		return true, nil
	case "off":
		if cfg.StatusWebhookURL != "" {
			return false, usageError{errors.New("HERALD_STATUS_EVENTS=off writes no status events, so HERALD_STATUS_WEBHOOK_URL would never receive one: unset HERALD_STATUS_WEBHOOK_URL, or set HERALD_STATUS_EVENTS to auto or on")}
		}
		return false, nil
	}
	return cfg.BrokerURL != "" || cfg.StatusWebhookURL != "", nil
}

// schemaCheck is the readiness check "the database is migrated".
type schemaCheck struct{ st store }

func (c schemaCheck) Ping(ctx context.Context) error { return checkMigrated(ctx, c.st) }

// sqlitePath is the file of a sqlite:PATH (or sqlite://PATH) URL.
func sqlitePath(url string) string {
	return strings.TrimPrefix(strings.TrimPrefix(url, "sqlite:"), "//")
}

// poolSize is the PostgreSQL pool of a long-running process. Every
// transaction herald runs is short: no connection is held across a send (a
// worker claims, commits, sends, then records), and a worker's concurrent
// deliveries share one claim and one record transaction at a time. So the
// pool does not follow HERALD_PREFETCH: it serves the API's concurrent
// creates, the relay, and the worker's two grouped statements.
func poolSize(Config) int {
	return 10
}
