package raw

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// countConns counts the connections to the database $1.
const countConns = `SELECT count(*) FROM pg_stat_activity WHERE datname = $1`

// SampleConns samples, every period until stop is called, how many
// connections the database named database has open (pg_stat_activity), and
// stop returns the most it saw: what herald's pools held at once, idle
// connections included. It reads through a connection to serverURL, the
// server's database the scratch database was made from (it only reads
// pg_stat_activity there), so that its own reads are no transactions of the
// database it samples (see WatchActivity).
func SampleConns(ctx context.Context, serverURL, database string, period time.Duration) (stop func() (int64, error), err error) {
	conn, err := pgx.Connect(ctx, serverURL)
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
			if err := conn.QueryRow(ctx, countConns, database).Scan(&n); err != nil {
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
