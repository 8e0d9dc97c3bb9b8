package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldhq/herald/internal/notify"
)

// selectDeadLetters walks notifications_failed_idx newest first; every
// filter is optional (NULL or empty switches it off), so that one constant
// statement, prepared once, serves every combination.
const selectDeadLetters = `
SELECT ` + notificationColumns + `
FROM notifications
WHERE status = 'failed'
  AND ($1::bigint[] IS NULL OR id = ANY($1::bigint[]))
  AND ($2::timestamptz IS NULL OR failed_at >= $2::timestamptz)
  AND ($3::text = '' OR strpos(lower(COALESCE(last_error, '')), lower($3::text)) > 0)
  AND ($5::timestamptz IS NULL OR (failed_at, id) < ($5::timestamptz, $6::bigint))
ORDER BY failed_at DESC, id DESC
LIMIT $4::bigint`

// DeadLetters returns the failed notifications that match f, newest failure
// first (failed_at, then id, descending), resuming after f.After when it is
// set. ErrorContains compares with
// lower() on both sides: ASCII always folds, other letters as the
// database's collation decides.
func (s *Store) DeadLetters(ctx context.Context, f notify.DeadLetterFilter) ([]notify.Notification, error) {
	if f.Limit < 0 {
		return nil, fmt.Errorf("list dead letters: limit must not be negative, got %d", f.Limit)
	}
	var (
		ids   []int64
		since *time.Time
		limit *int64
	)
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	if !f.Since.IsZero() {
		since = &f.Since
	}
	if f.Limit > 0 {
		l := int64(f.Limit)
		limit = &l
	}
	var afterAt *time.Time
	var afterID int64
	if f.After != nil {
		afterAt, afterID = &f.After.FailedAt, f.After.ID
	}
	rows, err := s.pool.Query(ctx, selectDeadLetters, ids, since, f.ErrorContains, limit, afterAt, afterID)
	if err != nil {
		return nil, wrap("list dead letters", err)
	}
	// AppendRows on nil, not CollectRows: no row gives nil.
	out, err := pgx.AppendRows([]notify.Notification(nil), rows, collectNotification)
	if err != nil {
		return nil, wrap("list dead letters", err)
	}
	return out, nil
}

const (
	// redriveNotification is the compare-and-set that makes a redrive
	// safe: only a failed notification goes back to pending, so one that
	// was sent (or redriven already) is never delivered again. last_error
	// describes the current state, so it is cleared until a new failure;
	// attempts keeps counting, and delivery_attempts keeps the history.
	redriveNotification = `
UPDATE notifications
SET status = 'pending', failed_at = NULL, last_error = NULL, updated_at = now()
WHERE id = $1 AND status = 'failed'
RETURNING id, user_id, channel, recipient, subject, body, priority`

	notificationExists = `SELECT EXISTS (SELECT 1 FROM notifications WHERE id = $1)`
)

// Redrive puts a dead-lettered notification back to pending and writes a
// fresh notification.requested event for it, in one transaction, and wakes
// the relays at commit. The event gets a new outbox id: the dead message's
// id stays in processed_messages, and the new delivery must not be taken for
// a duplicate of it. Redrive reports false, writing nothing, for a
// notification that is not failed (pending or sent); a missing one is
// notify.ErrNotFound.
func (s *Store) Redrive(ctx context.Context, id int64) (bool, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return false, wrap("redrive: begin", err)
	}
	defer rollback(tx)

	var (
		n    notify.Notification
		rank int16
	)
	err = tx.QueryRow(ctx, redriveNotification, id).Scan(&n.ID, &n.UserID, &n.Channel, &n.To, &n.Subject, &n.Body, &rank)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := tx.QueryRow(ctx, notificationExists, id).Scan(&exists); err != nil {
			return false, wrap(fmt.Sprintf("redrive notification %d", id), err)
		}
		if !exists {
			return false, fmt.Errorf("redrive notification %d: %w", id, notify.ErrNotFound)
		}
		return false, nil
	}
	if err != nil {
		return false, wrap(fmt.Sprintf("redrive notification %d", id), err)
	}
	payload, err := notify.RequestedPayload(n)
	if err != nil {
		return false, fmt.Errorf("redrive notification %d: %w", id, err)
	}
	if _, err := tx.Exec(ctx, insertOutbox, notify.EventRequested, payload, "", nil, rank); err != nil {
		return false, wrap(fmt.Sprintf("redrive notification %d: insert outbox", id), err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, wrap(fmt.Sprintf("redrive notification %d: commit", id), err)
	}
	s.announce()
	return true, nil
}

const (
	// pruneOutbox deletes one batch of processed rows, oldest first, from
	// outbox_processed_idx. Rows another transaction holds are skipped, not
	// waited for: the next pass takes them. On the partitioned outbox it
	// runs on the partitions retention cannot drop (see pruneOutboxFrom).
	pruneOutbox = `
DELETE FROM outbox
WHERE id IN (
	SELECT id FROM outbox
	WHERE processed_at < $1
	ORDER BY processed_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED)`

	// pruneProcessed deletes one batch of old dedup rows whose outbox row
	// is gone. While the outbox row exists its event may still be delivered
	// (unprocessed, or relayed but not yet consumed), and the dedup row is
	// what makes that delivery a duplicate.
	// A row a claim holds (processed_at NULL, a send in flight) never
	// compares below the cut, so it is never pruned.
	pruneProcessed = `
DELETE FROM processed_messages
WHERE message_id IN (
	SELECT pm.message_id FROM processed_messages AS pm
	WHERE pm.processed_at < $1
	  AND NOT EXISTS (SELECT 1 FROM outbox AS o WHERE o.id = pm.message_id)
	ORDER BY pm.processed_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED)`

	// pruneProcessedPlan goes before pruneProcessed in its transaction: the
	// NOT EXISTS must look each candidate up in the outbox's primary key.
	// Left to itself the planner answered it with a hash or merge anti-join
	// that read the whole outbox for every batch of 1,000: 13.8 s a batch,
	// 2.6 hours for one day's rows on a 10-million-row outbox, against
	// 163 s for the day with the lookups (make outbox-study).
	pruneProcessedPlan = `SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`
)

// pruneOutboxFrom is pruneOutbox on one table, a partition of the outbox.
func pruneOutboxFrom(table string) string {
	return strings.ReplaceAll(pruneOutbox, "FROM outbox", "FROM "+pgx.Identifier{table}.Sanitize())
}

// Prune removes the outbox rows processed before before (dead-lettered
// ones included: the failed notification is the lasting record, and a
// redrive writes a fresh event), then deletes the processed_messages rows
// recorded before before whose outbox row is gone. Notifications are never
// pruned.
//
// On the partitioned outbox (migration 0014) the outbox half is partition
// maintenance first: it makes the partitions of the days ahead (see
// EnsurePartitions), and detaches and drops each daily partition whose
// upper bound is at or before before and that holds no row to keep (one
// unprocessed, or processed at or after before), finalizing a detach an
// earlier pass left half done. A day's rows thus go whole, at most a day
// after the last of them passed before. Rows are then deleted one by one
// only from the partitions past before that had to stay, and from
// outbox_legacy (the outbox before the migration, dropped whole once its
// bound passes): an upgraded deployment's retention does not wait a week
// for its first drop.
//
// Rows are deleted in batches of at most batch rows, each its own short
// transaction, so that it never holds many locks nor bloats one
// transaction, until a batch comes back short. A failing step does not
// stop the next ones; on an error the result counts what was removed.
func (s *Store) Prune(ctx context.Context, before time.Time, batch int) (notify.PruneResult, error) {
	var res notify.PruneResult
	if batch < 1 {
		return res, fmt.Errorf("prune: batch must be at least 1, got %d", batch)
	}
	var errs []error
	tables, err := s.pruneOutboxPartitions(ctx, before, &res)
	if err != nil {
		errs = append(errs, fmt.Errorf("prune outbox partitions: %w", err))
	}
	for _, table := range tables {
		n, err := s.pruneBatches(ctx, "", pruneOutboxFrom(table), before, batch)
		res.Outbox += n
		if isUndefinedTable(err) {
			continue // another process's pass dropped it meanwhile
		}
		if err != nil {
			errs = append(errs, wrap("prune outbox", err))
			break
		}
	}
	res.ProcessedMessages, err = s.pruneBatches(ctx, pruneProcessedPlan, pruneProcessed, before, batch)
	if err != nil {
		errs = append(errs, wrap("prune processed messages", err))
	}
	return res, errors.Join(errs...)
}

// pruneOutboxPartitions makes the partitions ahead and drops the old ones
// (counted in res), and returns the tables whose rows the pass deletes one
// by one: the outbox itself before migration 0014, else outbox_legacy and
// the partitions past before that stayed.
func (s *Store) pruneOutboxPartitions(ctx context.Context, before time.Time, res *notify.PruneResult) ([]string, error) {
	var kind *string
	if err := s.pool.QueryRow(ctx, selectOutboxKind).Scan(&kind); err != nil {
		return nil, wrap("read the outbox", err)
	}
	if kind == nil || *kind != "p" {
		return []string{"outbox"}, nil
	}
	var errs []error
	if err := s.EnsurePartitions(ctx); err != nil {
		errs = append(errs, err)
	}
	dropped, err := s.dropOldPartitions(ctx, before)
	res.OutboxPartitions = dropped
	if err != nil {
		errs = append(errs, err)
	}
	parts, err := listPartitions(ctx, s.pool)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	var tables []string
	for _, p := range parts {
		switch {
		case p.detachPending:
		case p.from == nil:
			tables = append(tables, p.name) // outbox_legacy
		case p.to != nil && !p.to.After(before):
			// Past the cut, yet not dropped: deleted from only if it
			// stays for a row to keep, not when another process's pass
			// is about to drop it.
			var keep bool
			if err := s.pool.QueryRow(ctx, fmt.Sprintf(partitionKeeps, pgx.Identifier{p.name}.Sanitize()), before).Scan(&keep); err != nil {
				if !isUndefinedTable(err) {
					errs = append(errs, wrap("check "+p.name, err))
				}
				continue
			}
			if keep {
				tables = append(tables, p.name)
			}
		}
	}
	return tables, errors.Join(errs...)
}

// pruneBatches runs one batch delete until it deletes fewer than batch rows,
// and returns the total. plan, when set, goes before each delete in its
// implicit transaction (one round trip: a pipelined batch).
func (s *Store) pruneBatches(ctx context.Context, plan, query string, before time.Time, batch int) (int64, error) {
	var total int64
	for {
		b := &pgx.Batch{}
		if plan != "" {
			b.Queue(plan)
		}
		del := b.Queue(query, before, batch)
		var tag pgconn.CommandTag
		del.Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
		if err := s.sendBatch(ctx, b).Close(); err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// pruneCutoff is the cut-off of PruneOlderThan, on the database's clock.
const pruneCutoff = `SELECT clock_timestamp() - $1::bigint * interval '1 microsecond'`

// PruneOlderThan is Prune with the cut-off age before the database's clock,
// the clock that wrote processed_at: no app's clock is compared with it. The
// cut-off is read once, so every batch of the pass prunes up to the same
// instant.
func (s *Store) PruneOlderThan(ctx context.Context, age time.Duration, batch int) (notify.PruneResult, error) {
	if batch < 1 {
		return notify.PruneResult{}, fmt.Errorf("prune: batch must be at least 1, got %d", batch)
	}
	var before time.Time
	if err := s.pool.QueryRow(ctx, pruneCutoff, age.Microseconds()).Scan(&before); err != nil {
		return notify.PruneResult{}, wrap("prune: read the cut-off", err)
	}
	return s.Prune(ctx, before, batch)
}

// isUndefinedTable reports an error about a table that does not exist.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}
