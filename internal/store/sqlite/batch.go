package sqlite

import (
	"context"
	"fmt"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/batch"
)

// CreateBatch writes the creates of nns in one transaction on the write
// connection, each with a single create's statements (createIn), in their
// order, and one synced commit for all (see beginDurable). A known
// idempotency key replays or conflicts, within the batch too (a key given
// twice answers the first create again, or notify.ErrConflict); any other
// failure, and a debug fault on any request, rolls the whole batch back.
// See api.Notifications.
func (s *Store) CreateBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	out, err := s.createBatch(ctx, nns)
	if err != nil {
		return nil, fmt.Errorf("create batch: %w", err)
	}
	return out, nil
}

func (s *Store) createBatch(ctx context.Context, nns []notify.NewNotification) ([]notify.BatchResult, error) {
	select {
	case <-s.closing:
		return nil, errClosed
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, groupTimeout)
	defer cancel()
	// One batch at a time waits for the write connection. A batch holds
	// it for a thousand rows, and database/sql hands a freed connection
	// to a waiter picked at random: with every client of a broadcast
	// waiting on it, a worker's claim or record (a high-priority
	// notification's among them) would wait behind several batches
	// instead of one. Batches commit one after another all the same.
	select {
	case s.batchSlot <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("begin: %w", classify(ctx.Err()))
	case <-s.closing:
		return nil, errClosed
	}
	defer func() { <-s.batchSlot }()
	tx, release, err := s.beginDurable(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", classify(err))
	}
	defer release()
	defer func() { _ = tx.Rollback() }() // after the commit: nothing to undo
	t := now()
	out := make([]notify.BatchResult, len(nns))
	written := false
	for i, nn := range nns {
		c, err := s.createIn(ctx, tx, nn, t)
		w, err := batch.PutCreated(&out[i], c, err)
		if err != nil {
			return nil, err
		}
		written = written || w
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("commit: %w", classify(err))
	}
	if written {
		s.hub.Wake()
	}
	return out, nil
}
