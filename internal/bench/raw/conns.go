package raw

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// countConns counts the connections to the current database, but the
// sampler's own.
const countConns = `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`

// SampleConns samples, every period until stop is called, how many
// connections the database of dbURL has open (pg_stat_activity, the
// sampler's own left out), and stop returns the most it saw: what herald's
// pools held at once, idle connections included.
func SampleConns(ctx context.Context, dbURL string, period time.Duration) (stop func() (int64, error), err error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connection sampler: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		wg      sync.WaitGroup
		most    int64
		lastErr error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			var n int64
			if err := conn.QueryRow(ctx, countConns).Scan(&n); err != nil {
				if ctx.Err() == nil {
					lastErr = err
				}
				return
			}
			most = max(most, n)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() (int64, error) {
		cancel()
		wg.Wait()
		_ = conn.Close(context.Background())
		return most, lastErr
	}, nil
}
