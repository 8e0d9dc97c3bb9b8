// Package reconcile makes the database the record (guarantee 6): a message
// lost outside it (a queue purged or deleted by hand, a retry dropped by the
// broker's at-most-once dead-lettering) must not leave a notification
// pending for ever. Every Interval, the Reconciler asks the store for the
// pending notifications that have had no event in flight for longer than
// After and gives each a fresh notification.requested event.
//
// A reconciled event and a late copy of the lost one carry different message
// ids; the worker's claim holds the notification, so at most one of them is
// sent, and none once the notification is sent.
package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Reannouncer finds and re-announces stale pending notifications. The stores
// implement it.
type Reannouncer interface {
	// Reconcile gives up to limit pending notifications that have no
	// unprocessed outbox row and whose last change (or the due time of
	// their scheduled retry, when later) is at least after ago a fresh
	// notification.requested outbox event, and returns their ids. "Ago"
	// is on the database's clock: the cut-off is never an app's time
	// compared with timestamps another machine wrote. A negative after
	// reaches into the future (retries due within -after). One reconciler
	// runs at a time across processes (PostgreSQL: an advisory lock; a
	// second caller meanwhile finds nothing to do).
	Reconcile(ctx context.Context, after time.Duration, limit int) ([]int64, error)
}

// Config tunes a Reconciler.
type Config struct {
	// After is how long a pending notification may go with no event in
	// flight before it gets a fresh one (HERALD_RECONCILE_AFTER). Required:
	// it must be positive.
	After time.Duration
	// Interval is the pause between passes. Default: After/4, at least
	// 100ms and at most one minute.
	Interval time.Duration
	// Batch caps the notifications one statement reconciles; a pass
	// repeats until a batch comes back short. Default 100.
	Batch int
	// Logger receives one record per reconciled notification. Default:
	// discard.
	Logger *slog.Logger
	// Registerer, when set, receives herald_reconciled_total.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	c.Interval = cmp.Or(c.Interval, min(max(c.After/4, 100*time.Millisecond), time.Minute))
	c.Batch = cmp.Or(c.Batch, 100)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

func (c Config) validate() error {
	switch {
	case c.After <= 0:
		return fmt.Errorf("reconcile after must be positive, got %s", c.After)
	case c.Interval < 0:
		return fmt.Errorf("reconcile interval must not be negative, got %s", c.Interval)
	case c.Batch < 0:
		return fmt.Errorf("reconcile batch must not be negative, got %d", c.Batch)
	}
	return nil
}

// Reconciler runs reconcile passes.
type Reconciler struct {
	store      Reannouncer
	cfg        Config
	reconciled prometheus.Counter
}

// New returns a Reconciler.
func New(store Reannouncer, cfg Config) (*Reconciler, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	r := &Reconciler{store: store, cfg: cfg, reconciled: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "herald_reconciled_total",
		Help: "Pending notifications that had no event in flight for HERALD_RECONCILE_AFTER and were given a fresh one.",
	})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.reconciled); err != nil {
			return nil, fmt.Errorf("register reconcile metrics: %w", err)
		}
	}
	return r, nil
}

// Run runs a pass every Interval until ctx ends. A failed pass is logged
// and tried again at the next tick: the store may be down for a while.
func (r *Reconciler) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		if _, err := r.Once(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("reconcile pass failed; trying again", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Once runs one pass and returns the ids it reconciled.
func (r *Reconciler) Once(ctx context.Context) ([]int64, error) {
	var all []int64
	for {
		ids, err := r.store.Reconcile(ctx, r.cfg.After, r.cfg.Batch)
		if err != nil {
			return all, fmt.Errorf("reconcile: %w", err)
		}
		for _, id := range ids {
			r.reconciled.Inc()
			r.cfg.Logger.Warn("reconciled: a pending notification had no event in flight; a fresh event was written",
				"notification_id", id, "after", r.cfg.After)
		}
		all = append(all, ids...)
		if len(ids) < r.cfg.Batch {
			return all, nil
		}
	}
}
