package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Ceiling runs op n times from c goroutines at once (closed loop) and
// returns the completed operations per second. It stops at the first error
// and returns it. The raw ceilings use it: the bare create transaction
// without HTTP is what herald's API could at best reach on the same
// database.
func Ceiling(ctx context.Context, n, c int, op func(ctx context.Context, i int) error) (float64, error) {
	if n < 1 || c < 1 {
		return 0, fmt.Errorf("ceiling: n and c must be at least 1, got %d and %d", n, c)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next    atomic.Int64
		done    atomic.Int64
		errOnce sync.Once
		first   error
		wg      sync.WaitGroup
	)
	start := time.Now()
	for range c {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := op(ctx, i); err != nil {
					errOnce.Do(func() {
						first = err
						cancel()
					})
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if first != nil {
		return 0, first
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return PerSecond(int(done.Load()), elapsed), nil
}
