package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/heraldhq/herald/internal/notify"
)

// batchTries bounds how often a batch that lost a deadlock is run again.
// Two batches that take the same idempotency keys in opposite orders wait
// on each other's rows; PostgreSQL ends one of them, which wrote nothing,
// so running it again is safe.
const batchTries = 3

// CreateBatch writes the creates of nns in one transaction, with the
// statements of a single create: each run of requests without an
// idempotency key is one multi-row statement (CreateGroup's, the group
// committer's), each request with a key runs CreateInTx (a key already
// used replays or conflicts, within the batch too: a key given twice
// answers the first create again, or notify.ErrConflict). Ids follow the
// requests' order. Any failure but a conflict, and a debug fault on any
// request, rolls the whole batch back. See api.Store.
func (s *Store) CreateBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	for try := 1; ; try++ {
		out, err := s.createBatch(ctx, nns)
		var pgErr *pgconn.PgError
		if err != nil && try < batchTries && errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create batch: %w", err)
		}
		return out, nil
	}
}

func (s *Store) createBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, wrap("begin", err)
	}
	defer rollback(tx)
	out := make([]notify.BatchResult, len(nns))
	written, fault := false, false
	for i := 0; i < len(nns); {
		fault = fault || nns[i].Fault == notify.FaultAfterOutboxInsert
		if nns[i].IdempotencyKey != "" {
			c, err := CreateInTx(ctx, tx, nns[i])
			switch {
			case errors.Is(err, notify.ErrConflict):
				out[i].Err = notify.ErrConflict
			case err != nil:
				return nil, err
			default:
				out[i].Created = c
				written = written || !c.Replayed
			}
			i++
			continue
		}
		j := i + 1
		for j < len(nns) && nns[j].IdempotencyKey == "" {
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
