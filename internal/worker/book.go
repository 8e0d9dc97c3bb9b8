package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// maxBookQueue bounds the destination reports waiting to be written; past
// it a report is dropped (the next failure of its destination reports
// again).
const maxBookQueue = 10000

// bookRefresh is how often a worker reads the disabled destinations again
// (an operator's enable takes effect within it).
const bookRefresh = 10 * time.Second

// destBook writes the gates' news to the persisted record of destinations
// (DestinationBook), off the deliveries' path: a failing destination's
// record keeps its first failure's time across restarts and workers, and
// one failing for longer than disableAfter is disabled. It also keeps the
// disabled destinations, read again every bookRefresh, for admission.
type destBook struct {
	store        DestinationBook
	disableAfter time.Duration // 0: never
	log          *slog.Logger

	mu      sync.Mutex
	queue   map[string]bookReport
	wake    chan struct{}
	dropped int

	// confirmed holds the keys this process has seen take a send, each
	// reported up once (see sent). Cleared when it reaches maxConfirmed.
	confirmed  sync.Map
	nConfirmed atomic.Int64

	disabled atomic.Pointer[map[string]bool]
}

type bookReport struct {
	channel, reason string
	up              bool
	at              time.Time
}

func newDestBook(store DestinationBook, disableAfter time.Duration, log *slog.Logger) *destBook {
	b := &destBook{store: store, disableAfter: disableAfter, log: log, queue: make(map[string]bookReport), wake: make(chan struct{}, 1)}
	b.disabled.Store(&map[string]bool{})
	return b
}

// failing notes that key's provider failed with reason.
func (b *destBook) failing(channel, key, reason string) {
	b.put(key, bookReport{channel: channel, reason: reason, at: time.Now()})
}

// up notes that key takes sends again.
func (b *destBook) up(key string) { b.put(key, bookReport{up: true, at: time.Now()}) }

// maxConfirmed bounds the keys sent remembers; past it they are forgotten
// and each reports up once more at its next success (a DELETE that
// usually finds no row).
const maxConfirmed = 100_000

// sent notes that key took a send. The first time this process sees that
// for a key, it reports key up, even though its gate never saw it fail: a
// failing record may be left by another process (one killed before it saw
// the destination come back) or by an up report that could not be
// written. Left there, it would keep the reconciler away from the
// destination's notifications for good (reconcile skips a failing
// destination's: their events are parked in the broker), so one whose
// event a purge took would stay pending.
func (b *destBook) sent(key string) {
	if b == nil || key == "" {
		return
	}
	if _, seen := b.confirmed.LoadOrStore(key, struct{}{}); seen {
		return
	}
	if b.nConfirmed.Add(1) > maxConfirmed {
		b.confirmed.Clear()
		b.nConfirmed.Store(0)
	}
	b.up(key)
}

func (b *destBook) put(key string, r bookReport) {
	if b == nil || key == "" {
		return
	}
	b.mu.Lock()
	if _, ok := b.queue[key]; !ok && len(b.queue) >= maxBookQueue {
		b.dropped++
		b.mu.Unlock()
		return
	}
	b.queue[key] = r
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// requeue puts r back for key unless a newer report of key is queued.
func (b *destBook) requeue(key string, r bookReport) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, newer := b.queue[key]; !newer {
		b.queue[key] = r
	}
}

// isDisabled reports whether key is disabled, as last read.
func (b *destBook) isDisabled(key string) bool {
	if b == nil {
		return false
	}
	return (*b.disabled.Load())[key]
}

// run writes the reports and refreshes the disabled destinations until ctx
// ends.
func (b *destBook) run(ctx context.Context) {
	t := time.NewTicker(bookRefresh)
	defer t.Stop()
	b.refresh(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.wake:
			b.flush(ctx)
		case <-t.C:
			b.flush(ctx)
			b.refresh(ctx)
		}
	}
}

func (b *destBook) flush(ctx context.Context) {
	b.mu.Lock()
	queue, dropped := b.queue, b.dropped
	b.queue, b.dropped = make(map[string]bookReport), 0
	b.mu.Unlock()
	if dropped > 0 {
		b.log.Warn("destination reports dropped: too many at once; the next failure of each reports again", "dropped", dropped)
	}
	disabledAny := false
	for key, r := range queue {
		cctx, cancel := context.WithTimeout(ctx, storeTimeout)
		if err := b.write(cctx, key, r, &disabledAny); err != nil && ctx.Err() == nil {
			// Kept for the next flush (the next report or bookRefresh),
			// unless a newer report of key came meanwhile: a lost up
			// would leave the record failing.
			b.log.Warn("destination record not written; trying again", "destination", key, "err", err)
			b.requeue(key, r)
		}
		cancel()
	}
	if disabledAny {
		b.refresh(ctx)
	}
}

func (b *destBook) write(ctx context.Context, key string, r bookReport, disabledAny *bool) error {
	if r.up {
		return b.store.DestinationUp(ctx, key)
	}
	rec, err := b.store.DestinationFailing(ctx, r.channel, key, r.reason, r.at)
	if err != nil {
		return err
	}
	if b.disableAfter <= 0 || rec.State != "failing" || r.at.Sub(rec.Since) < b.disableAfter {
		return nil
	}
	reason := fmt.Sprintf("destination %s disabled: failing since %s, longer than HERALD_DESTINATION_DISABLE_AFTER (%s); last: %s; enable it with herald destinations enable %s",
		key, rec.Since.UTC().Format(time.RFC3339), b.disableAfter, r.reason, key)
	ok, err := b.store.DisableDestination(ctx, key, reason)
	if err != nil {
		return err
	}
	if ok {
		*disabledAny = true
		b.log.Error("destination disabled: its pending notifications are dead-lettered", "destination", key, "channel", r.channel,
			"failing_since", rec.Since, "reason", r.reason)
	}
	return nil
}

func (b *destBook) refresh(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	keys, err := b.store.DisabledDestinations(cctx)
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("disabled destinations not read; the last known stand", "err", err)
		}
		return
	}
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	b.disabled.Store(&m)
}
