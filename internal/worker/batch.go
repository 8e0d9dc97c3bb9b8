package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// batcher groups the calls of concurrent deliveries into one store call
// (group commit): a call runs at once when none is running; calls made
// while one runs wait and go together in the next. A busy worker so spends
// one transaction on many deliveries, and an idle one adds no delay.
//
// A call runs on a context of its own, bounded by timeout and not by its
// callers': a claim taken must come back to its caller to be recorded or
// released, and a send that happened must be recorded.
type batcher[Q, R any] struct {
	run     func(ctx context.Context, qs []Q) ([]R, error)
	max     int
	timeout time.Duration

	mu      sync.Mutex
	queue   []*batchCall[Q, R]
	running bool
}

type batchCall[Q, R any] struct {
	q    Q
	r    R
	err  error
	done chan struct{}
}

// do queues q and returns its result once its group has run.
func (b *batcher[Q, R]) do(q Q) (R, error) {
	c := &batchCall[Q, R]{q: q, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := !b.running
	b.running = true
	b.mu.Unlock()
	if lead && b.flush() {
		// Calls queued meanwhile go next, without holding up this caller.
		go func() {
			for b.flush() {
			}
		}()
	}
	<-c.done
	return c.r, c.err
}

// flush runs one group and reports whether more calls are queued (the
// caller keeps flushing); otherwise it marks the batcher idle.
func (b *batcher[Q, R]) flush() bool {
	b.mu.Lock()
	n := min(len(b.queue), b.max)
	group := make([]*batchCall[Q, R], n)
	copy(group, b.queue)
	b.queue = append(b.queue[:0], b.queue[n:]...)
	b.mu.Unlock()

	qs := make([]Q, n)
	for i, c := range group {
		qs[i] = c.q
	}
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	rs, err := b.run(ctx, qs)
	cancel()
	if err == nil && len(rs) != n {
		err = fmt.Errorf("store answered %d of %d", len(rs), n)
	}
	for i, c := range group {
		if err != nil {
			c.err = err
		} else {
			c.r = rs[i]
		}
		close(c.done)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) > 0 {
		return true
	}
	b.running = false
	return false
}

// bookOp is one delivery's bookkeeping: a claim to take or a result to
// record. Claims and records share one group, so that a busy worker spends
// one transaction on every delivery that started or finished while the
// previous one ran.
type bookOp struct {
	claim  *notify.ClaimRequest
	result *notify.DeliveryResult
}

type bookResult struct {
	claim    notify.Claim
	recorded bool
}

// bookkeeping runs a group of bookOps as one ClaimAndRecord.
func bookkeeping(store Bookkeeper, lease time.Duration) func(context.Context, []bookOp) ([]bookResult, error) {
	return func(ctx context.Context, ops []bookOp) ([]bookResult, error) {
		var (
			reqs    []notify.ClaimRequest
			results []notify.DeliveryResult
			where   = make([]int, len(ops)) // index in reqs or results
		)
		for i, op := range ops {
			if op.claim != nil {
				where[i] = len(reqs)
				reqs = append(reqs, *op.claim)
			} else {
				where[i] = len(results)
				results = append(results, *op.result)
			}
		}
		claims, recorded, err := store.ClaimAndRecord(ctx, reqs, lease, results)
		if err != nil {
			return nil, err
		}
		if len(claims) != len(reqs) || len(recorded) != len(results) {
			return nil, fmt.Errorf("store answered %d of %d claims and %d of %d records", len(claims), len(reqs), len(recorded), len(results))
		}
		out := make([]bookResult, len(ops))
		for i, op := range ops {
			if op.claim != nil {
				out[i].claim = claims[where[i]]
			} else {
				out[i].recorded = recorded[where[i]]
			}
		}
		return out, nil
	}
}

// claim takes the claim of a delivery of msg for notification nid, in the
// next group. The request carries msg's retry count: the store refuses a
// stale copy, one whose retry was recorded already.
func (w *Worker) claim(msg notify.Message, nid int64) (notify.Claim, error) {
	r, err := w.books.do(bookOp{claim: &notify.ClaimRequest{MessageID: msg.ID, NotificationID: nid, RetryCount: msg.RetryCount}})
	if err != nil {
		return notify.Claim{}, fmt.Errorf("claim: %w", err)
	}
	return r.claim, nil
}

// record records a send's result, in the next group.
func (w *Worker) record(res notify.DeliveryResult) (bool, error) {
	r, err := w.books.do(bookOp{result: &res})
	if err != nil {
		return false, fmt.Errorf("record %s: %w", res.Outcome, err)
	}
	return r.recorded, nil
}
