// Package worker applies deliveries: it sends each notification's email at
// most once per message id, retries transient failures and dead-letters the
// rest.
package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/internal/notify"
)

// Config tunes a Worker. A zero that means something is honoured (no
// retries); only values where zero is meaningless get a default.
type Config struct {
	// From is the email From address; the Message-ID domain is its domain.
	// Default "herald@localhost".
	From string
	// MaxRetries is the number of retries after the first attempt; a
	// delivery that fails after the last one is dead-lettered. Zero means
	// no retries: the first failure is dead-lettered. Default 0 (herald's
	// own default, HERALD_MAX_RETRIES, is 5).
	MaxRetries int
	// StoreBackoff caps the wait before a delivery is handed back when the
	// store is unreachable. Zero would redeliver in a hot loop during a
	// store outage, so it means the default. Default 5s.
	StoreBackoff time.Duration
	// Logger receives one record per failed delivery. Default: discard.
	Logger *slog.Logger
	// Registerer, when set, receives the worker's metrics. Default: none.
	Registerer prometheus.Registerer
	// Crash, when set, is called at the named points of a delivery
	// ("after-send", "after-commit"); it exists for fault-injection runs
	// and is only wired when HERALD_DEBUG_FAULTS=1. Default: none.
	Crash func(point string)
}

func (c Config) withDefaults() Config {
	if c.From == "" {
		c.From = "herald@localhost"
	}
	if c.StoreBackoff == 0 {
		c.StoreBackoff = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Crash == nil {
		c.Crash = func(string) {}
	}
	return c
}

func (c Config) validate() error {
	if c.MaxRetries < 0 {
		return fmt.Errorf("max retries must not be negative, got %d", c.MaxRetries)
	}
	if c.StoreBackoff < 0 {
		return fmt.Errorf("store backoff must not be negative, got %s", c.StoreBackoff)
	}
	if _, err := notify.ParseAddress(c.From); err != nil {
		return fmt.Errorf("from address %q: %w", c.From, err)
	}
	return nil
}

// Worker consumes deliveries from a Source and applies them.
type Worker struct {
	src     Source
	store   Store
	sender  Sender
	cfg     Config
	log     *slog.Logger
	metrics metrics
}

type metrics struct {
	deliveries *prometheus.CounterVec
	latency    prometheus.Histogram
}

// New returns a Worker.
func New(src Source, store Store, sender Sender, cfg Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	w := &Worker{src: src, store: store, sender: sender, cfg: cfg, log: cfg.Logger}
	w.metrics.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "herald_worker_deliveries_total",
		Help: "Deliveries handled by the worker, by outcome.",
	}, []string{"outcome"})
	w.metrics.latency = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "herald_delivery_seconds",
		Help:    "Time from a notification's create to its email being sent.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
	})
	for _, o := range []notify.Outcome{notify.OutcomeSent, notify.OutcomeRetried, notify.OutcomeDead, notify.OutcomeDuplicate} {
		w.metrics.deliveries.WithLabelValues(string(o))
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{w.metrics.deliveries, w.metrics.latency} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register worker metrics: %w", err)
			}
		}
	}
	return w, nil
}

// Run consumes until ctx ends, then waits for in-flight deliveries.
func (w *Worker) Run(ctx context.Context) error {
	return w.src.Consume(ctx, w.Handle)
}

// Handle applies one delivery and settles it.
func (w *Worker) Handle(ctx context.Context, d notify.Delivery) {
	msg := d.Message()
	outcome, err := w.apply(ctx, d, msg)
	if err != nil {
		w.log.Error("delivery not settled; it will come back", "message_id", msg.ID, "retry_count", msg.RetryCount, "err", err)
		return
	}
	w.metrics.deliveries.WithLabelValues(string(outcome)).Inc()
	if outcome == notify.OutcomeSent && !msg.OccurredAt.IsZero() {
		w.metrics.latency.Observe(time.Since(msg.OccurredAt).Seconds())
	}
}

// apply runs one delivery to its settlement. An error means the delivery was
// not settled (it stays with the transport and is redelivered).
func (w *Worker) apply(ctx context.Context, d notify.Delivery, msg notify.Message) (notify.Outcome, error) {
	req, nid, err := msg.Decode()
	if err != nil {
		return w.deadLetter(ctx, d, msg, 0, err)
	}
	var sendErr error
	send := func(ctx context.Context) error {
		sendErr = w.sender.Send(ctx, notify.NewEmail(req, w.cfg.From))
		if sendErr == nil {
			w.cfg.Crash("after-send")
		}
		return sendErr
	}
	outcome, err := w.store.Deliver(ctx, msg.ID, nid, send)
	switch {
	case err == nil:
		w.cfg.Crash("after-commit")
		if err := d.Ack(ctx); err != nil {
			return "", fmt.Errorf("ack: %w", err)
		}
		return outcome, nil
	case sendErr == nil && !notify.IsPermanent(err):
		// The store failed, not the delivery: hand it back unchanged after a
		// pause, without spending a retry.
		return "", w.release(ctx, d, fmt.Errorf("store: %w", err))
	case notify.IsPermanent(err) || msg.RetryCount >= w.cfg.MaxRetries:
		return w.deadLetter(ctx, d, msg, nid, err)
	default:
		return w.retry(ctx, d, msg, nid, err)
	}
}

func (w *Worker) retry(ctx context.Context, d notify.Delivery, msg notify.Message, nid int64, cause error) (notify.Outcome, error) {
	reason := cause.Error()
	if err := w.store.RecordFailure(ctx, msg.ID, nid, reason, false); err != nil {
		return "", w.release(ctx, d, fmt.Errorf("record failure: %w", err))
	}
	if err := d.Retry(ctx, reason); err != nil {
		return "", fmt.Errorf("schedule retry: %w", err)
	}
	w.log.Warn("delivery failed; retry scheduled", "message_id", msg.ID, "notification_id", nid,
		"retry", msg.RetryCount+1, "err", reason)
	return notify.OutcomeRetried, nil
}

// deadLetter marks the notification failed (recording the message id as
// processed in the same transaction), then hands the message to the dead
// letters. The database is the record of dead letters (herald dlq reads it);
// a crash between the two steps leaves the notification failed and the
// redelivery is absorbed as a duplicate, so the attempt is never repeated.
func (w *Worker) deadLetter(ctx context.Context, d notify.Delivery, msg notify.Message, nid int64, cause error) (notify.Outcome, error) {
	reason := cause.Error()
	if nid != 0 {
		if err := w.store.RecordFailure(ctx, msg.ID, nid, reason, true); err != nil {
			return "", w.release(ctx, d, fmt.Errorf("record failure: %w", err))
		}
	}
	if err := d.DeadLetter(ctx, reason); err != nil {
		return "", fmt.Errorf("dead-letter: %w", err)
	}
	w.log.Error("delivery dead-lettered", "message_id", msg.ID, "notification_id", nid,
		"retries", msg.RetryCount, "permanent", notify.IsPermanent(cause), "err", reason)
	return notify.OutcomeDead, nil
}

// release pauses, then hands the delivery back. The pause keeps a store
// outage from turning into a hot redelivery loop.
func (w *Worker) release(ctx context.Context, d notify.Delivery, cause error) error {
	t := time.NewTimer(w.cfg.StoreBackoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	if err := d.Release(context.WithoutCancel(ctx)); err != nil {
		return errors.Join(cause, fmt.Errorf("release: %w", err))
	}
	return cause
}
