package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

// rankedDue returns the common table expressions that pick the due rows
// of a claim rank by rank (issue 34, point 5), and name them together
// claimed (id, occurred_at): up to limit rows (an SQL expression), of the
// claim's types (cond, a condition on event_type that implies the
// predicate of outbox_work_due_idx), due (available_at passed), with no
// live lease, skipping rows another claim is locking at this instant;
// first the high rows in due order, (available_at, id), then, up to the
// rest of the limit, the normal ones, then the bulk ones. before names
// CTEs (already written) whose rows count against the limit.
//
// Each rank is a range of outbox_work_due_idx, (priority, available_at,
// id) (migration 0020), walked from the earliest due time up to now and
// no further: a row scheduled for later is never read, whatever its rank,
// and a high row due now is taken before every due bulk row, however many
// there are. A rank whose share of the limit is used up is not walked at
// all (its LIMIT is 0). On the partitioned outbox each range is a Merge
// Append of each partition's index (claimPlan). The bound of the walk,
// clock_timestamp() (see deliver.go, "Clocks"), is read in a subquery: a
// value an index scan can start from.
func rankedDue(cond, limit string, before ...string) string {
	var b strings.Builder
	taken := ""
	for _, name := range before {
		taken += " - (SELECT count(*) FROM " + name + ")"
	}
	names := make([]string, notify.RankCount)
	for k := range notify.RankCount {
		names[k] = fmt.Sprintf("rank%d", k)
		fmt.Fprintf(&b, `%s AS MATERIALIZED (
SELECT id, occurred_at FROM outbox
WHERE processed_at IS NULL%s
  AND priority = %d
  AND available_at <= (SELECT clock_timestamp())
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
ORDER BY available_at, id
LIMIT (SELECT %s%s)
FOR UPDATE SKIP LOCKED
), `, names[k], cond, k, limit, taken)
		taken += " - (SELECT count(*) FROM " + names[k] + ")"
	}
	b.WriteString("claimed AS MATERIALIZED (\nSELECT id, occurred_at FROM ")
	b.WriteString(strings.Join(names, " UNION ALL SELECT id, occurred_at FROM "))
	b.WriteString("\n)")
	return b.String()
}

// workTypes is the type condition of a claim of every work row: every
// type but the status events, as outbox_work_due_idx's predicate writes
// it.
const workTypes = "\n  AND event_type NOT IN (" + statusTypeList + ")"

// leaseSet and leaseReturning end every lease: the claimed rows, found
// again as claimedRows says, are leased to $2 until the lease's end, read
// once, so that locked_until and available_at get the same value. The
// lease moves available_at to its end, as the table transport's claim
// does (claimDue, queue.go), so a leased row is not due and is not read
// again, and one whose lease ran out is due again.
const leaseSet = `
UPDATE outbox
SET locked_by = $2, (locked_until, available_at) = (SELECT l.until, l.until FROM (SELECT clock_timestamp() + $3::bigint * interval '1 microsecond' AS until) AS l)
WHERE ` + claimedRows + `
RETURNING id, event_type, payload, occurred_at, COALESCE(traceparent, ''), priority`

const (
	// claimStatusBatch picks the rows a relay of status events only
	// may take: unprocessed, of its types (%[1]s, see relayTypes), with no
	// live lease, in id order, skipping rows another relay is claiming at
	// this instant, from outbox_status_unprocessed_idx. Nothing schedules
	// a status event and nothing ranks it: they are always due, and id
	// order is their order.
	claimStatusBatch = `
WITH claimed AS MATERIALIZED (
SELECT id, occurred_at FROM outbox
WHERE processed_at IS NULL%[1]s
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED
)`

	// leaseEveryType is the lease of a relay of every type (the default
	// with a broker): the status events first, in id order from
	// outbox_status_unprocessed_idx, then due work rows rank by rank
	// (rankedDue) up to the batch's size. Status events go first: there
	// is at most one per settled delivery, and behind a backlog of work
	// they would otherwise wait for it to drain.
	leaseEveryTypeHead = `
WITH status AS MATERIALIZED (
SELECT id, occurred_at FROM outbox
WHERE processed_at IS NULL
  AND event_type IN (` + statusTypeList + `)
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED
), `
)

// leaseEveryType is leaseEveryTypeHead with its work rows and the lease.
var leaseEveryType = leaseEveryTypeHead + strings.Replace(rankedDue(workTypes, "$1::bigint", "status"),
	"claimed AS MATERIALIZED (\nSELECT id, occurred_at FROM ",
	"claimed AS MATERIALIZED (\nSELECT id, occurred_at FROM status UNION ALL SELECT id, occurred_at FROM ", 1) + leaseSet

const (
	// markRelayed records the confirmed rows; any relay's confirm counts,
	// so it does not check the lease: the broker has the event either way.
	// releaseRelayed ends the lease of the rows this batch could not
	// publish, so that they are due again at once: available_at, which the
	// lease moved to its end, goes back to occurred_at, when a row that
	// was never scheduled became due. The row keeps its place in due
	// order, and the backlog's age (OutboxStats, from available_at) keeps
	// counting through a broker outage that fails every publish instead of
	// starting again at each one. (A scheduled row released so counts from
	// its create, not its send_at: an outage is on anyway.) Both bound occurred_at
	// by the batch's own (occurredSpan, queue.go) so that, planned with the
	// values, they touch only the partitions of those days.
	markRelayed    = `UPDATE outbox SET processed_at = now(), locked_until = NULL WHERE id = ANY($1) AND occurred_at BETWEEN $2 AND $3 AND processed_at IS NULL`
	releaseRelayed = `UPDATE outbox SET locked_by = NULL, locked_until = NULL, available_at = LEAST(occurred_at, clock_timestamp()) WHERE id = ANY($1) AND occurred_at BETWEEN $3 AND $4 AND locked_by = $2 AND processed_at IS NULL`

	// selectOutboxStats reads the backlog: the due rows (see
	// notify.OutboxStats), counted rank by rank on outbox_work_due_idx's
	// ranges up to now (the work) and from outbox_status_unprocessed_idx
	// (the status events), the oldest due time as the first entry of each
	// range, the rows not due (the work ranges past now, and the status
	// events a relay holds leased; counted up to $1), and the dead letters from notifications_failed_idx, in one round
	// trip and one snapshot. Scheduled rows are not read as backlog: the
	// due ranges stop at now.
	selectOutboxStats = `
WITH t AS MATERIALIZED (SELECT now() AS now),
work AS (
	SELECT
		(SELECT count(*) FROM outbox WHERE processed_at IS NULL` + workTypes + ` AND priority = r.k AND available_at <= (SELECT now FROM t)) AS n,
		(SELECT min(available_at) FROM outbox WHERE processed_at IS NULL` + workTypes + ` AND priority = r.k AND available_at <= (SELECT now FROM t)) AS oldest
	FROM (VALUES (0), (1), (2)) AS r(k)
),
status AS (
	SELECT count(*) AS n, min(available_at) AS oldest FROM outbox
	WHERE processed_at IS NULL AND event_type IN (` + statusTypeList + `) AND available_at <= (SELECT now FROM t)
)
SELECT
	(SELECT sum(n) FROM work)::bigint + (SELECT n FROM status),
	COALESCE(EXTRACT(EPOCH FROM (SELECT now FROM t) - LEAST((SELECT min(oldest) FROM work), (SELECT oldest FROM status))), 0)::float8,
	(SELECT count(*) FROM notifications WHERE status = 'failed'),
	(SELECT n FROM status),
	(SELECT count(*) FROM (
		SELECT 1 FROM outbox WHERE processed_at IS NULL` + workTypes + ` AND priority = 0 AND available_at > (SELECT now FROM t)
		UNION ALL SELECT 1 FROM outbox WHERE processed_at IS NULL` + workTypes + ` AND priority = 1 AND available_at > (SELECT now FROM t)
		UNION ALL SELECT 1 FROM outbox WHERE processed_at IS NULL` + workTypes + ` AND priority = 2 AND available_at > (SELECT now FROM t)
		UNION ALL SELECT 1 FROM outbox WHERE processed_at IS NULL AND event_type IN (` + statusTypeList + `) AND available_at > (SELECT now FROM t)
		LIMIT $1) AS s)`
)

// LeaseRelay leases up to limit due unprocessed outbox rows of types
// (nil: any) to token for lease, skipping rows another lease holds, in
// one short transaction, highest priority first, then in id order
// (leaseRelayEvents). It implements relay.Outbox.
func (s *Store) LeaseRelay(ctx context.Context, limit int, types []string, token string, lease time.Duration) ([]notify.Event, error) {
	events, err := s.leaseRelayEvents(ctx, limit, types, token, lease)
	if err != nil {
		return nil, wrap("lease outbox rows", err)
	}
	return events, nil
}

// SettleRelay marks the confirmed rows processed and releases the others
// still leased to token (settleRelayed). It implements relay.Outbox.
func (s *Store) SettleRelay(ctx context.Context, mark, release []notify.OutboxKey, token string) error {
	return s.settleRelayed(ctx, mark, release, token)
}

// claimedRows is the condition by which a claim's UPDATE finds again the
// rows its CTE, claimed (id, occurred_at), holds: their ids, in the span
// of their occurred_at. It is a single-table condition on the key, not a
// join: on a plan made once (claimPlan) a join's lookup could be an
// unparameterized walk of a partition's key, chosen while the partition's
// statistics said it was empty (PostgreSQL prefers the unparameterized
// path when both cost nothing) and repeated for every claimed row once
// the partition fills; here the key's index, with id = ANY(...) and the
// span as its condition, is the only path not switched off. The span,
// known once the CTE has run, prunes the UPDATE to the partitions of the
// claimed rows' days at run time.
const claimedRows = `id = ANY(ARRAY(SELECT id FROM claimed))
  AND occurred_at BETWEEN (SELECT min(occurred_at) FROM claimed) AND (SELECT max(occurred_at) FROM claimed)`

// claimPlan goes before a claim in its transaction (the relay's lease and
// the table transport's Claim) and makes it run on a generic plan, made
// once per connection and statement and reused, like the delivery
// bookkeeping's (keyedPlan, store.go; deliver.go, "Plans"). Planned afresh
// for each execution, as the pool's other statements are, a claim on the
// partitioned outbox (migration 0014) spent more on planning over every
// partition than on its run. A plan made once must be right at every size
// of every partition, so the claim is written to have one reasonable plan
// whatever the statistics, and the settings leave no other:
//   - the rows come in the claim's order from a Merge Append of each
//     partition's partial index, which stops after limit rows: id order
//     for the relays, due order (available_at, id) for the table
//     transport's claim (claimDue, queue.go), whose walk also stops at
//     now. Planned from statistics
//     that show no backlog, PostgreSQL preferred reading every partition's
//     unprocessed rows and sorting them, a walk of the whole backlog per
//     batch (issue 24); without a sort, without sequential or bitmap scans,
//     the merge of index walks is the only plan. (Of the indexes that give
//     id order, the partial one costs least on any statistics but one, a
//     partition analysed while empty, where all cost the same; see
//     "Plans" in deliver.go. The index walked there is that empty
//     partition's, until autovacuum analyses it once it has rows, which
//     replans.)
//   - the claimed rows are leased by a lookup of their key in each
//     partition that their occurred_at span reaches (claimedRows), pruned
//     at run time to those partitions. No statement joins: hash and merge
//     joins and materialization are off all the same.
//
// A new partition, or an ANALYZE of one, invalidates the plan: the next
// claim plans again. TestClaimPlansWalkPartialIndexes checks the plans on
// new, young and grown statistics; TestTableClaimReadsOnlyDueRows what the
// table claim reads behind 50,000 retries scheduled for later.
const claimPlan = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_sort', 'off', true),
	set_config('enable_seqscan', 'off', true),
	set_config('enable_bitmapscan', 'off', true),
	set_config('enable_hashjoin', 'off', true),
	set_config('enable_mergejoin', 'off', true),
	set_config('enable_material', 'off', true)`

// relayTypes returns the type condition of a relay lease for a relay of
// types (nil: every type) and the statement's arguments after $3. Types
// are written into the statement as literals, so that each relay's plan,
// made once (claimPlan), can walk the partial index of its types
// (outbox_work_unprocessed_idx for notification.requested,
// outbox_status_unprocessed_idx for the status events) instead of every
// unprocessed row; each set of types is then a statement of its own. A
// type that is not a plain name (letters, digits, '.', '_', '-') is passed
// as a parameter instead, and the relay walks outbox_unprocessed_idx.
func relayTypes(types []string) (cond string, args []any) {
	if types == nil {
		return "", nil
	}
	lits := make([]string, len(types))
	for i, t := range types {
		if !plainType(t) {
			return "\n  AND event_type = ANY($4::text[])", []any{types}
		}
		lits[i] = "'" + t + "'"
	}
	return "\n  AND event_type IN (" + strings.Join(lits, ", ") + ")", nil
}

// plainType reports whether t can be written as a literal as is.
func plainType(t string) bool {
	if t == "" {
		return false
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// leaseStatement returns the lease of a relay of types, and its arguments
// after $3: status events only in id order (claimStatusBatch), any other
// set of types rank by rank in due order (rankedDue), every type both
// (leaseEveryType).
func leaseStatement(types []string) (string, []any) {
	if types == nil {
		return leaseEveryType, nil
	}
	cond, args := relayTypes(types)
	if statusOnly(types) {
		return fmt.Sprintf(claimStatusBatch, cond) + leaseSet, args
	}
	return "WITH " + rankedDue(cond, "$1::bigint") + leaseSet, args
}

// statusOnly reports whether types names status events only.
func statusOnly(types []string) bool {
	if len(types) == 0 {
		return false
	}
	for _, t := range types {
		if !notify.IsStatusEvent(t) {
			return false
		}
	}
	return true
}

// leaseRelayEvents leases up to limit rows to token, in id order, in one
// round trip (a pipelined batch, one implicit transaction). The lease
// commits without waiting for its WAL flush (synchronous_commit off, for
// this transaction only): a lease lost in a database crash only frees rows
// that are unprocessed anyway, and the flush would double the fsyncs of a
// batch. claimPlan shares the transaction.
func (s *Store) leaseRelayEvents(ctx context.Context, limit int, types []string, token string, lease time.Duration) ([]notify.Event, error) {
	sql, typeArgs := leaseStatement(types)
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(claimPlan)
	b.Queue(sql, append([]any{limit, token, lease.Microseconds()}, typeArgs...)...)
	br := s.sendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	events, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (notify.Event, error) {
		var (
			e    notify.Event
			rank int16
		)
		err := row.Scan(&e.ID, &e.Type, &e.Payload, &e.OccurredAt, &e.Traceparent, &rank)
		e.Priority = notify.PriorityOfRank(int(rank))
		return e, err
	})
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	// RETURNING gives no order guarantee: highest priority first, then
	// id order, so that the batch publishes its high rows first.
	slices.SortFunc(events, func(a, b notify.Event) int {
		return cmp.Or(cmp.Compare(a.Priority.Rank(), b.Priority.Rank()), cmp.Compare(a.ID, b.ID))
	})
	return events, nil
}

// settleRelayed marks the confirmed rows and releases the others, in one
// transaction and one round trip (a pipelined batch), each statement in
// the partitions of its rows' days.
func (s *Store) settleRelayed(ctx context.Context, mark, release []notify.OutboxKey, token string) error {
	b := &pgx.Batch{}
	if len(mark) > 0 {
		ids, from, to := occurredSpan(mark)
		b.Queue(markRelayed, ids, from, to)
	}
	if len(release) > 0 {
		ids, from, to := occurredSpan(release)
		b.Queue(releaseRelayed, ids, token, from, to)
	}
	if err := s.sendBatch(ctx, b).Close(); err != nil {
		return wrap("relay batch: mark processed and release unconfirmed", err)
	}
	return nil
}

// OutboxStats reports the backlog (the due unprocessed rows and how long
// the one due longest has been due, on the database's clock), the
// scheduled rows (up to notify.ScheduledCap) and the number of dead letters.
func (s *Store) OutboxStats(ctx context.Context) (notify.OutboxStats, error) {
	var (
		st  notify.OutboxStats
		age float64
	)
	if err := s.pool.QueryRow(ctx, selectOutboxStats, notify.ScheduledCap+1).Scan(&st.Unprocessed, &age, &st.DeadLetters, &st.UnprocessedStatus, &st.Scheduled); err != nil {
		return notify.OutboxStats{}, wrap("outbox stats", err)
	}
	if age > 0 {
		st.OldestAge = time.Duration(age * float64(time.Second))
	}
	if st.Scheduled > notify.ScheduledCap {
		st.Scheduled, st.ScheduledCapped = notify.ScheduledCap, true
	}
	return st, nil
}
