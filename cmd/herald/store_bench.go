package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/heraldhq/herald/internal/bench/raw"
	"github.com/heraldhq/herald/internal/store/mongo"
)

// The store engines' bench hooks: what herald bench needs of an engine
// beyond the store every command opens. Each is a field of the engine's
// row in stores (build_store.go).

// storeBench is herald bench's hook of a store engine. Every func takes
// the scratch database's URL as the bench's raw ceilings reach it (without
// a pooler when HERALD_DATABASE_DIRECT_URL says how).
type storeBench struct {
	// scratch makes the run's own database (or file) from the user's URL,
	// named after name; it returns its URL, the name the report gives it,
	// and its removal.
	scratch func(ctx context.Context, userURL, name string) (dbURL, database string, remove func() error, err error)
	// tx measures the raw transaction ceiling; without one it returns 0
	// and a note saying why.
	tx func(ctx context.Context, dbURL string, o raw.TxOptions) (float64, string, error)
	// pipeline makes the raw pipeline ceiling's store beside the scratch
	// database (a schema, a file, a database): its URL and its removal.
	pipeline func(ctx context.Context, dbURL string) (string, func() error, error)
	// insert measures --broadcast's raw insert ceiling; without one it
	// returns 0 and a note saying why.
	insert func(ctx context.Context, dbURL string, o raw.InsertOptions) (float64, string, error)
	// preload writes n notifications already sent (with their events,
	// dedup rows and attempts) into the scratch database, as a
	// deployment's history (--preload); nil where the engine has none.
	preload func(ctx context.Context, dbURL string, n int) error
	// stats is whether the engine has PostgreSQL's statistics views (rows,
	// commits, WAL, sequential scans and connections per run are read
	// there); unmeasured is the report's note on what is not measured
	// without them.
	stats      bool
	unmeasured string
	// connsNote, when set, says why db_conns_max is not sampled.
	connsNote string
}

var postgresBench = &storeBench{
	scratch: func(ctx context.Context, userURL, _ string) (string, string, func() error, error) {
		dbURL, drop, err := raw.ScratchPostgres(ctx, userURL)
		if err != nil {
			return "", "", nil, err
		}
		pu, err := url.Parse(dbURL)
		if err != nil {
			return "", "", nil, errors.Join(fmt.Errorf("scratch database: %w", err), drop())
		}
		return dbURL, strings.TrimPrefix(pu.Path, "/"), drop, nil
	},
	tx: func(ctx context.Context, dbURL string, o raw.TxOptions) (float64, string, error) {
		r, err := raw.PostgresTx(ctx, dbURL, o)
		return r, "", err
	},
	pipeline: func(ctx context.Context, dbURL string) (string, func() error, error) {
		return raw.ScratchSchema(ctx, dbURL, rawPipelineSchema)
	},
	insert: func(ctx context.Context, dbURL string, o raw.InsertOptions) (float64, string, error) {
		r, err := raw.PostgresInsert(ctx, dbURL, o)
		return r, "", err
	},
	preload: raw.PreloadPostgres,
	stats:   true,
}

var sqliteBench = &storeBench{
	scratch: func(context.Context, string, string) (string, string, func() error, error) {
		dir, err := os.MkdirTemp("", "herald-bench-")
		if err != nil {
			return "", "", nil, fmt.Errorf("scratch directory: %w", err)
		}
		path := filepath.Join(dir, "herald.db")
		return "sqlite:" + path, path, func() error { return os.RemoveAll(dir) }, nil
	},
	tx: func(ctx context.Context, dbURL string, o raw.TxOptions) (float64, string, error) {
		r, err := raw.SQLiteTx(ctx, sqlitePath(dbURL), o)
		return r, "", err
	},
	pipeline: func(_ context.Context, dbURL string) (string, func() error, error) {
		path, remove := raw.ScratchFile(sqlitePath(dbURL), rawPipelineSchema)
		return "sqlite:" + path, remove, nil
	},
	insert: func(ctx context.Context, dbURL string, o raw.InsertOptions) (float64, string, error) {
		r, err := raw.SQLiteInsert(ctx, sqlitePath(dbURL), o)
		return r, "", err
	},
	unmeasured: "SQLite: rows_per_notification, commits_per_notification and wal_bytes_per_notification are not measured (no statistics views; the store commits through its own connections, which the bench cannot count without changing it)",
	connsNote:  "SQLite: one write connection and a read pool per store; db_conns_max is sampled on PostgreSQL only",
}

var mongoBench = &storeBench{
	scratch: func(ctx context.Context, userURL, name string) (string, string, func() error, error) {
		dbURL, drop, err := scratchMongo(ctx, userURL, "bench_"+name)
		if err != nil {
			return "", "", nil, err
		}
		database, _ := mongo.DatabaseName(dbURL)
		return dbURL, database, drop, nil
	},
	tx: func(context.Context, string, raw.TxOptions) (float64, string, error) {
		return 0, "MongoDB: no raw transaction ceiling (tx_per_s 0): the store writes one document per change, without transactions", nil
	},
	pipeline: func(ctx context.Context, dbURL string) (string, func() error, error) {
		database, _ := mongo.DatabaseName(dbURL)
		return scratchMongo(ctx, dbURL, database+"_raw")
	},
	insert: func(context.Context, string, raw.InsertOptions) (float64, string, error) {
		return 0, "MongoDB: no raw insert ceiling (raw_insert_per_s 0)", nil
	},
	unmeasured: "MongoDB: rows_per_notification, commits_per_notification, wal_bytes_per_notification and seq_scans_per_1k are not measured (SQL statistics views only)",
}

// benchCleanupTimeout bounds the clean-up of scratch objects, which runs
// even when the bench was interrupted.
const benchCleanupTimeout = 30 * time.Second

// rawPipelineSchema names the scratch schema (PostgreSQL) or file (SQLite)
// of the raw pipeline ceiling.
const rawPipelineSchema = "bench_raw_pipeline"

// scratchMongo returns rawURL naming database name instead, and a func
// that drops it.
func scratchMongo(ctx context.Context, rawURL, name string) (string, func() error, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", nil, fmt.Errorf("scratch database: %w", err)
	}
	u.Path = "/" + strings.NewReplacer("-", "_", ".", "_").Replace(name)
	dbURL := u.String()
	return dbURL, func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), benchCleanupTimeout)
		defer cancel()
		s, err := mongo.Open(ctx, dbURL, mongo.Config{StartTimeout: -1})
		if err != nil {
			return err
		}
		defer s.Close()
		return s.Drop(ctx)
	}, nil
}

// preloadEngines names the engines whose rows have a preload, for
// --preload's refusal elsewhere: "PostgreSQL".
func preloadEngines() string {
	var names []string
	for _, e := range stores {
		if e.bench != nil && e.bench.preload != nil {
			names = append(names, e.title)
		}
	}
	return strings.Join(names, ", ")
}

// canPreload is whether the engine HERALD_DATABASE_URL picks has a
// preload.
func canPreload(url string) bool {
	e, ok := storeFor(url)
	return ok && e.bench != nil && e.bench.preload != nil
}
