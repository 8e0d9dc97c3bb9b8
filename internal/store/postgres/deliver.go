package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/batch"
)

// Lock order. Every transaction that writes a delivery's bookkeeping locks
// the notification rows first, in id order, and only then touches
// processed_messages and delivery_attempts: a message id belongs to one
// notification, so two transactions on one message always meet on the
// notification row first and queue there instead of deadlocking. Both the
// claim and the record run as a pipelined batch of two statements in one
// implicit transaction (one round trip): the lock, then the work, which
// reads the rows afresh once it holds them.
//
// Clocks. A lease (notifications.claimed_until, processed_messages.lease_until)
// and a due time (retry_due_at) start at clock_timestamp(), the moment the
// statement writes them, never at now(): now() is the start of the
// transaction, which in a grouped claim-and-record may have waited for row
// locks first, and a lease counted from then would be shorter than asked.
// Whether a lease still holds is judged on the same clock. Timestamps that
// are only a record (started_at, finished_at, sent_at) keep now().
//
// Plans. The batch runs on generic plans, made once per connection and
// statement and reused (keyedPlan, store.go, goes first and sets it for the
// implicit transaction): planning each execution afresh, as the pool's
// other statements do (plan_cache_mode, see Open), cost the claim and the
// record more than executing them. A plan made once must stay right while
// the tables grow from empty to millions of rows, so every statement is
// written so that each table it reads has one reasonable access path, a
// lookup by key, whatever the statistics:
//   - a read of a row per request or result is a LEFT JOIN LATERAL
//     (SELECT ... WHERE key = r.key OFFSET 0): the lateral reference keeps
//     the batch as the outer side of a nested loop, and OFFSET 0 keeps the
//     subquery from being pulled up into a join whose order the planner
//     would choose;
//   - a write is a single-table statement on key = ANY(ARRAY(SELECT ...
//     FROM cte)), its per-row values and conditions in subqueries on the
//     CTE (no UPDATE ... FROM a CTE, DELETE ... USING or EXISTS, which
//     become joins): there is no join order to choose. The claim's lease
//     takes its values from one row of arrays (l) and names its rows by
//     id = ANY(l.nids), which only a lookup inside a nested loop under l
//     can answer;
//   - a condition other than the key is written so that no index can
//     answer it: the record's compare-and-set on status for
//     notifications_pending_idx (see recordDeliveries), and
//     (pm.processed_at IS NULL) IS TRUE for
//     processed_messages_processed_idx;
//   - the previous attempt number is max(attempt) over the notification's
//     attempts in delivery_attempts_notification_idx;
//   - the lock is a single-table read on id = ANY($1), in the key's order.
//
// Sequential and bitmap scans, merge joins and materialized inner sides are
// off for the batch; hash joins stay on for joins of CTEs to each other (no
// table is joined on a condition a hash join could use). What remains to choose between is the key's
// index and an index that holds the key column but not first (every index
// of notifications ends with id, delivery_attempts_notification_idx too),
// scanned whole with the key as a qual; the key's lookup costs one tuple
// against the whole index, so it wins on any statistics but one: tables
// analysed while empty and still of zero pages when the plan is made, where
// both cost one tuple and the planner keeps the other index. That plan lives
// until the table is next analysed or vacuumed (autovacuum analyses a table
// that held none after 50 changed rows, at its next round; with autovacuum
// off for the table, it lives on); a database never analysed (a new
// deployment) plans as if each table held 10 pages and is not affected. TestDeliveryPlansReadOnlyKeys checks each
// statement's generic plan on new, young and grown statistics, and
// TestDeliveryCostStaysWithBatchAsTablesGrow what the store's own plans
// read. (A first attempt ran the earlier statements, joins to CTEs and
// UPDATE ... FROM, on generic plans: a plan made young read a whole table
// as a join's materialized inner side or through an index other than the
// key's, 3-7 M rows per 640 deliveries.)
const (
	lockNotifications = `SELECT id FROM notifications WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE`

	// claimDeliveries decides every request in SQL: missing notification,
	// duplicate (message done, or notification no longer pending), stale
	// (a copy whose retry count is below the message's next_retry_count:
	// its attempt was spent, and the retry's copy carries the delivery on),
	// busy (a live lease), expired (past its expires_at: it ends expired,
	// see the expired CTE, and is answered duplicate), else claimed. A claim inserts its attempt row,
	// leases the notification and the message id, and releases the lease
	// row of an expired claim on another message of the notification (its
	// holder is presumed dead; its late record will fail the
	// compare-and-set): deleted, or, when it holds a retry mark, kept with
	// the mark. A duplicate or missing message id is recorded as done; a
	// stale one is answered duplicate and changes nothing, so that the
	// message id stays open for its next copy.
	// $1 message ids, $2 notification ids (no id twice), $3 lease in
	// microseconds, $4 the requests' retry counts, $5 whether status events
	// are written (Config.NoStatusEvents). The lease runs from the
	// moment the attempt row is written; the answer returns the very value
	// stored.
	// Every table is read by key (see Plans): the request's notification
	// and dedup row in a LATERAL subquery each, the previous attempt number
	// in delivery_attempts_notification_idx, the stale claim's attempt row
	// by its id; every write names its rows by key = ANY(...) with its
	// per-row values and conditions in subqueries on the CTEs or, for the
	// lease, in arrays. The answer is the unclaimed requests and the
	// attempt rows (one per claimed request), without a join.
	claimDeliveries = `
WITH req AS (
	SELECT r.msg, r.nid, n.id IS NOT NULL AS found, n.status, n.claimed_until,
		n.claim_attempt_id, COALESCE(pm.processed_at IS NOT NULL, false) AS done,
		COALESCE(pm.next_retry_count, 0) > r.rc AS spent, n.expires_at
	FROM unnest($1::bigint[], $2::bigint[], $4::bigint[]) AS r(msg, nid, rc)
	LEFT JOIN LATERAL (
		SELECT n.id, n.status, n.claimed_until, n.claim_attempt_id, n.expires_at
		FROM notifications AS n WHERE n.id = r.nid OFFSET 0
	) AS n ON true
	LEFT JOIN LATERAL (
		SELECT pm.processed_at, pm.next_retry_count
		FROM processed_messages AS pm WHERE pm.message_id = r.msg OFFSET 0
	) AS pm ON true
),
decided AS (
	SELECT msg, nid, claim_attempt_id AS stale,
		CASE WHEN NOT found THEN 'missing'
			WHEN done OR status <> 'pending' THEN 'duplicate'
			WHEN spent THEN 'stale'
			WHEN claimed_until > clock_timestamp() THEN 'busy'
			WHEN expires_at <= clock_timestamp() THEN 'expired'
			ELSE 'claimed' END AS status
	FROM req
),
-- A notification past its expires_at is not sent: the claim that finds it
-- so (its first, a retry's, a parked delivery's turn, a reconciled copy's)
-- ends it expired, records the message id done and answers duplicate
-- (acknowledged, nothing sent), and writes its status event
-- notification.expired in the same statement ($5: status events on).
-- A live claim of another delivery (busy) is left to finish: its send
-- started before the expiry was found.
expired AS (
	UPDATE notifications AS n
	SET status = 'expired', expired_at = now(), updated_at = now(), claim_attempt_id = NULL,
		claimed_until = NULL, retry_due_at = NULL
	WHERE n.id = ANY(ARRAY(SELECT d.nid FROM decided AS d WHERE d.status = 'expired'))
		AND (n.status || '') = 'pending'
	RETURNING n.id, n.user_id, n.channel, n.status, n.attempts, n.expired_at AS at, COALESCE(n.last_error, '') AS last_error
),
expired_event AS (
	INSERT INTO outbox (event_type, payload)
	SELECT '` + notify.EventExpired + `',
		jsonb_build_object('notification_id', ap.id::text, 'user_id', ap.user_id, 'channel', ap.channel,
			'status', ap.status, 'attempts', ap.attempts,
			'at', ` + statusAt + `,
			'last_error', ap.last_error)
	FROM expired AS ap
	WHERE $5::boolean
),
attempt AS (
	INSERT INTO delivery_attempts (notification_id, message_id, attempt, started_at)
	SELECT d.nid, d.msg,
		COALESCE((SELECT max(a.attempt) FROM delivery_attempts AS a WHERE a.notification_id = d.nid), 0) + 1,
		now()
	FROM decided AS d
	WHERE d.status = 'claimed'
	RETURNING id, notification_id, message_id, attempt,
		clock_timestamp() + $3::bigint * interval '1 microsecond' AS until
),
-- The lease's values are looked up in arrays of the attempt rows (one
-- row l): a subquery on attempt per notification would read every attempt
-- row for each.
lease AS (
	UPDATE notifications AS n
	SET claim_attempt_id = l.ids[array_position(l.nids, n.id)],
		claimed_until = l.untils[array_position(l.nids, n.id)]
	FROM (SELECT array_agg(a.notification_id) AS nids, array_agg(a.id) AS ids, array_agg(a.until) AS untils
		FROM attempt AS a) AS l
	WHERE n.id = ANY(l.nids)
),
-- A claim that takes over an expired one releases the old claim's lease
-- row when it is on another message id. That message id comes from the
-- old claim's attempt row (primary key): processed_messages has no index
-- on attempt_id.
stale_claim AS (
	SELECT sa.message_id, d.stale AS aid
	FROM decided AS d
	JOIN LATERAL (
		SELECT sa.message_id FROM delivery_attempts AS sa WHERE sa.id = d.stale OFFSET 0
	) AS sa ON true
	WHERE d.status = 'claimed' AND sa.message_id <> d.msg
),
-- Its row is deleted, or released when it holds a retry mark (the two
-- touch different rows). (processed_at IS NULL) IS TRUE is processed_at
-- IS NULL that processed_messages_processed_idx cannot answer.
stale AS (
	DELETE FROM processed_messages AS pm
	WHERE pm.message_id = ANY(ARRAY(SELECT s.message_id FROM stale_claim AS s))
		AND pm.attempt_id = ANY(ARRAY(SELECT s.aid FROM stale_claim AS s WHERE s.message_id = pm.message_id))
		AND (pm.processed_at IS NULL) IS TRUE AND pm.next_retry_count = 0
),
stale_marked AS (
	UPDATE processed_messages AS pm
	SET lease_until = NULL, attempt_id = NULL
	WHERE pm.message_id = ANY(ARRAY(SELECT s.message_id FROM stale_claim AS s))
		AND pm.attempt_id = ANY(ARRAY(SELECT s.aid FROM stale_claim AS s WHERE s.message_id = pm.message_id))
		AND (pm.processed_at IS NULL) IS TRUE AND pm.next_retry_count > 0
),
held AS (
	INSERT INTO processed_messages (message_id, processed_at, lease_until, attempt_id)
	SELECT a.message_id, NULL::timestamptz, a.until, a.id FROM attempt AS a
	UNION ALL
	SELECT d.msg, now(), NULL::timestamptz, NULL::bigint FROM decided AS d WHERE d.status IN ('duplicate', 'missing', 'expired')
	ON CONFLICT (message_id) DO UPDATE
	SET processed_at = excluded.processed_at, lease_until = excluded.lease_until, attempt_id = excluded.attempt_id
	WHERE processed_messages.processed_at IS NULL
)
SELECT d.msg, CASE WHEN d.status IN ('stale', 'expired') THEN 'duplicate' ELSE d.status END, 0::bigint, 0, NULL::timestamptz
FROM decided AS d WHERE d.status <> 'claimed'
UNION ALL
SELECT a.message_id, 'claimed', a.id, a.attempt, a.until FROM attempt AS a`

	// recordDeliveries applies each result whose claim still holds its
	// notification (compare-and-set on claim_attempt_id, status pending)
	// and returns the attempt ids it applied. sent and dead settle the
	// message id (processed_at); retry and deferred release it (the retried
	// copy has the same id and must be able to claim it). A retry keeps the
	// released row and raises its next_retry_count past the claim's retry
	// count, so that a stale copy with that count or less is refused; a
	// deferred release deletes the row unless it holds such a mark. deferred
	// spends no attempt. Every attempt row named is finished with its outcome, even
	// when its claim was lost: the send happened, and the history says so.
	// $1 attempt ids, $2 notification ids, $3 message ids, $4 outcomes,
	// $5 errors, $6 microseconds until a retry is due (retry_due_at, on
	// the database's clock: the worker sends a duration, not its time), $7
	// the retry counts the claims were taken for, $8 whether status events
	// are written (Config.NoStatusEvents), $9 the deferrals' kinds ('' for
	// other outcomes).
	// An applied deferral of the same kind as the notification's previous
	// attempt row is folded into it (folded): that row counts one more
	// repeat and takes the latest error and time, and this attempt's row
	// goes, so that the next claim numbers its attempt as this one was.
	// A settling result also writes its status event (notification.sent or
	// notification.failed) to the outbox, in the same statement.
	// The compare-and-set on status is written (n.status || '') so that it
	// cannot be answered from notifications_pending_idx: walking every
	// pending notification to find a batch's few is what a plan made for a
	// young database does once the backlog has grown.
	// Every table is read by key (see Plans): holding finds the results
	// whose claim holds with a LATERAL lookup of each one's notification
	// (the rows are locked: the update that follows sees them unchanged,
	// and repeats the compare-and-set; ap then carries each applied
	// result's values), and every write is a single-table statement on key
	// = ANY(ARRAY(...)) with its per-row values and conditions in
	// subqueries on the CTEs. holding keeps one result per notification
	// (two that hold it name the same attempt: the same result twice), as
	// the update applies one.
	recordDeliveries = `
WITH r AS (
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $9::text[])
		AS r(aid, nid, msg, outcome, err, retry_in, rc, kind)
),
holding AS (
	SELECT DISTINCT ON (r.nid) r.aid, r.nid, r.msg, r.outcome, r.err, r.retry_in, r.rc, r.kind
	FROM r
	JOIN LATERAL (
		SELECT n.id FROM notifications AS n
		WHERE n.id = r.nid AND n.claim_attempt_id = r.aid AND (n.status || '') = 'pending' OFFSET 0
	) AS n ON true
	ORDER BY r.nid
),
applied AS (
	UPDATE notifications AS n
	SET (status, attempts, last_error, sent_at, failed_at, updated_at, retry_due_at, claim_attempt_id, claimed_until) = (
		SELECT CASE h.outcome WHEN 'sent' THEN 'sent' WHEN 'dead' THEN 'failed' ELSE n.status END,
			n.attempts + CASE WHEN h.outcome = 'deferred' THEN 0 ELSE 1 END,
			CASE WHEN h.outcome IN ('retry', 'dead') THEN h.err ELSE n.last_error END,
			CASE WHEN h.outcome = 'sent' THEN now() ELSE n.sent_at END,
			CASE WHEN h.outcome = 'dead' THEN now() ELSE n.failed_at END,
			now(),
			CASE WHEN h.outcome = 'retry' THEN clock_timestamp() + h.retry_in * interval '1 microsecond' END,
			NULL::bigint,
			NULL::timestamptz
		FROM holding AS h WHERE h.nid = n.id AND h.aid = n.claim_attempt_id)
	WHERE n.id = ANY(ARRAY(SELECT h.nid FROM holding AS h))
		AND n.claim_attempt_id = ANY(ARRAY(SELECT h.aid FROM holding AS h WHERE h.nid = n.id))
		AND (n.status || '') = 'pending'
	RETURNING n.id, n.user_id, n.channel, n.status, n.attempts,
		COALESCE(n.sent_at, n.failed_at) AS at, COALESCE(n.last_error, '') AS last_error
),
ap AS (
	SELECT h.aid, h.msg, h.outcome, h.rc, h.err, h.kind, a.id, a.user_id, a.channel, a.status, a.attempts, a.at, a.last_error
	FROM applied AS a
	JOIN holding AS h ON h.nid = a.id
),
-- An applied deferral whose notification's previous attempt row is a
-- finished deferral of the same kind is folded into that row: one row per
-- outage, not one per probe. The previous row is the notification's last
-- one before this attempt's, in delivery_attempts_notification_idx; it is
-- finished (its outcome is set), so finished below does not touch it.
folded AS (
	SELECT ap.aid, p.id AS pid, ap.err
	FROM ap
	JOIN LATERAL (
		SELECT pa.id, pa.outcome, pa.deferral FROM delivery_attempts AS pa
		WHERE pa.notification_id = ap.id AND pa.id < ap.aid
		ORDER BY pa.id DESC LIMIT 1
	) AS p ON true
	WHERE ap.outcome = 'deferred' AND ap.kind <> '' AND p.outcome = 'deferred' AND p.deferral = ap.kind
),
fold_into AS (
	UPDATE delivery_attempts AS a
	SET (repeats, last_at, error) = (SELECT a.repeats + 1, now(), COALESCE(NULLIF(f.err, ''), a.error)
		FROM folded AS f WHERE f.pid = a.id LIMIT 1)
	WHERE a.id = ANY(ARRAY(SELECT f.pid FROM folded AS f))
),
fold_drop AS (
	DELETE FROM delivery_attempts AS a
	WHERE a.id = ANY(ARRAY(SELECT f.aid FROM folded AS f))
),
-- A result that settled its notification (sent, or failed: dead) writes
-- its status event in the same statement, so the event exists exactly
-- when the outcome does. Only applied results: a lost claim writes none.
-- A store configured without status events ($8 false) writes none at all.
-- Its at is statusAt.
status_event AS (
	INSERT INTO outbox (event_type, payload)
	SELECT CASE ap.status WHEN 'sent' THEN '` + notify.EventSent + `' ELSE '` + notify.EventFailed + `' END,
		jsonb_build_object('notification_id', ap.id::text, 'user_id', ap.user_id, 'channel', ap.channel,
			'status', ap.status, 'attempts', ap.attempts,
			'at', ` + statusAt + `,
			'last_error', ap.last_error)
	FROM ap
	WHERE ap.outcome IN ('sent', 'dead') AND $8::boolean
	ORDER BY ap.id
),
finished AS (
	UPDATE delivery_attempts AS a
	SET (finished_at, outcome, error, deferral) = (SELECT now(), r.outcome, NULLIF(r.err, ''), NULLIF(r.kind, '')
		FROM r WHERE r.aid = a.id LIMIT 1)
	WHERE a.id = ANY(ARRAY(SELECT r.aid FROM r WHERE r.aid <> ALL(ARRAY(SELECT f.aid FROM folded AS f))))
		AND a.finished_at IS NULL
),
done AS (
	INSERT INTO processed_messages (message_id, processed_at, attempt_id)
	SELECT msg, now(), aid FROM ap WHERE outcome IN ('sent', 'dead')
	ON CONFLICT (message_id) DO UPDATE
	SET processed_at = excluded.processed_at, lease_until = NULL
	WHERE processed_messages.processed_at IS NULL
),
-- (processed_at IS NULL) IS TRUE: processed_at IS NULL that
-- processed_messages_processed_idx cannot answer.
freed AS (
	DELETE FROM processed_messages AS pm
	WHERE pm.message_id = ANY(ARRAY(SELECT ap.msg FROM ap WHERE ap.outcome = 'deferred'))
		AND pm.attempt_id = ANY(ARRAY(SELECT ap.aid FROM ap WHERE ap.msg = pm.message_id AND ap.outcome = 'deferred'))
		AND (pm.processed_at IS NULL) IS TRUE AND pm.next_retry_count = 0
),
spent AS (
	UPDATE processed_messages AS pm
	SET lease_until = NULL, attempt_id = NULL,
		next_retry_count = GREATEST(pm.next_retry_count, (
			SELECT CASE WHEN ap.outcome = 'retry' THEN ap.rc + 1 ELSE 0 END FROM ap
			WHERE ap.msg = pm.message_id AND ap.aid = pm.attempt_id
				AND (ap.outcome = 'retry' OR (ap.outcome = 'deferred' AND pm.next_retry_count > 0))
			LIMIT 1))
	WHERE pm.message_id = ANY(ARRAY(SELECT ap.msg FROM ap WHERE ap.outcome IN ('retry', 'deferred')))
		AND pm.attempt_id = ANY(ARRAY(SELECT ap.aid FROM ap WHERE ap.msg = pm.message_id
			AND (ap.outcome = 'retry' OR (ap.outcome = 'deferred' AND pm.next_retry_count > 0))))
		AND (pm.processed_at IS NULL) IS TRUE
)
SELECT aid FROM ap`
)

// ClaimAndRecord records results, then answers claims, in one short
// transaction and one round trip (a pipelined batch: the lock of every
// notification named, in id order, then the record, then the claim): the
// worker's grouped bookkeeping. It implements worker.Bookkeeper.
func (s *Store) ClaimAndRecord(ctx context.Context, reqs []notify.ClaimRequest, lease time.Duration, results []notify.DeliveryResult) ([]notify.Claim, []bool, error) {
	if err := notify.CheckBookkeeping(reqs, lease, results); err != nil {
		return nil, nil, err
	}
	claims := make([]notify.Claim, len(reqs))
	recorded := make([]bool, len(results))

	var lockIDs []int64
	n := len(results)
	aids, rnids, rmsgs := make([]int64, n), make([]int64, n), make([]int64, n)
	outcomes, errs, kinds := make([]string, n), make([]string, n), make([]string, n)
	retryIn, rcs := make([]int64, n), make([]int64, n)
	for i, r := range results {
		aids[i], rnids[i], rmsgs[i] = r.Claim.AttemptID, r.Claim.NotificationID, r.Claim.MessageID
		outcomes[i], errs[i], retryIn[i] = r.Outcome, r.Error, r.RetryIn.Microseconds()
		if r.Outcome == notify.AttemptDeferred {
			kinds[i] = r.Deferral
		}
		rcs[i] = int64(r.Claim.RetryCount)
		lockIDs = append(lockIDs, r.Claim.NotificationID)
	}

	var msgs, nids []int64
	var reqRCs []int64
	at := make(map[int64]int, len(reqs)) // message id -> index in claims
	for _, i := range batch.FirstClaims(reqs, claims) {
		r := reqs[i]
		at[r.MessageID] = i
		msgs = append(msgs, r.MessageID)
		nids = append(nids, r.NotificationID)
		reqRCs = append(reqRCs, int64(r.RetryCount))
		lockIDs = append(lockIDs, r.NotificationID)
	}
	if len(lockIDs) == 0 {
		return claims, recorded, nil
	}

	b := &pgx.Batch{}
	b.Queue(keyedPlan)
	b.Queue(lockNotifications, lockIDs)
	if n > 0 {
		b.Queue(recordDeliveries, aids, rnids, rmsgs, outcomes, errs, retryIn, rcs, s.statusEvents, kinds)
	}
	if len(msgs) > 0 {
		b.Queue(claimDeliveries, msgs, nids, lease.Microseconds(), reqRCs, s.statusEvents)
	}
	// A dead-lettered result may have a fallback hop to create, in the
	// same transaction (fallBack): the batch then runs in an explicit
	// one, which the hops' statements join before the commit. Dead
	// letters are rare; every other batch stays one implicit transaction
	// and one round trip.
	var tx pgx.Tx
	var dead []int64
	for _, r := range results {
		if r.Outcome == notify.AttemptDead {
			dead = append(dead, r.Claim.NotificationID)
		}
	}
	var br pgx.BatchResults
	if len(dead) > 0 {
		var err error
		if tx, err = s.begin(ctx); err != nil {
			return nil, nil, wrap("claim and record deliveries: begin", err)
		}
		defer rollback(tx)
		br = tx.SendBatch(ctx, b)
	} else {
		br = s.sendBatch(ctx, b)
	}
	fail := func(op string, err error) ([]notify.Claim, []bool, error) {
		_ = br.Close()
		return nil, nil, wrap(op, err)
	}
	if _, err := br.Exec(); err != nil {
		return fail("claim and record deliveries: plan settings", err)
	}
	if _, err := br.Exec(); err != nil {
		return fail("claim and record deliveries: lock notifications", err)
	}
	if n > 0 {
		if err := readRecorded(br, aids, recorded); err != nil {
			return fail("record deliveries", err)
		}
	}
	if len(msgs) > 0 {
		if err := readClaims(br, at, claims, len(msgs)); err != nil {
			return fail("claim deliveries", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, nil, wrap("claim and record deliveries: commit", err)
	}
	if tx != nil {
		var applied []int64
		for i, r := range results {
			if recorded[i] && r.Outcome == notify.AttemptDead {
				applied = append(applied, r.Claim.NotificationID)
			}
		}
		if err := s.fallBack(ctx, tx, applied); err != nil {
			return nil, nil, fmt.Errorf("claim and record deliveries: %w", err)
		}
		if err := tx.Commit(ctx); err != nil {
			return nil, nil, wrap("claim and record deliveries: commit", err)
		}
		s.announce() // a hop's or a status event was written
	}
	for i, r := range results {
		if s.statusEvents && recorded[i] && (r.Outcome == notify.AttemptSent || r.Outcome == notify.AttemptDead) {
			s.announce() // a status event was written
			break
		}
	}
	return claims, recorded, nil
}

// readRecorded reads recordDeliveries' answer, the attempt ids it applied,
// into recorded (in the order of aids).
func readRecorded(br pgx.BatchResults, aids []int64, recorded []bool) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return err
	}
	applied := make(map[int64]bool, len(ids))
	for _, aid := range ids {
		applied[aid] = true
	}
	for i, aid := range aids {
		recorded[i] = applied[aid]
	}
	return nil
}

// readClaims reads claimDeliveries' answer, one row per request it was
// given (want), into claims at the index at holds for its message id.
func readClaims(br pgx.BatchResults, at map[int64]int, claims []notify.Claim, want int) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	got := 0
	for rows.Next() {
		var (
			msg    int64
			status string
			until  *time.Time // NULL unless claimed
			c      notify.Claim
		)
		if err := rows.Scan(&msg, &status, &c.AttemptID, &c.Attempt, &until); err != nil {
			return err
		}
		i := at[msg]
		c.MessageID, c.NotificationID, c.Status = msg, claims[i].NotificationID, notify.ClaimStatus(status)
		c.RetryCount = claims[i].RetryCount
		switch {
		case c.Status != notify.ClaimTaken:
			c.AttemptID, c.Attempt = 0, 0
		case until == nil:
			return fmt.Errorf("message %d claimed without a lease", msg)
		default:
			c.Until = *until
		}
		claims[i] = c
		got++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%d answers to %d requests", got, want)
	}
	return nil
}

// statusAt is a status event's at, from ap.at (the notification's sent_at
// or failed_at), as the API writes times: Go's RFC 3339 in UTC with Z, the
// fraction's trailing zeros dropped. Never to_jsonb of the timestamptz,
// which follows the session's TimeZone ("+05:30", or "+00:00" in UTC):
// the store sets no session zone (a PgBouncer in transaction mode would
// not keep one), so the database's own may be anything.
const statusAt = `rtrim(rtrim(to_char(ap.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US'), '0'), '.') || 'Z'`
