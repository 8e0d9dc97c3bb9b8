package postgres

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/relay"
)

// The outbox study (issue 23, "Past one database"): what retention and
// vacuum cost on a large outbox, what the relay's and the table transport's
// claims cost there, and what retention costs by detach and drop of a day's
// partition against the delete of the next day's rows, on the outbox as
// migration 0014 partitions it (by day; the study's history in daily
// partitions of its own, without outbox_legacy). The full
// run is TestOutboxAtScale (build tag study, make outbox-study, ten million
// rows by default); TestOutboxStudySmall runs the same code on a small
// table in the normal suite, so that the tool cannot rot.

const (
	// studySpan is how far back the history reaches: the default
	// retention (HERALD_RETENTION, 168h).
	studySpan = 7 * 24 * time.Hour
	// studyBacklog is the number of notifications still waiting for the
	// relay, the newest ones.
	studyBacklog = 5000
	// studySmallRows is the outbox the claims are first measured on.
	studySmallRows = 2 * studyBacklog
	// studyPruneBatch is the retention loop's batch (retention.Config's
	// default), studyRelayBatch HERALD_RELAY_BATCH's default and
	// studyClaimLimit HERALD_PREFETCH's (a table worker with every slot
	// free claims that many).
	studyPruneBatch = 1000
	studyRelayBatch = 100
	studyClaimLimit = 32
)

// studyTables are the tables the study fills.
var studyTables = []string{"notifications", "outbox", "processed_messages"}

// The fill writes, in bulk and in id order, what a deployment that delivered
// for studySpan holds: $1 delivered notifications created evenly from $3
// (every $4 microseconds), each with its notification.requested event
// (relayed a second after the create), its notification.sent event (written
// by the record two seconds after the create, relayed a second later) and
// its dedup row; then $2 pending notifications created in the last minute
// ($5 is now), each with its requested event, unprocessed: the backlog.
// Outbox ids: 2k-1 and 2k for the k-th delivered notification, then the
// backlog's. Payloads are the ones the store writes (notify.Requested, the
// record's status event); tracing is off (no traceparent).
const (
	fillNotifications = `
INSERT INTO notifications (id, user_id, channel, recipient, subject, body, status, attempts,
	created_at, updated_at, sent_at)
OVERRIDING SYSTEM VALUE
SELECT g, 'user-' || (g % 10000), 'email', 'user-' || (g % 10000) || '@example.com',
	'Your order ' || g || ' has shipped',
	'Hello, your order ' || g || ' has shipped and will arrive within three working days. You can follow it from your account page.',
	CASE WHEN g <= $1 THEN 'sent' ELSE 'pending' END, CASE WHEN g <= $1 THEN 1 ELSE 0 END,
	c.t, CASE WHEN g <= $1 THEN c.t + interval '2 seconds' ELSE c.t END,
	CASE WHEN g <= $1 THEN c.t + interval '2 seconds' END
FROM generate_series(1, $1::bigint + $2::bigint) AS g,
	LATERAL (SELECT CASE WHEN g <= $1
		THEN $3::timestamptz + (g - 1) * $4::bigint * interval '1 microsecond'
		ELSE $5::timestamptz - ($1 + $2 - g) * interval '10 milliseconds' END AS t) AS c`

	fillOutbox = `
INSERT INTO outbox (id, event_type, payload, occurred_at, available_at, processed_at)
SELECT e, CASE WHEN sent THEN 'notification.sent' ELSE 'notification.requested' END,
	CASE WHEN sent THEN jsonb_build_object('notification_id', k::text, 'user_id', 'user-' || (k % 10000),
			'channel', 'email', 'status', 'sent', 'attempts', 1, 'at', c.t + interval '2 seconds', 'last_error', '')
		ELSE jsonb_build_object('notification_id', k::text, 'user_id', 'user-' || (k % 10000),
			'channel', 'email', 'to', 'user-' || (k % 10000) || '@example.com',
			'subject', 'Your order ' || k || ' has shipped',
			'body', 'Hello, your order ' || k || ' has shipped and will arrive within three working days. You can follow it from your account page.',
			'request_id', md5(k::text)) END,
	c.occurred, c.occurred,
	-- Processed a second later, but never past the midnight (UTC) after
	-- the row: a row's day is its partition, and a row processed in the
	-- next day would stand in the way of the day's drop, which the study
	-- times (about one run in fifty hit the second before a midnight).
	CASE WHEN k <= $1 THEN LEAST(c.occurred + interval '1 second',
		date_bin('1 day', c.occurred, timestamptz '2000-01-01 00:00:00+00') + interval '1 day' - interval '1 microsecond') END
FROM generate_series(1, 2 * $1::bigint + $2::bigint) AS e,
	LATERAL (SELECT CASE WHEN e <= 2 * $1 THEN (e + 1) / 2 ELSE e - $1 END AS k,
		e <= 2 * $1 AND e % 2 = 0 AS sent) AS ks,
	LATERAL (SELECT t, CASE WHEN sent THEN t + interval '2 seconds' ELSE t END AS occurred
		FROM (SELECT CASE WHEN k <= $1
			THEN $3::timestamptz + (k - 1) * $4::bigint * interval '1 microsecond'
			ELSE $5::timestamptz - ($1 + $2 - k) * interval '10 milliseconds' END AS t) AS tt) AS c`

	fillProcessed = `
INSERT INTO processed_messages (message_id, processed_at, attempt_id)
SELECT 2 * k - 1, $2::timestamptz + (k - 1) * $3::bigint * interval '1 microsecond' + interval '2 seconds', k
FROM generate_series(1, $1::bigint) AS k`
)

// studyConfig is one run of the study.
type studyConfig struct {
	// Rows is the outbox's size (at least studySmallRows).
	Rows int
	// Calls is the number of claims timed in each series.
	Calls int
	// ProcessedBatches bounds the batches of pruneProcessed run as the
	// store runs them (0: all); see runOutboxStudy.
	ProcessedBatches int
}

// studyRow is one line of the study's table of figures.
type studyRow struct{ what, value string }

// study runs the study on a scratch database and returns its figures as a
// table. It checks what it measures as it goes: the claims take what the
// backlog offers, the prune deletes exactly the rows before its cut, the
// detach exactly the partition's.
type study struct {
	t    *testing.T
	ctx  context.Context
	s    *Store
	conn *pgx.Conn
	cfg  studyConfig
	rows []studyRow
}

func (st *study) add(what, format string, args ...any) {
	st.rows = append(st.rows, studyRow{what, fmt.Sprintf(format, args...)})
	st.t.Logf("%s: %s", what, fmt.Sprintf(format, args...))
}

func (st *study) exec(sql string, args ...any) {
	st.t.Helper()
	_, err := st.conn.Exec(st.ctx, sql, args...)
	require.NoError(st.t, err, sql)
}

func (st *study) int64(sql string, args ...any) int64 {
	st.t.Helper()
	var n int64
	require.NoError(st.t, st.conn.QueryRow(st.ctx, sql, args...).Scan(&n), sql)
	return n
}

// walBytes is the cluster's WAL position: the difference of two readings is
// what every database of the cluster wrote between them.
func (st *study) walBytes() int64 {
	return st.int64(`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`)
}

// fill empties the study's tables and writes an outbox of rows rows (see
// fillOutbox), then vacuums and analyses them, as a deployment in a steady
// state has had autovacuum do. It returns the start of the history.
func (st *study) fill(rows int) time.Time {
	st.t.Helper()
	st.exec(`TRUNCATE notifications, outbox, processed_messages`)
	var now time.Time
	require.NoError(st.t, st.conn.QueryRow(st.ctx, `SELECT now()`).Scan(&now))
	delivered := (rows - studyBacklog) / 2
	backlog := rows - 2*delivered
	// The history ends a minute before now, where the backlog starts.
	start := now.Add(-studySpan)
	step := (studySpan - time.Minute).Microseconds() / int64(delivered)
	st.exec(fillNotifications, delivered, backlog, start, step, now)
	st.exec(fillOutbox, delivered, backlog, start, step, now)
	st.exec(fillProcessed, delivered, start, step)
	st.exec(`SELECT setval(pg_get_serial_sequence('notifications', 'id'), $1)`, delivered+backlog)
	st.exec(`SELECT setval(pg_get_serial_sequence('outbox', 'id'), $1)`, rows)
	st.exec(`VACUUM ANALYZE notifications, outbox, processed_messages`)
	require.EqualValues(st.t, rows, st.int64(`SELECT count(*) FROM outbox`))
	require.EqualValues(st.t, backlog, st.int64(`SELECT count(*) FROM outbox WHERE processed_at IS NULL`))
	return start
}

// quantiles formats the median and the 99th percentile of ds.
func quantiles(ds []time.Duration) string {
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("p50 %s, p99 %s", fmtDur(q(0.50)), fmtDur(q(0.99)))
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
}

// claims times the relay's claim and the table transport's, each called
// cfg.Calls times through the store's own methods, with a publish that
// confirms nothing and a lease of a microsecond: every call finds the same
// backlog, the oldest rows first, and claims a full batch from it.
func (st *study) claims(label string) {
	st.t.Helper()
	var claim, whole []time.Duration
	for range st.cfg.Calls {
		start := time.Now()
		n, err := relay.Batch(st.ctx, st.s, studyRelayBatch, nil, func(_ context.Context, evs []notify.Event) ([]int64, error) {
			claim = append(claim, time.Since(start))
			return nil, nil
		})

		whole = append(whole, time.Since(start))
		require.NoError(st.t, err)
		require.Equal(st.t, studyRelayBatch, n)
	}
	st.add("relay claim, "+label, "%s (RelayBatch of %d, lease to publish)", quantiles(claim), studyRelayBatch)
	st.add("relay batch with release, "+label, "%s (lease, publish confirming nothing, release)", quantiles(whole))
	var table []time.Duration
	for range st.cfg.Calls {
		start := time.Now()
		ms, err := st.s.Claim(st.ctx, "study", studyClaimLimit, time.Microsecond)
		table = append(table, time.Since(start))
		require.NoError(st.t, err)
		require.Len(st.t, ms, studyClaimLimit)
	}
	st.add("table claim, "+label, "%s (Claim of %d)", quantiles(table), studyClaimLimit)
}

// sizes reports the heap and index sizes of a table, and its dead tuples
// once every pooled connection has reported its statistics.
func (st *study) sizes(table, label string) {
	st.t.Helper()
	for _, c := range st.s.pool.AcquireAllIdle(st.ctx) {
		_, err := c.Exec(st.ctx, `SELECT pg_stat_force_next_flush()`)
		c.Release()
		require.NoError(st.t, err)
	}
	st.exec(`SELECT pg_stat_force_next_flush()`)
	st.exec(`SELECT pg_stat_clear_snapshot()`)
	// Live rows are counted: n_live_tup is an estimate, thrown off by the
	// fill's counts reported after the fill's own VACUUM.
	// A partitioned table's figures are its partitions'.
	var heap, index, dead int64
	for _, leaf := range leafTables(st.t, st.ctx, st.conn, table) {
		var h, i, d int64
		require.NoError(st.t, st.conn.QueryRow(st.ctx, `
SELECT pg_relation_size(c.oid), pg_indexes_size(c.oid), COALESCE(s.n_dead_tup, 0)
FROM pg_class AS c LEFT JOIN pg_stat_user_tables AS s ON s.relid = c.oid
WHERE c.oid = $1::regclass`, leaf).Scan(&h, &i, &d))
		heap, index, dead = heap+h, index+i, dead+d
	}
	live := st.int64(`SELECT count(*) FROM ` + table)
	st.add(table+", "+label, "heap %s, indexes %s, %d live / %d dead tuples", fmtBytes(heap), fmtBytes(index), live, dead)
}

// dailyPartitions gives the study's history daily partitions of its own:
// outbox_legacy (empty in a fresh database, but covering every day before
// the one after the migration) goes, and the store's maintenance makes the
// partitions from the day before the history to a week ahead, with
// autovacuum off them like the other tables.
func (st *study) dailyPartitions() {
	st.t.Helper()
	st.exec(`ALTER TABLE outbox DETACH PARTITION outbox_legacy`)
	st.exec(`DROP TABLE outbox_legacy`)
	var now time.Time
	require.NoError(st.t, st.conn.QueryRow(st.ctx, `SELECT now()`).Scan(&now))
	_, err := st.s.ensurePartitions(st.ctx, now.Add(-studySpan-24*time.Hour), int(studySpan/(24*time.Hour))+1+partitionDaysAhead)
	require.NoError(st.t, err)
	for _, leaf := range leafTables(st.t, st.ctx, st.conn, "outbox") {
		st.exec(`ALTER TABLE ` + leaf + ` SET (autovacuum_enabled = false)`)
	}
}

// rawClaims times the relay's lease statement (leaseStatement, a lease
// of a microsecond) and the table claim's (claimDue) on the outbox, run as
// the store runs them (after claimPlan, in one implicit transaction), on
// its pool.
func (st *study) rawClaims() {
	st.t.Helper()
	run := func(query string, args ...any) int64 {
		b := &pgx.Batch{}
		b.Queue(claimPlan)
		var tag pgconn.CommandTag
		b.Queue(query, args...).Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
		require.NoError(st.t, st.s.pool.SendBatch(st.ctx, b).Close())
		return tag.RowsAffected()
	}
	var relay, claim []time.Duration
	for range st.cfg.Calls {
		start := time.Now()
		lease, _ := leaseStatement(nil)
		n := run(lease, studyRelayBatch, "study", 1)
		relay = append(relay, time.Since(start))
		require.EqualValues(st.t, studyRelayBatch, n)
		start = time.Now()
		n = run(claimDue, "study", studyClaimLimit, 1)
		claim = append(claim, time.Since(start))
		require.EqualValues(st.t, studyClaimLimit, n)
	}
	st.add("relay lease statement", "%s", quantiles(relay))
	st.add("table claim statement", "%s", quantiles(claim))
}

func sum(ds []time.Duration) time.Duration {
	var t time.Duration
	for _, d := range ds {
		t += d
	}
	return t
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// pruneLoop runs a prune statement of the store (arguments: the cut and
// the batch size) on the store's pool as Store.Prune does, each batch its
// own transaction, until a batch deletes fewer than the batch size or, when
// max > 0, max batches ran. setup, when set, runs first in each batch's
// transaction. It returns the rows deleted and each batch's time.
func (st *study) pruneLoop(query string, cut time.Time, max int, setup string) (int64, []time.Duration) {
	st.t.Helper()
	var (
		total   int64
		batches []time.Duration
	)
	for max == 0 || len(batches) < max {
		begin := time.Now()
		var n int64
		err := pgx.BeginFunc(st.ctx, st.s.pool, func(tx pgx.Tx) error {
			if setup != "" {
				if _, err := tx.Exec(st.ctx, setup); err != nil {
					return err
				}
			}
			tag, err := tx.Exec(st.ctx, query, cut, studyPruneBatch)
			n = tag.RowsAffected()
			return err
		})
		batches = append(batches, time.Since(begin))
		require.NoError(st.t, err)
		total += n
		if n < studyPruneBatch {
			break
		}
	}
	return total, batches
}

// explainWAL runs one batch of a prune statement under EXPLAIN (ANALYZE,
// WAL) and returns the WAL bytes and full-page images it wrote.
func (st *study) explainWAL(query string, cut time.Time, batch int) (bytes, fpi int64) {
	st.t.Helper()
	var out []struct {
		Plan struct {
			Bytes int64 `json:"WAL Bytes"`
			FPI   int64 `json:"WAL FPI"`
		}
	}
	require.NoError(st.t, st.conn.QueryRow(st.ctx, `EXPLAIN (ANALYZE, WAL, FORMAT JSON) `+query, cut, batch).Scan(&out))
	require.Len(st.t, out, 1)
	return out[0].Plan.Bytes, out[0].Plan.FPI
}

// joinPlan names the join a statement's plan makes, as the store's pool
// plans it (plan_cache_mode=force_custom_plan), and what it reads of the
// outbox.
func (st *study) joinPlan(query string, cut time.Time, batch int) string {
	st.t.Helper()
	// With the settings the store runs the statement under, in one
	// implicit transaction.
	b := &pgx.Batch{}
	if query == pruneProcessed {
		b.Queue(pruneProcessedPlan)
	}
	b.Queue(`EXPLAIN `+query, cut, batch)
	br := st.s.pool.SendBatch(st.ctx, b)
	defer br.Close()
	if query == pruneProcessed {
		_, err := br.Exec()
		require.NoError(st.t, err)
	}
	rows, err := br.Query()
	require.NoError(st.t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(st.t, err)
	var picked []string
	for _, l := range lines {
		l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "->"))
		if strings.Contains(l, "Join") || strings.Contains(l, "Nested Loop") || strings.Contains(l, " on outbox") {
			// The daily partitions, one line each, read as one.
			l = dayPartition.ReplaceAllString(strings.TrimSpace(l[:strings.Index(l+"  (", "  (")]), "outbox_pYYYYMMDD")
			l = partitionAlias.ReplaceAllString(l, "")
			if !slices.Contains(picked, l) {
				picked = append(picked, l)
			}
		}
	}
	return strings.Join(picked, "; ")
}

// dayPartition matches a daily partition's name, partitionAlias the alias
// a plan gives each partition of the outbox.
var (
	dayPartition   = regexp.MustCompile(`outbox_p\d{8}`)
	partitionAlias = regexp.MustCompile(` o_\d+$`)
)

// vacuumWAL matches the WAL line of VACUUM VERBOSE (PostgreSQL 14 and
// later).
var vacuumWAL = regexp.MustCompile(`WAL usage: (\d+) records, (\d+) full page images, (\d+) bytes`)

// vacuumIndexes matches VACUUM VERBOSE's line per index.
var vacuumIndexes = regexp.MustCompile(`index scan (needed|not needed|bypassed)[^\n]*`)

// vacuum runs VACUUM (VERBOSE) on table on a connection of its own and
// returns the WAL it wrote (from its report, not the cluster's position)
// and what it said of its index scans.
func (st *study) vacuum(table string) (bytes, fpi int64, indexes string) {
	st.t.Helper()
	cfg, err := pgx.ParseConfig(st.conn.Config().ConnString())
	require.NoError(st.t, err)
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	conn, err := pgx.ConnectConfig(st.ctx, cfg)
	require.NoError(st.t, err)
	defer conn.Close(context.WithoutCancel(st.ctx))
	_, err = conn.Exec(st.ctx, `VACUUM (VERBOSE) `+table)
	require.NoError(st.t, err)
	all := strings.Join(notices, "\n")
	m := vacuumWAL.FindStringSubmatch(all)
	require.NotNil(st.t, m, "VACUUM VERBOSE said:\n%s", all)
	fpi, _ = strconv.ParseInt(m[2], 10, 64)
	bytes, _ = strconv.ParseInt(m[3], 10, 64)
	return bytes, fpi, vacuumIndexes.FindString(all)
}

// runOutboxStudy runs the study and returns its table of figures.
func runOutboxStudy(t *testing.T, ctx context.Context, cfg studyConfig) []studyRow {
	t.Helper()
	require.GreaterOrEqual(t, cfg.Rows, studySmallRows)
	// Autovacuum stays off the study's tables: the vacuum measured is the
	// study's own, and no pass lands in the middle of a measurement.
	s, conn := openMeasured(t, ctx, 4, studyTables)
	st := &study{t: t, ctx: ctx, s: s, conn: conn, cfg: cfg}
	var version string
	require.NoError(t, conn.QueryRow(ctx, `SHOW server_version`).Scan(&version))
	st.add("server", "PostgreSQL %s", version)

	st.dailyPartitions()

	// The claims on a small outbox: the backlog and a little history.
	st.fill(studySmallRows)
	st.claims(fmt.Sprintf("%d rows", studySmallRows))

	// The same on the large one.
	begin := time.Now()
	start := st.fill(cfg.Rows)
	st.add("fill", "%d outbox rows (%d notifications, %d dedup rows) in %d daily partitions, vacuumed and analysed, in %s",
		cfg.Rows, st.int64(`SELECT count(*) FROM notifications`), st.int64(`SELECT count(*) FROM processed_messages`),
		len(leafTables(t, ctx, conn, "outbox")), fmtDur(time.Since(begin)))
	st.claims(fmt.Sprintf("%d rows", cfg.Rows))

	// The claims' bare statements, on a freshly vacuumed outbox (the timed
	// claims leave dead row versions).
	st.exec(`VACUUM outbox`)
	st.rawClaims()
	// Only the prune's dead rows are left for the vacuum measured below.
	st.exec(`VACUUM outbox`)

	// Retention of the oldest day, the partitioned way, through the
	// store's own step (dropOldPartitions, Store.Prune's outbox half): the
	// partitions before the cut, detached concurrently and dropped. The
	// oldest partition holds the rows up to the first midnight (UTC) of the
	// history; when that is less than 12 hours of rows, the first two
	// partitions go, so that a pass always has 12 to 36 hours to drop,
	// whatever the time of day the study runs.
	cut := start.UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	dropParts := 1
	if cut.Sub(start) < 12*time.Hour {
		cut = cut.Add(24 * time.Hour)
		dropParts = 2
	}
	st.add("retention cut", "%s of history before it", cut.Sub(start).Round(time.Minute))
	st.sizes("outbox", "before prune")
	st.sizes("processed_messages", "before prune")
	inParts := st.int64(`SELECT count(*) FROM outbox WHERE occurred_at < $1`, cut)
	require.Positive(t, inParts)
	require.Zero(t, st.int64(`SELECT count(*) FROM outbox WHERE occurred_at < $1 AND (processed_at IS NULL OR processed_at >= $1)`, cut))
	// The partitions before the cut: the history's first day or two, and
	// an empty one before it.
	const beforeCut = `FROM pg_partition_tree('outbox') AS t JOIN pg_class AS c ON c.oid = t.relid WHERE t.isleaf AND c.relname::text < $1`
	partSize := st.int64(`SELECT COALESCE(sum(pg_total_relation_size(relid)), 0)::bigint `+beforeCut, partitionName(cut))
	wantDropped := st.int64(`SELECT count(*) `+beforeCut, partitionName(cut))
	require.GreaterOrEqual(t, wantDropped, int64(dropParts))
	rowsBefore := st.int64(`SELECT count(*) FROM outbox`)
	wal := st.walBytes()
	begin = time.Now()
	dropped, err := s.dropOldPartitions(ctx, cut)
	took := time.Since(begin)
	require.NoError(t, err)
	require.Equal(t, wantDropped, dropped)
	require.Equal(t, rowsBefore-inParts, st.int64(`SELECT count(*) FROM outbox`))
	st.add("DETACH PARTITION CONCURRENTLY + DROP (Store.Prune's partition step)", "%d partition(s) of the history (%d in all), %d rows: %s, cluster WAL meanwhile %s, %s returned to the file system",
		dropParts, dropped, inParts, fmtDur(took), fmtBytes(st.walBytes()-wal), fmtBytes(partSize))

	// Retention of the next day by delete, the way the store deletes the
	// rows of outbox_legacy and of the partitions it must keep (pruneOutbox
	// in batches until one comes back short), timed batch by batch.
	next := cut.Add(24 * time.Hour)
	wantOutbox := st.int64(`SELECT count(*) FROM outbox WHERE processed_at < $1`, next)
	require.Positive(t, wantOutbox)

	// One batch under EXPLAIN (ANALYZE, WAL): the WAL the statement wrote,
	// whatever the rest of the cluster writes meanwhile.
	walBatch, fpi := st.explainWAL(pruneOutbox, next, studyPruneBatch)
	walOne := wantOutbox - st.int64(`SELECT count(*) FROM outbox WHERE processed_at < $1`, next)
	require.EqualValues(t, min(studyPruneBatch, wantOutbox), walOne)
	st.add("pruneOutbox, one batch under EXPLAIN (ANALYZE, WAL)", "%d rows, %s WAL (%.0f bytes/row, %d full-page images)", walOne, fmtBytes(walBatch), float64(walBatch)/float64(walOne), fpi)

	wal = st.walBytes()
	n, batches := st.pruneLoop(pruneOutbox, next, 0, "")
	took = sum(batches)
	clusterWAL := st.walBytes() - wal
	require.Equal(t, wantOutbox, n+walOne)
	require.Zero(t, st.int64(`SELECT count(*) FROM outbox WHERE processed_at < $1`, next))
	st.add("pruneOutbox, the next day by delete", "%d rows in %d batches, %s (%.0f rows/s; batch %s, max %s); cluster WAL meanwhile %s",
		n, len(batches), fmtDur(took), float64(n)/took.Seconds(), quantiles(batches), fmtDur(slices.Max(batches)), fmtBytes(clusterWAL))
	st.sizes("outbox", "after prune")

	// The dedup rows of both days: their outbox rows are gone.
	plan := st.joinPlan(pruneProcessed, next, studyPruneBatch)
	st.add("pruneProcessed plan", "%s", plan)
	// Each candidate is looked up in the key of every partition; a hash or
	// merge anti-join reads the whole outbox per batch.
	require.Regexp(st.t, `Index (Only )?Scan using outbox_\w+_pkey`, plan, "pruneProcessed's plan")
	wantProcessed := st.int64(`SELECT count(*) FROM processed_messages WHERE processed_at < $1`, next)
	require.Positive(t, wantProcessed)
	wal = st.walBytes()
	n, batches = st.pruneLoop(pruneProcessed, next, st.cfg.ProcessedBatches, pruneProcessedPlan)
	took = sum(batches)
	st.add("pruneProcessed as the store runs it", "%d rows in %d batches, %s (%.0f rows/s; batch %s, max %s)",
		n, len(batches), fmtDur(took), float64(n)/took.Seconds(), quantiles(batches), fmtDur(slices.Max(batches)))
	if len(batches) == st.cfg.ProcessedBatches && n == int64(len(batches)*studyPruneBatch) {
		rest := wantProcessed - n
		st.add("pruneProcessed as the store runs it, projected", "%d batches more: about %s at the median batch",
			(rest+studyPruneBatch-1)/studyPruneBatch, fmtDur(time.Duration((rest+studyPruneBatch-1)/studyPruneBatch)*median(batches)))
		m, more := st.pruneLoop(pruneProcessed, next, 0, pruneProcessedPlan)
		n += m
		took = sum(more)
		st.add("pruneProcessed, the rest", "%d rows in %d batches, %s (%.0f rows/s; batch %s, max %s)",
			m, len(more), fmtDur(took), float64(m)/took.Seconds(), quantiles(more), fmtDur(slices.Max(more)))
	}
	st.add("pruneProcessed, cluster WAL meanwhile", "%s", fmtBytes(st.walBytes()-wal))
	require.Equal(t, wantProcessed, n)
	require.Zero(t, st.int64(`SELECT count(*) FROM processed_messages AS pm WHERE pm.processed_at < $1
	AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.id = pm.message_id)`, next))

	// The vacuum the delete leaves to do: the pruned day's partition, and
	// processed_messages.
	for _, table := range []string{partitionName(cut), "processed_messages"} {
		begin = time.Now()
		wal, fpi, out := st.vacuum(table)
		took = time.Since(begin)
		st.add("VACUUM "+table+" after the prune", "%s, WAL %s (%d full-page images); %s", fmtDur(took), fmtBytes(wal), fpi, out)
		st.sizes(table, "after VACUUM")
	}

	// A steady-state pass ten minutes later, through Store.Prune itself:
	// it deletes no outbox row one by one (no partition past the cut is
	// kept) and drops the emptied day; the dedup rows of the ten minutes
	// stay while their outbox rows do, in the next day's partition.
	st.exec(`ANALYZE outbox, processed_messages`)
	later := next.Add(10 * time.Minute)
	st.add("pruneProcessed plan, a 10-minute pass", "%s", st.joinPlan(pruneProcessed, later, studyPruneBatch))
	begin = time.Now()
	res, err := s.Prune(ctx, later, studyPruneBatch)
	took = time.Since(begin)
	require.NoError(t, err)
	require.Zero(t, res.Outbox)
	require.EqualValues(t, 1, res.OutboxPartitions)
	st.add("Store.Prune, a 10-minute pass", "%d outbox rows + %d partition(s) + %d processed_messages rows in %s",
		res.Outbox, res.OutboxPartitions, res.ProcessedMessages, fmtDur(took))
	return st.rows
}

// studyTable formats the figures as a Markdown table.
func studyTable(rows []studyRow) string {
	var b strings.Builder
	b.WriteString("| measure | figure |\n|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r.what, r.value)
	}
	return b.String()
}

// The study's code on a small outbox, in the normal suite: every step runs
// and checks what it measured (the figures mean little at this size).
func TestOutboxStudySmall(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	rows := runOutboxStudy(t, ctx, studyConfig{Rows: 20_000, Calls: 10})
	t.Logf("outbox study, 20,000 rows:\n%s", studyTable(rows))
}
