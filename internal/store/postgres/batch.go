package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/batch"
)

// batchTries bounds how often a batch is run again after a conflict with
// another transaction that wrote nothing of it: a deadlock (two batches
// that take the same idempotency keys in opposite orders wait on each
// other's rows, and PostgreSQL ends one), or a key found free by the
// batch's check and taken by a concurrent create before its insert (a
// unique violation). The run again finds the key taken and replays.
const batchTries = 3

// selectTakenKeys returns which of the pairs ($1 user ids, $2 keys) a
// notification holds, whatever its age: one index lookup each.
const selectTakenKeys = `
SELECT k.user_id, k.key FROM unnest($1::text[], $2::text[]) AS k(user_id, key)
WHERE EXISTS (SELECT 1 FROM notifications AS n WHERE n.user_id = k.user_id AND n.idempotency_key = k.key)`

// CreateBatch writes the creates of nns in one transaction, with the
// statements of a single create. A request without an idempotency key, or
// with a key no notification holds (one lookup for the batch's keys finds
// which) and not given earlier in the batch, and not timed (send_at,
// expires_at), and plain (nothing resolved: notify.NewNotification.Plain),
// goes in a multi-row statement
// (CreateGroup's, the group committer's), one for each run of such
// requests; any other request runs CreateInTx, a single keyed create's
// statements: a key already used replays or conflicts, within the batch
// too (a key given twice answers the first create again, or
// notify.ErrConflict). Ids follow the requests' order. Any failure but a
// conflict, and a debug fault on any request, rolls the whole batch back.
// See api.Notifications.
func (s *Store) CreateBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	for try := 1; ; try++ {
		out, err := s.createBatch(ctx, nns)
		var pgErr *pgconn.PgError
		if err != nil && try < batchTries && errors.As(err, &pgErr) && (pgErr.Code == "40P01" || pgErr.Code == "23505") {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create batch: %w", err)
		}
		return out, nil
	}
}

type userKey struct{ user, key string }

// fresh reports, for each request of nns, whether it can go in a
// multi-row statement: no key, or a key that no notification holds and no
// earlier request of the batch gives.
func fresh(ctx context.Context, tx pgx.Tx, nns []notify.NewNotification) ([]bool, error) {
	var users, keys []string
	for _, nn := range nns {
		if nn.IdempotencyKey != "" {
			users, keys = append(users, nn.Request.UserID), append(keys, nn.IdempotencyKey)
		}
	}
	taken := map[userKey]bool{}
	if len(keys) > 0 {
		rows, err := tx.Query(ctx, selectTakenKeys, users, keys)
		if err != nil {
			return nil, wrap("read idempotency keys", err)
		}
		held, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (userKey, error) {
			var k userKey
			err := r.Scan(&k.user, &k.key)
			return k, err
		})
		if err != nil {
			return nil, wrap("read idempotency keys", err)
		}
		for _, k := range held {
			taken[k] = true
		}
	}
	out := make([]bool, len(nns))
	for i, nn := range nns {
		// A timed request (send_at, expires_at) runs CreateInTx: the
		// multi-row statement writes neither column (see Create); nor
		// does it check a recipient's revision or a preference, or write
		// a template's parts (notify.NewNotification.Plain).
		timed := nn.Request.Timed() || !nn.Plain()
		if nn.IdempotencyKey == "" {
			out[i] = !timed
			continue
		}
		k := userKey{nn.Request.UserID, nn.IdempotencyKey}
		out[i] = !taken[k] && !timed
		taken[k] = true // a later request with the key replays this one
	}
	return out, nil
}

func (s *Store) createBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, wrap("begin", err)
	}
	defer rollback(tx)
	group, err := fresh(ctx, tx, nns)
	if err != nil {
		return nil, err
	}
	out := make([]notify.BatchResult, len(nns))
	written, fault := false, false
	for i := 0; i < len(nns); {
		if !group[i] {
			fault = fault || nns[i].Fault == notify.FaultAfterOutboxInsert
			c, err := createInTx(ctx, tx, nns[i], s.statusEvents)
			w, err := batch.PutCreated(&out[i], c, err)
			if err != nil {
				return nil, err
			}
			written = written || w
			i++
			continue
		}
		j := i
		for j < len(nns) && group[j] {
			fault = fault || nns[j].Fault == notify.FaultAfterOutboxInsert
			j++
		}
		cs, err := CreateGroup(ctx, tx, nns[i:j])
		if err != nil {
			return nil, err
		}
		for k, c := range cs {
			out[i+k].Created = c
		}
		written = true
		i = j
	}
	if fault {
		return nil, notify.ErrInjectedFault
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, wrap("commit", err)
	}
	if written {
		s.announce()
	}
	return out, nil
}
