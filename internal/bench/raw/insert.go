package raw

import (
	"context"
	"fmt"
	"math"

	"github.com/heraldhq/herald/internal/bench"
	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/store/postgres"
	"github.com/heraldhq/herald/internal/store/sqlite"
)

// InsertOptions shapes a raw insert ceiling: the bulk creates a broadcast
// makes, without HTTP.
type InsertOptions struct {
	// N is the number of notifications. Required.
	N int
	// Batch is the notifications per statement (per transaction).
	// Required.
	Batch int
	// Clients is the number of concurrent clients (PostgreSQL; SQLite has
	// one writer). Required.
	Clients int
}

func (o InsertOptions) validate() error {
	if o.N < 1 || o.Batch < 1 || o.Clients < 1 || o.Clients > math.MaxInt32 {
		return fmt.Errorf("raw insert: n, batch and clients must be at least 1, got %d, %d and %d", o.N, o.Batch, o.Clients)
	}
	return nil
}

// groups runs insert for each group of o.Batch notifications (the last
// one shorter) from o.Clients goroutines and returns notifications per
// second.
func (o InsertOptions) groups(ctx context.Context, insert func(ctx context.Context, nns []notify.NewNotification) error) (float64, error) {
	ops := (o.N + o.Batch - 1) / o.Batch
	perOp, err := bench.Ceiling(ctx, ops, min(o.Clients, ops), func(ctx context.Context, g int) error {
		first := g * o.Batch
		nns := make([]notify.NewNotification, min(o.Batch, o.N-first))
		for j := range nns {
			nns[j] = newNotification(first + j)
		}
		return insert(ctx, nns)
	})
	if err != nil {
		return 0, err
	}
	return perOp * float64(o.N) / float64(ops), nil
}

// PostgresInsert measures notifications inserted per second on the
// scratch database at dbURL with the store's own multi-row statement
// (postgres.CreateGroup: every notification with its outbox event), o.Batch
// to a statement, from o.Clients connections at once, in a schema of its
// own dropped afterwards: what POST /notifications/batch could at best
// reach on the same database.
func PostgresInsert(ctx context.Context, dbURL string, o InsertOptions) (float64, error) {
	if err := o.validate(); err != nil {
		return 0, err
	}
	pool, done, err := scratchPool(ctx, dbURL, o.Clients)
	if err != nil {
		return 0, fmt.Errorf("raw insert: %w", err)
	}
	defer done()
	return o.groups(ctx, func(ctx context.Context, nns []notify.NewNotification) error {
		if _, err := postgres.CreateGroup(ctx, pool, nns); err != nil {
			return fmt.Errorf("raw insert: %w", err)
		}
		return nil
	})
}

// SQLiteInsert measures notifications inserted per second into a scratch
// SQLite file beside path by the store's CreateBatch, o.Batch to a
// transaction: SQLite is in process, so the store's batch is the bare
// multi-row insert. The scratch file is removed afterwards.
func SQLiteInsert(ctx context.Context, path string, o InsertOptions) (float64, error) {
	if err := o.validate(); err != nil {
		return 0, err
	}
	return onScratchSQLite(ctx, path, "raw insert", func(s *sqlite.Store) (float64, error) {
		return o.groups(ctx, func(ctx context.Context, nns []notify.NewNotification) error {
			if _, err := s.CreateBatch(ctx, nns); err != nil {
				return fmt.Errorf("raw insert: %w", err)
			}
			return nil
		})
	})
}
