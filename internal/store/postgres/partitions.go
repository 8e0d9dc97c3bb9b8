package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The outbox is partitioned by day on occurred_at (migration 0014): one
// partition per UTC day, outbox_pYYYYMMDD, plus outbox_legacy, the table
// the outbox was before the migration, for everything older. There is no
// DEFAULT partition (DETACH ... CONCURRENTLY refuses a table that has one),
// so the partitions must exist before their day: maintenance keeps the
// days from today to partitionDaysAhead after it. It runs when Migrate
// ends, when a herald process starts (EnsurePartitions) and at each
// retention pass (Prune, every 10 minutes in api and serve), so a week
// passes before a deployment whose processes all stopped runs out, and the
// first process to start again makes today's partition before it serves.

// partitionDaysAhead is how many days after today maintenance keeps
// partitions for: today's and the next seven exist after every pass.
const partitionDaysAhead = 7

// partitionLockKey is the pg_advisory_xact_lock key that keeps partition
// creation of several processes apart ("hpart" in ASCII): the second one
// waits, then finds the partitions made.
const partitionLockKey = 0x68_7061_7274

// dropLockKey is the session advisory lock a process holds while it
// detaches and drops old partitions ("hdrop" in ASCII): another process's
// pass skips that step meanwhile instead of racing it for the same
// partitions.
const dropLockKey = 0x68_6472_6f70

// detachLockTimeout and detachStatementTimeout bound the detach of a
// partition on its own connection: DETACH ... CONCURRENTLY waits for every
// transaction that uses the outbox; a long one makes it give up (the
// partition is left "detach pending" and the next pass finalizes it)
// instead of holding the retention loop.
const (
	detachLockTimeout      = "10s"
	detachStatementTimeout = "60s"
	setDetachLimits        = "SET lock_timeout = '" + detachLockTimeout + "'; SET statement_timeout = '" + detachStatementTimeout + "'"
)

// ErrNoDirectURL is the error of a retention pass that kept old outbox
// partitions because it runs behind a pooler in transaction mode with no
// direct URL (Config.DirectURL) to drop them through.
var ErrNoDirectURL = errors.New("old partitions kept: dropping them needs a session, which a pooler in transaction mode does not give; set a direct URL")

const (
	// selectOutboxKind is 'p' once the outbox is partitioned, 'r' on a
	// schema before 0014, NULL before the first migration.
	selectOutboxKind = `SELECT c.relkind::text FROM pg_class c WHERE c.oid = to_regclass('outbox')`

	// selectPartitions lists the outbox's partitions with their bounds
	// (NULL: MINVALUE or MAXVALUE) and whether a detach of it was
	// interrupted. The bounds are read back from their text, which the
	// server writes and parses with the same session settings.
	selectPartitions = `
SELECT c.relname::text,
	CASE WHEN b.m[1] IN ('MINVALUE', 'MAXVALUE') THEN NULL ELSE btrim(b.m[1], '''')::timestamptz END,
	CASE WHEN b.m[2] IN ('MINVALUE', 'MAXVALUE') THEN NULL ELSE btrim(b.m[2], '''')::timestamptz END,
	i.inhdetachpending
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid,
	LATERAL (SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \((.*)\) TO \((.*)\)') AS m) b
WHERE i.inhparent = to_regclass('outbox') AND b.m IS NOT NULL
ORDER BY 2 NULLS FIRST`

	lockPartitions = `SELECT pg_advisory_xact_lock($1)`
	readNow        = `SELECT now()`

	// renamePartitionIndexes names each index ATTACH made on partition $1
	// after the parent's index it belongs to: outbox_unprocessed_idx
	// becomes <partition>_unprocessed_idx, as on outbox_legacy, so that a
	// plan says which index it walks.
	renamePartitionIndexes = `
SELECT format('ALTER INDEX %I RENAME TO %I', c.relname, $1 || substr(p.relname, length('outbox') + 1))
FROM pg_index x
JOIN pg_inherits i ON i.inhrelid = x.indexrelid
JOIN pg_class c ON c.oid = x.indexrelid
JOIN pg_class p ON p.oid = i.inhparent
WHERE x.indrelid = to_regclass($1) AND c.relname <> $1 || substr(p.relname, length('outbox') + 1)`

	// partitionKeeps is true when partition $1 still holds a row that
	// retention must keep: one not yet handed on (its partial index
	// answers), or one handed on after the cut $2 (outbox_processed_idx),
	// so that no row goes sooner than the delete-based prune let it.
	partitionKeeps = `SELECT EXISTS (SELECT 1 FROM %[1]s WHERE processed_at IS NULL)
	OR EXISTS (SELECT 1 FROM %[1]s WHERE processed_at >= $1)`
)

// partition is one partition of the outbox: [from, to), a nil bound being
// MINVALUE or MAXVALUE.
type partition struct {
	name          string
	from, to      *time.Time
	detachPending bool
}

// span is a range of occurred_at, [from, to).
type span struct{ from, to time.Time }

// missingSpans returns the parts of [from, to) no partition covers, split at
// UTC midnights: each is one partition to make. Partitions are the ones
// selectPartitions lists, in any order.
func missingSpans(parts []partition, from, to time.Time) []span {
	var out []span
	for d := from; d.Before(to); {
		next := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, time.UTC).AddDate(0, 0, 1)
		if next.After(to) {
			next = to
		}
		// d lies in no partition: the gap runs to the next partition's
		// start or to the day's end.
		end, covered := next, false
		for _, p := range parts {
			if (p.from == nil || !p.from.After(d)) && (p.to == nil || p.to.After(d)) {
				covered = true
				if p.to == nil {
					return out
				}
				d = *p.to
				break
			}
			if p.from != nil && p.from.After(d) && p.from.Before(end) {
				end = *p.from
			}
		}
		if covered {
			continue
		}
		out = append(out, span{d, end})
		d = end
	}
	return out
}

// partitionName names the partition that starts at from: outbox_pYYYYMMDD
// at a UTC midnight, with _HHMMSS after it otherwise (a day another
// partition covers in part).
func partitionName(from time.Time) string {
	from = from.UTC()
	if from.Equal(from.Truncate(24 * time.Hour)) {
		return "outbox_p" + from.Format("20060102")
	}
	return "outbox_p" + from.Format("20060102_150405")
}

// ErrNoPartitionNow marks a failure of EnsurePartitions that leaves the
// outbox without a partition for the present instant: every create fails
// until one is made. Any other failure leaves creates working for now (the
// days ahead are missing, and the next pass tries again).
var ErrNoPartitionNow = errors.New("the outbox has no partition for now")

// EnsurePartitions makes the outbox partitions missing from the start of
// today (UTC, on the database's clock) to the end of the partitionDaysAhead
// days after it, so that no create finds its day without a partition. On a
// schema before migration 0014 it does nothing. Several processes may run
// it at once: they take turns, and the later ones find the work done. When
// it fails (a role without the right to create tables, a lock it waited
// for too long) and no partition holds the present instant, the error also
// matches ErrNoPartitionNow.
func (s *Store) EnsurePartitions(ctx context.Context) error {
	_, err := s.ensurePartitions(ctx, time.Time{}, partitionDaysAhead)
	if err == nil {
		return nil
	}
	var now time.Time
	if qerr := s.pool.QueryRow(ctx, readNow).Scan(&now); qerr != nil {
		return err
	}
	parts, lerr := listPartitions(ctx, s.pool)
	if lerr == nil && len(missingSpans(parts, now, now.Add(time.Microsecond))) > 0 {
		return fmt.Errorf("%w: %w", ErrNoPartitionNow, err)
	}
	return err
}

// ensurePartitions makes the partitions missing from the start of the UTC
// day of from (zero: now, on the database's clock) to the end of the
// daysAhead days after it, and returns how many it made.
func (s *Store) ensurePartitions(ctx context.Context, from time.Time, daysAhead int) (int, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return 0, wrap("outbox partitions: begin", err)
	}
	defer rollback(tx)
	var kind *string
	if err := tx.QueryRow(ctx, selectOutboxKind).Scan(&kind); err != nil {
		return 0, wrap("outbox partitions: read the outbox", err)
	}
	if kind == nil || *kind != "p" {
		return 0, nil // not migrated to 0014 yet
	}
	if _, err := tx.Exec(ctx, lockPartitions, int64(partitionLockKey)); err != nil {
		return 0, wrap("outbox partitions: lock", err)
	}
	if from.IsZero() {
		if err := tx.QueryRow(ctx, readNow).Scan(&from); err != nil {
			return 0, wrap("outbox partitions: read the clock", err)
		}
	}
	from = from.UTC().Truncate(24 * time.Hour)
	to := from.AddDate(0, 0, daysAhead+1)
	parts, err := listPartitions(ctx, tx)
	if err != nil {
		return 0, err
	}
	missing := missingSpans(parts, from, to)
	for _, sp := range missing {
		if err := createPartition(ctx, tx, sp); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, wrap("outbox partitions: commit", err)
	}
	return len(missing), nil
}

// createPartition makes the partition of sp as a table of its own, then
// attaches it: ATTACH takes a lock on the outbox that lets creates, claims
// and updates go on (CREATE TABLE ... PARTITION OF would stop them all for
// the rest of the transaction). The table is empty, so the attach's check
// and its index builds cost nothing.
func createPartition(ctx context.Context, tx pgx.Tx, sp span) error {
	name := partitionName(sp.from)
	id := pgx.Identifier{name}.Sanitize()
	stmts := []string{
		// 0013's fill factor, which the parent cannot hold.
		fmt.Sprintf(`CREATE TABLE %s (LIKE outbox INCLUDING DEFAULTS) WITH (fillfactor = 70)`, id),
		fmt.Sprintf(`ALTER TABLE outbox ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`, id,
			quoteTime(sp.from), quoteTime(sp.to)),
	}
	for _, q := range stmts {
		if _, err := tx.Exec(ctx, q); err != nil {
			return wrap("outbox partitions: make "+name, err)
		}
	}
	rows, err := tx.Query(ctx, renamePartitionIndexes, name)
	if err != nil {
		return wrap("outbox partitions: name the indexes of "+name, err)
	}
	renames, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return wrap("outbox partitions: name the indexes of "+name, err)
	}
	for _, q := range renames {
		if _, err := tx.Exec(ctx, q); err != nil {
			return wrap("outbox partitions: name the indexes of "+name, err)
		}
	}
	return nil
}

// quoteTime writes t as a timestamptz literal in UTC.
func quoteTime(t time.Time) string {
	return "'" + t.UTC().Format("2006-01-02 15:04:05.999999") + "+00'"
}

// querier is a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// listPartitions reads the outbox's partitions (selectPartitions).
func listPartitions(ctx context.Context, q querier) ([]partition, error) {
	rows, err := q.Query(ctx, selectPartitions)
	if err != nil {
		return nil, wrap("outbox partitions: list", err)
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (partition, error) {
		var p partition
		err := r.Scan(&p.name, &p.from, &p.to, &p.detachPending)
		return p, err
	})
	if err != nil {
		return nil, wrap("outbox partitions: list", err)
	}
	return parts, nil
}

// dropOldPartitions is the outbox half of a retention pass on a
// partitioned outbox: it detaches and drops every partition whose upper
// bound is at or before the cut and that holds no row to keep (see
// partitionKeeps), and finalizes an interrupted detach. It returns how
// many it dropped. One partition's failure does not stop the others'.
func (s *Store) dropOldPartitions(ctx context.Context, before time.Time) (dropped int64, err error) {
	due, err := duePartitions(ctx, s.pool, before)
	if err != nil || len(due) == 0 {
		return 0, err
	}
	// DETACH ... CONCURRENTLY refuses a transaction block and waits for
	// the outbox's transactions: a connection of its own, outside the
	// pool, with limits of its own (the pool's may have none), set once
	// connected rather than in the startup packet, which a pooler in
	// session mode given as the direct URL would refuse. The advisory
	// lock below is a session's: behind a pooler in transaction mode it
	// would stay with whichever server session took it, held for other
	// clients after this one closed, so the connection goes to the direct
	// URL, and without one old partitions are kept (ErrNoDirectURL).
	cfg := s.pool.Config().ConnConfig.Copy()
	if s.directConfig != nil {
		cfg = s.directConfig.Copy()
	} else if pooled, err := s.detectPooler(ctx); err != nil {
		return 0, wrap("outbox partitions: detect a pooler", err)
	} else if pooled {
		return 0, fmt.Errorf("outbox partitions: drop %d: %w", len(due), ErrNoDirectURL)
	}
	cfg.Tracer = nil
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, wrap("outbox partitions: connect for detach", err)
	}
	// Closing the connection also ends its advisory lock.
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.PgConn().Exec(ctx, setDetachLimits).ReadAll(); err != nil {
		return 0, wrap("outbox partitions: set limits", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, int64(dropLockKey)).Scan(&locked); err != nil {
		return 0, wrap("outbox partitions: lock", err)
	}
	if !locked {
		return 0, nil // another process is dropping them
	}
	// Read again under the lock: a pass that held it may have dropped
	// some meanwhile.
	if due, err = duePartitions(ctx, conn, before); err != nil {
		return 0, err
	}
	var errs []error
	for _, p := range due {
		ok, err := dropPartition(ctx, conn, p, before)
		if err != nil {
			errs = append(errs, err)
		} else if ok {
			dropped++
		}
	}
	return dropped, errors.Join(errs...)
}

// duePartitions lists the partitions whose upper bound is at or before
// the cut, those left detach pending first: a table takes one detach at a
// time, and while a partition is detach pending every other detach fails.
// A partition whose range reaches past now is never due, whatever the cut:
// rows may still be written to it (a caller's cut may lie ahead of the
// clock, as the conformance suite's do).
func duePartitions(ctx context.Context, q querier, before time.Time) ([]partition, error) {
	parts, err := listPartitions(ctx, q)
	if err != nil {
		return nil, err
	}
	var now time.Time
	if err := q.QueryRow(ctx, readNow).Scan(&now); err != nil {
		return nil, wrap("outbox partitions: read the clock", err)
	}
	var due []partition
	for _, p := range parts {
		if p.to != nil && !p.to.After(before) && !p.to.After(now) {
			due = append(due, p)
		}
	}
	slices.SortStableFunc(due, func(a, b partition) int {
		switch {
		case a.detachPending == b.detachPending:
			return 0
		case a.detachPending:
			return -1
		}
		return 1
	})
	return due, nil
}

// dropPartition detaches p and drops it, unless it holds a row to keep
// (then it reports false and changes nothing). A row that turned
// unprocessed between the check and the detach (nothing in herald does
// that to a row past the cut, but an operator might) is caught after the
// detach: the partition is attached again instead of dropped.
func dropPartition(ctx context.Context, conn *pgx.Conn, p partition, before time.Time) (bool, error) {
	id := pgx.Identifier{p.name}.Sanitize()
	exec := func(what, q string) error {
		if _, err := conn.PgConn().Exec(ctx, q).ReadAll(); err != nil {
			return wrap(fmt.Sprintf("outbox partitions: %s %s", what, p.name), err)
		}
		return nil
	}
	keeps := func() (bool, error) {
		var keep bool
		if err := conn.QueryRow(ctx, fmt.Sprintf(partitionKeeps, id), before).Scan(&keep); err != nil {
			return false, wrap("outbox partitions: check "+p.name, err)
		}
		return keep, nil
	}
	if p.detachPending {
		// An earlier detach was interrupted after its first step: the
		// partition already takes no new rows, and was checked then.
		if err := exec("finalize the detach of", `ALTER TABLE outbox DETACH PARTITION `+id+` FINALIZE`); err != nil {
			return false, err
		}
	} else {
		keep, err := keeps()
		if err != nil || keep {
			return false, err
		}
		if err := exec("detach", `ALTER TABLE outbox DETACH PARTITION `+id+` CONCURRENTLY`); err != nil {
			return false, err
		}
	}
	keep, err := keeps()
	if err != nil {
		return false, err
	}
	if keep {
		from := "MINVALUE"
		if p.from != nil {
			from = quoteTime(*p.from)
		}
		return false, exec("attach again", fmt.Sprintf(`ALTER TABLE outbox ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`,
			id, from, quoteTime(*p.to)))
	}
	return true, exec("drop", `DROP TABLE `+id)
}
