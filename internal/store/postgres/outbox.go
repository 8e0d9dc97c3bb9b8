package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// claimRelayBatch picks the rows a relay may take: unprocessed, of the
	// relay's types (%[1]s, see relayTypes), due (%[2]s), with no live
	// lease, in the relay's order (%[3]s), skipping rows another relay is
	// claiming at this instant. It walks a partial index in that order and
	// stops after limit rows it could lock (rows of other types are passed
	// over; the other relay keeps them few). On the partitioned outbox the
	// walk is a Merge Append of each partition's index (claimPlan).
	//
	// A relay of the notifications takes due rows in due order,
	// (available_at, id), from outbox_work_due_idx (migration 0019): a row's
	// available_at is its notification's send_at, so a row scheduled for
	// later is neither read nor published before it is due, and a year
	// ahead it waits in the outbox, never in a broker. The walk starts at
	// the earliest due time and stops at now. The lease moves available_at
	// to its end, as the table transport's claim does (claimDue,
	// queue.go), so a leased row is not due and is not read again, and one
	// whose lease ran out is due again. A relay of status events only
	// (always due: nothing schedules them) walks
	// outbox_status_unprocessed_idx in id order, as before. A relay of
	// every type (the default with a broker) does both in one statement
	// (leaseEveryType).
	// Leases are judged and started on clock_timestamp(), the statement's
	// time, not the transaction's start (see deliver.go, "Clocks"); the
	// bound of the due walk is read once, in a subquery, a value an index
	// scan can start from.
	claimRelayBatch = `
SELECT id, occurred_at FROM outbox
WHERE processed_at IS NULL%[1]s%[2]s
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
ORDER BY %[3]s
LIMIT $1
FOR UPDATE SKIP LOCKED`

	// leaseEveryType is leaseRelayBatch for a relay of every type: the
	// status events first, in id order from outbox_status_unprocessed_idx,
	// then due work rows in due order from outbox_work_due_idx up to the
	// batch's size, each walk on its own partial index (one index of every
	// unprocessed row in due order would also serve, but the table claim's
	// plan could then take it and read the status events). Status events
	// go first: there is at most one per settled delivery, and behind a
	// backlog of work they would otherwise wait for it to drain.
	leaseEveryType = `
WITH status AS MATERIALIZED (
SELECT id, occurred_at FROM outbox
WHERE processed_at IS NULL
  AND event_type IN (` + statusTypeList + `)
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED
), work AS MATERIALIZED (
SELECT id, occurred_at FROM outbox
WHERE processed_at IS NULL
  AND event_type NOT IN (` + statusTypeList + `)` + relayDue + `
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
ORDER BY ` + relayDueOrder + `
LIMIT (SELECT $1::bigint - count(*) FROM status)
FOR UPDATE SKIP LOCKED
), claimed AS MATERIALIZED (
SELECT id, occurred_at FROM status UNION ALL SELECT id, occurred_at FROM work
)
UPDATE outbox
SET locked_by = $2, (locked_until, available_at) = (SELECT l.until, l.until FROM (SELECT clock_timestamp() + $3::bigint * interval '1 microsecond' AS until) AS l)
WHERE ` + claimedRows + `
RETURNING id, event_type, payload, occurred_at, COALESCE(traceparent, '')`

	// relayDue and relayDueOrder are claimRelayBatch's due condition and
	// order for a relay of the notifications; a relay of status events
	// has neither (relayIDOrder).
	relayDue      = "\n  AND available_at <= (SELECT clock_timestamp())"
	relayDueOrder = "available_at, id"
	relayIDOrder  = "id"

	// leaseRelayBatch leases the claimed rows to one batch, in one
	// autocommitted statement: the row locks last only as long as it runs,
	// the lease keeps other relays off while the batch publishes. The CTE is
	// materialized so the locking subquery runs exactly once. The claimed
	// rows are found again as claimedRows says. The lease's end is read
	// once, so locked_until and available_at get the same value.
	leaseRelayBatch = `
WITH claimed AS MATERIALIZED (` + claimRelayBatch + `
)
UPDATE outbox
SET locked_by = $2, (locked_until, available_at) = (SELECT l.until, l.until FROM (SELECT clock_timestamp() + $3::bigint * interval '1 microsecond' AS until) AS l)
WHERE ` + claimedRows + `
RETURNING id, event_type, payload, occurred_at, COALESCE(traceparent, '')`

	// markRelayed records the confirmed rows; any relay's confirm counts,
	// so it does not check the lease: the broker has the event either way.
	// releaseRelayed ends the lease of the rows this batch could not
	// publish, so that they are due again at once (available_at, which the
	// lease moved to its end, back to now). Both bound occurred_at
	// by the batch's own (occurredSpan, queue.go) so that, planned with the
	// values, they touch only the partitions of those days.
	markRelayed    = `UPDATE outbox SET processed_at = now(), locked_until = NULL WHERE id = ANY($1) AND occurred_at BETWEEN $2 AND $3 AND processed_at IS NULL`
	releaseRelayed = `UPDATE outbox SET locked_by = NULL, locked_until = NULL, available_at = clock_timestamp() WHERE id = ANY($1) AND occurred_at BETWEEN $3 AND $4 AND locked_by = $2 AND processed_at IS NULL`

	// selectOutboxStats reads the backlog from outbox_unprocessed_idx and
	// counts the dead letters from notifications_failed_idx, in one round
	// trip and one snapshot.
	selectOutboxStats = `
SELECT backlog.n, backlog.age,
	(SELECT count(*) FROM notifications WHERE status = 'failed'), backlog.status
FROM (
	SELECT count(*) AS n, COALESCE(EXTRACT(EPOCH FROM now() - min(occurred_at)), 0)::float8 AS age,
		count(*) FILTER (WHERE event_type <> '` + notify.EventRequested + `') AS status
	FROM outbox
	WHERE processed_at IS NULL
) AS backlog`
)

// markTimeout bounds recording an effect that already happened (events the
// broker confirmed, a mail the server accepted). The recording runs even when
// the caller's context has ended meanwhile: skipping it would repeat the
// effect.
const markTimeout = 10 * time.Second

// relayLease is how long rows stay leased to a batch whose context has no
// deadline; with one, the lease runs until it, plus markTimeout.
const relayLease = time.Minute

// RelayBatch leases up to limit unprocessed outbox rows of the given types
// (nil: any) in id order, skipping rows another relay holds, and commits; calls publish with them,
// holding nothing; then, in a second transaction, marks processed exactly
// the leased rows whose ids publish returned, even when publish also failed
// (its error is returned, wrapped), and ends the lease of the others. It
// returns the number of rows leased; 0 means publish was not called. It
// implements relay.Source.
func (s *Store) RelayBatch(ctx context.Context, limit int, types []string, publish func(context.Context, []notify.Event) ([]int64, error)) (int, error) {
	if limit < 1 {
		return 0, fmt.Errorf("relay batch: limit must be at least 1, got %d", limit)
	}
	if types != nil && len(types) == 0 {
		return 0, nil
	}
	lease := relayLease
	if deadline, ok := ctx.Deadline(); ok {
		lease = time.Until(deadline) + markTimeout
	}
	token := relayToken()
	events, err := s.leaseRelayEvents(ctx, limit, types, token, lease)
	if err != nil {
		return 0, wrap("relay batch: claim", err)
	}
	if len(events) == 0 {
		return 0, nil
	}

	confirmed, pubErr := publish(ctx, events)
	// Only rows of this batch may be marked: an id from elsewhere could
	// belong to another relay's batch. Each is named with the occurred_at
	// its lease returned.
	var mark, release []notify.OutboxKey
	for _, e := range events {
		k := notify.OutboxKey{ID: e.ID, OccurredAt: e.OccurredAt}
		if slices.Contains(confirmed, e.ID) {
			mark = append(mark, k)
		} else {
			release = append(release, k)
		}
	}
	// The broker has the confirmed events: record that even if ctx ended
	// meanwhile, or they would be published again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markTimeout)
	defer cancel()
	if err := s.settleRelayedRetrying(mctx, mark, release, token); err != nil {
		return len(events), errors.Join(err, pubErr)
	}
	if pubErr != nil {
		return len(events), fmt.Errorf("relay batch: publish: %w", pubErr)
	}
	return len(events), nil
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

// relayTypes returns the type condition of claimRelayBatch for a relay of
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

// leaseStatement returns leaseRelayBatch for a relay of types, and its
// arguments after $3: in due order, except for a relay of status events
// alone (see claimRelayBatch).
func leaseStatement(types []string) (string, []any) {
	if types == nil {
		return leaseEveryType, nil
	}
	cond, args := relayTypes(types)
	if statusOnly(types) {
		return fmt.Sprintf(leaseRelayBatch, cond, "", relayIDOrder), args
	}
	return fmt.Sprintf(leaseRelayBatch, cond, relayDue, relayDueOrder), args
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
		var e notify.Event
		err := row.Scan(&e.ID, &e.Type, &e.Payload, &e.OccurredAt, &e.Traceparent)
		return e, err
	})
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	// RETURNING gives no order guarantee.
	slices.SortFunc(events, func(a, b notify.Event) int { return cmp.Compare(a.ID, b.ID) })
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

// settleRelayedRetrying settles a batch as settleRelayed does, and tries
// again while the store is out of reach, until ctx ends (markTimeout,
// which the rows' lease covers). The broker already has the confirmed
// events: a connection dropped or a failover between the publish and the
// mark would otherwise leave those rows leased for the rest of the lease
// (a minute) and then have them published again. Both statements can run
// twice: the mark names rows by key and only sets processed_at, the
// release touches only rows still under this batch's token.
func (s *Store) settleRelayedRetrying(ctx context.Context, mark, release []notify.OutboxKey, token string) error {
	wait := 50 * time.Millisecond
	for {
		err := s.settleRelayed(ctx, mark, release, token)
		if err == nil || !errors.Is(err, notify.ErrUnavailable) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// relayToken names one relay batch in locked_by.
func relayToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "relay-" + hex.EncodeToString(b)
}

// OutboxStats reports the backlog (the unprocessed rows and the age of the
// oldest of them, on the database's clock) and the number of dead letters.
func (s *Store) OutboxStats(ctx context.Context) (notify.OutboxStats, error) {
	var (
		st  notify.OutboxStats
		age float64
	)
	if err := s.pool.QueryRow(ctx, selectOutboxStats).Scan(&st.Unprocessed, &age, &st.DeadLetters, &st.UnprocessedStatus); err != nil {
		return notify.OutboxStats{}, wrap("outbox stats", err)
	}
	if age > 0 {
		st.OldestAge = time.Duration(age * float64(time.Second))
	}
	return st, nil
}
