package raw

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/bench"
)

const (
	// readWAL reads the server's WAL position, the commits of this
	// database and the rows the server's other databases wrote.
	readWAL = `
SELECT pg_current_wal_lsn()::text,
	COALESCE(sum(xact_commit) FILTER (WHERE datname = current_database()), 0)::bigint,
	COALESCE(sum(tup_inserted + tup_updated + tup_deleted) FILTER (WHERE datname IS DISTINCT FROM current_database()), 0)::bigint
FROM pg_stat_database`
	// readRows reads the rows written to each table of the schema herald
	// works in (the search path's first), updates HOT or not; a
	// partition's count as its partitioned table's (the outbox's daily
	// partitions, migration 0014).
	readRows = `
SELECT COALESCE((SELECT c.relname FROM pg_class AS c WHERE c.oid = pg_partition_root(s.relid)), s.relname)::text,
	sum(n_tup_ins + n_tup_upd + n_tup_del)::bigint, sum(n_tup_upd)::bigint, sum(n_tup_hot_upd)::bigint
FROM pg_stat_user_tables AS s WHERE schemaname = current_schema()
GROUP BY 1`
	// walSince is the WAL written since the position $1.
	walSince = `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`
)

// counters are the cumulative figures Activity subtracts.
type counters struct {
	lsn                string
	commits, otherRows int64
	rows               map[string]int64
	// updates and hot are the rows updated and, of them, the HOT updates
	// (no index entry written), over every table.
	updates, hot int64
}

func readCounters(ctx context.Context, conn *pgx.Conn) (counters, error) {
	var c counters
	if err := conn.QueryRow(ctx, readWAL).Scan(&c.lsn, &c.commits, &c.otherRows); err != nil {
		return c, err
	}
	rows, err := conn.Query(ctx, readRows)
	if err != nil {
		return c, err
	}
	c.rows = map[string]int64{}
	for rows.Next() {
		var (
			table       string
			n, upd, hot int64
		)
		if err := rows.Scan(&table, &n, &upd, &hot); err != nil {
			return c, err
		}
		c.rows[table] = n
		c.updates += upd
		c.hot += hot
	}
	return c, rows.Err()
}

// settledCounters reads the counters until two reads settleEvery apart
// count the same rows (at most settleReads times): an exiting backend
// leaves pg_stat_activity a moment before it reports its counts.
func settledCounters(ctx context.Context, conn *pgx.Conn) (counters, error) {
	c, err := readCounters(ctx, conn)
	for range settleReads {
		if err != nil {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(settleEvery):
		}
		var next counters
		next, err = readCounters(ctx, conn)
		if err == nil && maps.Equal(next.rows, c.rows) {
			return next, nil
		}
		c = next
	}
	return c, err
}

const (
	settleEvery = 50 * time.Millisecond
	settleReads = 40
)

// WatchActivity starts counting what the database at dbURL does: the WAL
// the server writes (pg_current_wal_lsn, server-wide), the transactions
// committed in the database (pg_stat_database.xact_commit) and the rows
// written to the tables of its schema (pg_stat_user_tables: n_tup_ins +
// n_tup_upd + n_tup_del). The returned func reads them again and returns
// the differences.
//
// The pg_stat_* counters are what backends have reported, and a backend
// reports lazily (PostgreSQL 15 and later: at the end of a transaction at
// most once a second, or when idle within 10s; older: through the stats
// collector, at most twice a second, or when it next works). The end is
// read exactly: the func first waits, at most until its ctx ends, for every
// other connection to the database to close (a backend reports all it
// counted when it exits), then until the counts stop moving. The start is exact only when every other
// connection has been idle long enough to have reported (see herald
// bench's --stats-settle). pg_stat_force_next_flush() cannot help: it
// flushes the calling backend's counts, not herald's. The watcher's own
// few reads count as commits too.
func WatchActivity(ctx context.Context, dbURL string) (func(context.Context) (bench.Activity, error), error) {
	if !IsScratch(dbURL) {
		return nil, fmt.Errorf("database activity: refusing a database not made by the bench")
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("database activity: connect: %w", err)
	}
	before, err := readCounters(ctx, conn)
	// Closed now, so that it is not waited for at the end.
	conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("database activity: %w", err)
	}
	return func(ctx context.Context) (bench.Activity, error) {
		conn, err := pgx.Connect(ctx, dbURL)
		if err != nil {
			return bench.Activity{}, fmt.Errorf("database activity: connect: %w", err)
		}
		defer conn.Close(context.WithoutCancel(ctx))
		if err := waitAlone(ctx, conn); err != nil {
			return bench.Activity{}, fmt.Errorf("database activity: %w", err)
		}
		after, err := settledCounters(ctx, conn)
		if err != nil {
			return bench.Activity{}, fmt.Errorf("database activity: %w", err)
		}
		a := bench.Activity{
			Commits:     after.commits - before.commits,
			Updates:     after.updates - before.updates,
			HOTUpdates:  after.hot - before.hot,
			OtherRows:   after.otherRows - before.otherRows,
			RowsByTable: map[string]int64{},
		}
		if err := conn.QueryRow(ctx, walSince, before.lsn).Scan(&a.WALBytes); err != nil {
			return bench.Activity{}, fmt.Errorf("database activity: %w", err)
		}
		for table, n := range after.rows {
			if d := n - before.rows[table]; d != 0 {
				a.RowsByTable[table] = d
				a.Rows += d
			}
		}
		return a, nil
	}, nil
}
