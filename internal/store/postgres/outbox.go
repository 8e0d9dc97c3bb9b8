package postgres

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
)

const (
	// claimRelayBatch picks the rows a relay may take: unprocessed, of one
	// of the types $2 (NULL: any), with no live lease, in id order,
	// skipping rows another relay is claiming at this instant. It is
	// answered from outbox_unprocessed_idx: it walks the partial index in
	// id order and stops after limit rows it could lock (rows of other
	// types are passed over; the other relay keeps them few).
	// Leases are judged and started on clock_timestamp(), the statement's
	// time, not the transaction's start (see deliver.go, "Clocks").
	claimRelayBatch = `
SELECT id FROM outbox
WHERE processed_at IS NULL
  AND ($2::text[] IS NULL OR event_type = ANY($2::text[]))
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED`

	// leaseRelayBatch leases the claimed rows to one batch, in one
	// autocommitted statement: the row locks last only as long as it runs,
	// the lease keeps other relays off while the batch publishes. The CTE is
	// materialized so the locking subquery runs exactly once.
	leaseRelayBatch = `
WITH claimed AS MATERIALIZED (` + claimRelayBatch + `
)
UPDATE outbox o
SET locked_by = $3, locked_until = clock_timestamp() + $4::bigint * interval '1 microsecond'
FROM claimed
WHERE o.id = claimed.id
RETURNING o.id, o.event_type, o.payload, o.occurred_at, COALESCE(o.traceparent, '')`

	// markRelayed records the confirmed rows; any relay's confirm counts,
	// so it does not check the lease: the broker has the event either way.
	// releaseRelayed ends the lease of the rows this batch could not
	// publish, so that they are due again at once. Both bound occurred_at
	// by the batch's own (occurredSpan, queue.go) so that, planned with the
	// values, they touch only the partitions of those days.
	markRelayed    = `UPDATE outbox SET processed_at = now(), locked_until = NULL WHERE id = ANY($1) AND occurred_at BETWEEN $2 AND $3 AND processed_at IS NULL`
	releaseRelayed = `UPDATE outbox SET locked_by = NULL, locked_until = NULL WHERE id = ANY($1) AND occurred_at BETWEEN $3 AND $4 AND locked_by = $2 AND processed_at IS NULL`

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
	if err := s.settleRelayed(mctx, mark, release, token); err != nil {
		return len(events), errors.Join(err, pubErr)
	}
	if pubErr != nil {
		return len(events), fmt.Errorf("relay batch: publish: %w", pubErr)
	}
	return len(events), nil
}

// claimPlan goes before a claim in its transaction (the relay's lease and
// the table transport's Claim). On the partitioned outbox (migration
// 0014) the claim's id order is a Merge Append of each partition's partial
// index, which stops after limit rows; planned from statistics that show
// no backlog, PostgreSQL preferred reading every partition's unprocessed
// rows and sorting them, a walk of the whole backlog per batch (issue 24).
// Without a sort the merge is the only plan.
const claimPlan = `SELECT set_config('enable_sort', 'off', true)`

// leaseRelayEvents leases up to limit rows to token, in id order, in one
// round trip (a pipelined batch, one implicit transaction). The lease
// commits without waiting for its WAL flush (synchronous_commit off, for
// this transaction only): a lease lost in a database crash only frees rows
// that are unprocessed anyway, and the flush would double the fsyncs of a
// batch. claimPlan shares the transaction.
func (s *Store) leaseRelayEvents(ctx context.Context, limit int, types []string, token string, lease time.Duration) ([]notify.Event, error) {
	b := &pgx.Batch{}
	b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	b.Queue(claimPlan)
	b.Queue(leaseRelayBatch, limit, types, token, lease.Microseconds())
	br := s.pool.SendBatch(ctx, b)
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
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return wrap("relay batch: mark processed and release unconfirmed", err)
	}
	return nil
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
