// Package table is the broker-less transport: workers claim due outbox rows
// straight from the table, with a lease, and own their retries and dead
// letters there.
package table

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Waker tells the transport that new outbox rows were committed.
type Waker interface {
	// Subscribe returns a channel that receives a value whenever new rows
	// may have been committed; it is closed when ctx ends.
	Subscribe(ctx context.Context) <-chan struct{}
}

// Config tunes a Transport. A zero that means something is honoured (a
// retry delay of 0); only values where zero is meaningless get a default.
type Config struct {
	// Prefetch is the number of rows a worker holds at once. Zero would
	// hold nothing, so it means the default. Default 10.
	Prefetch int
	// RetryDelays are the waits before each retry in turn: a row's i-th
	// retry is due RetryDelays[i-1] after the failure, the last delay
	// repeating for the retries beyond the list. The row keeps the schedule
	// (available_at), so no delay holds anything. A zero delay makes the
	// retried row due at once, and so does an empty list. Default: empty
	// (herald's own default, HERALD_RETRY_DELAY, is 30s).
	RetryDelays []time.Duration
	// Lease is how long a claimed row stays invisible to other workers: a
	// worker that dies leaves its rows to be claimed again after it. It
	// must outlast everything the worker does with the row: its claim on
	// the message id (the send timeout plus the record), then the row's
	// settlement. A row whose lease runs out while its send still runs is
	// claimed again: the worker's claim keeps the copy from sending twice,
	// but the holder's Retry no longer matches the row, so the retry is
	// neither delayed nor counted. herald sets it from HERALD_SMTP_TIMEOUT
	// (the worker's claim lease plus 15s: 60s by default). A zero lease
	// would hand every row to every worker, so it means the default.
	// Default 15s, for callers whose sends are bounded well below it.
	Lease time.Duration
	// PollInterval is the longest idle wait between claims (retries that
	// come due, rows committed by another process without a wake-up). Zero
	// would poll the table in a busy loop, so it means the default.
	// Default 500ms.
	PollInterval time.Duration
	// Grace bounds how long in-flight deliveries may run after ctx ends.
	// Zero would cancel them mid-settlement, so it means the default.
	// Default 5s: a process stops within 10s of SIGTERM, a usual grace
	// period before a SIGKILL; what it could not settle keeps its lease.
	Grace time.Duration
	// Logger receives one record per failure streak. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Prefetch = cmp.Or(c.Prefetch, 10)
	c.Lease = cmp.Or(c.Lease, 15*time.Second)
	c.PollInterval = cmp.Or(c.PollInterval, 500*time.Millisecond)
	c.Grace = cmp.Or(c.Grace, 5*time.Second)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

func (c Config) validate() error {
	switch {
	case c.Prefetch < 1:
		return fmt.Errorf("prefetch must be at least 1, got %d", c.Prefetch)
	case slices.ContainsFunc(c.RetryDelays, func(d time.Duration) bool { return d < 0 }):
		return fmt.Errorf("retry delays must not be negative, got %v", c.RetryDelays)
	case c.Lease <= 0 || c.PollInterval <= 0 || c.Grace <= 0:
		return fmt.Errorf("lease, poll interval and grace must be positive")
	}
	return nil
}

// Transport delivers outbox rows to a worker.
type Transport struct {
	q     Queue
	waker Waker
	cfg   Config
	log   *slog.Logger
}

// New returns a Transport over q. waker may be nil; then it only polls.
func New(q Queue, waker Waker, cfg Config) (*Transport, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.RetryDelays = slices.Clone(cfg.RetryDelays)
	return &Transport{q: q, waker: waker, cfg: cfg, log: cfg.Logger}, nil
}

// Consume claims due rows and calls handle for each, at most Prefetch at
// once, until ctx ends; then it waits for the calls in flight (bounded by
// Grace) and returns nil. Rows still unsettled keep their lease and come back
// when it expires.
func (t *Transport) Consume(ctx context.Context, handle notify.Handler) error {
	var wake <-chan struct{}
	if t.waker != nil {
		wake = t.waker.Subscribe(ctx)
	}
	// In-flight calls run on a context that outlives ctx by Grace, so a
	// shutdown lets them finish and settle.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	stop := context.AfterFunc(ctx, func() {
		time.AfterFunc(t.cfg.Grace, hcancel)
	})
	defer stop()

	acks := newAcker(t.q)
	go acks.run(hctx)
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		acks.stop()
	}()
	slots := make(chan struct{}, t.cfg.Prefetch)
	freed := make(chan struct{}, 1)
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-freed:
		case _, ok := <-wake:
			if !ok {
				wake = nil
			}
		}
		// Claim for every free slot. (Waiting until half the slots were
		// free saved claim transactions but cost concurrency, and the
		// worker on PostgreSQL is bound by latency: no gain measured.)
		n := t.cfg.Prefetch - len(slots)
		if n == 0 {
			continue // a finishing call signals freed
		}
		token := newToken()
		// The claim runs on hctx: cancelled mid-query it could commit on
		// the server unseen, leaving rows leased to nobody until the lease
		// ran out. Rows claimed as the shutdown began are handed back.
		msgs, err := t.q.Claim(hctx, token, n, t.cfg.Lease)
		if ctx.Err() != nil {
			t.release(hctx, msgs, token)
			return nil
		}
		wait := t.cfg.PollInterval
		switch {
		case err != nil:
			failures++
			if failures == 1 {
				t.log.Warn("claim outbox rows failed; backing off", "err", err)
			}
			wait = backoff(failures, t.cfg.PollInterval)
		case failures > 0:
			t.log.Info("claiming recovered", "failed_claims", failures)
			failures = 0
		}
		for _, m := range msgs {
			slots <- struct{}{}
			wg.Add(1)
			go func(d *delivery) {
				defer wg.Done()
				defer func() {
					<-slots
					select {
					case freed <- struct{}{}:
					default:
					}
				}()
				handle(hctx, d)
			}(&delivery{t: t, acks: acks, msg: m, token: token})
		}
		if len(msgs) == n && err == nil {
			wait = 0 // there may be more due rows: claim again at once
		}
		timer.Reset(wait) // since Go 1.23 Reset also drops a fire not yet received
	}
}

// release hands claimed rows back unchanged, due at once, for the rows a
// shutdown leaves unhandled. A row it fails to hand back comes back when its
// lease expires.
func (t *Transport) release(ctx context.Context, msgs []notify.Message, token string) {
	for _, m := range msgs {
		if err := t.q.Reschedule(ctx, m.Key(), token, 0, "", false); err != nil {
			t.log.Warn("hand back claimed row at shutdown failed; it comes back when its lease expires",
				"message_id", m.ID, "err", err)
		}
	}
}

// delivery is one claimed row.
type delivery struct {
	t     *Transport
	acks  *acker
	msg   notify.Message
	token string
}

func (d *delivery) Message() notify.Message { return d.msg }

func (d *delivery) Ack(ctx context.Context) error {
	return d.acks.ack(ctx, d.msg.Key(), d.token)
}

func (d *delivery) Retry(ctx context.Context, reason string) error {
	return d.t.q.Reschedule(ctx, d.msg.Key(), d.token, d.t.retryDelay(d.msg.RetryCount), reason, true)
}

// retryDelay is the wait before the retry that follows retries earlier ones:
// the (retries+1)-th delay of the list, or its last.
func (t *Transport) retryDelay(retries int) time.Duration {
	if len(t.cfg.RetryDelays) == 0 {
		return 0
	}
	return t.cfg.RetryDelays[min(max(retries, 0), len(t.cfg.RetryDelays)-1)]
}

func (d *delivery) DeadLetter(ctx context.Context, reason string) error {
	return d.t.q.Finish(ctx, []notify.OutboxKey{d.msg.Key()}, d.token, reason)
}

// acker finishes acknowledged rows in groups: an Ack waits for the one
// statement that finishes every row acknowledged while the previous one ran
// (group commit), so a busy worker spends one transaction on many
// deliveries, and an idle one finishes each at once. An Ack that returned nil
// is finished.
type acker struct {
	q    Queue
	reqs chan ackReq
	quit chan struct{}
	done chan struct{}
}

type ackReq struct {
	row   notify.OutboxKey
	token string
	errc  chan error
}

func newAcker(q Queue) *acker {
	return &acker{q: q, reqs: make(chan ackReq), quit: make(chan struct{}), done: make(chan struct{})}
}

// run finishes acknowledged rows until stop; ctx bounds each statement.
func (a *acker) run(ctx context.Context) {
	defer close(a.done)
	for {
		var batch []ackReq
		select {
		case <-a.quit:
			return
		case r := <-a.reqs:
			batch = append(batch, r)
		}
	more:
		for {
			select {
			case r := <-a.reqs:
				batch = append(batch, r)
			default:
				break more
			}
		}
		byToken := map[string][]notify.OutboxKey{}
		for _, r := range batch {
			byToken[r.token] = append(byToken[r.token], r.row)
		}
		errs := make(map[string]error, len(byToken))
		for token, rows := range byToken {
			errs[token] = a.q.Finish(ctx, rows, token, "")
		}
		for _, r := range batch {
			r.errc <- errs[r.token]
		}
	}
}

// ack queues one row and waits until its group is finished.
func (a *acker) ack(ctx context.Context, row notify.OutboxKey, token string) error {
	r := ackReq{row: row, token: token, errc: make(chan error, 1)}
	select {
	case a.reqs <- r:
	case <-a.done:
		return errors.New("acknowledge outbox row: the transport has stopped")
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop ends run once no Ack is pending (the caller has waited for every
// delivery).
func (a *acker) stop() {
	close(a.quit)
	<-a.done
}

// Release hands the row back, due after after, with its retry count: it is
// not claimed again before then, and holds no lease meanwhile.
func (d *delivery) Release(ctx context.Context, after time.Duration) error {
	return d.t.q.Reschedule(ctx, d.msg.Key(), d.token, max(after, 0), "", false)
}

func newToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func backoff(failures int, base time.Duration) time.Duration {
	d := base
	for i := 1; i < failures && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}
