// Package retention deletes what herald no longer needs: processed outbox
// rows and processed_messages rows older than the retention period, in
// bounded batches so that pruning never holds long locks.
package retention

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/heraldhq/herald/internal/notify"
)

// Pruner deletes old processed rows. The stores implement it.
type Pruner interface {
	// PruneOlderThan deletes processed outbox rows and processed_messages
	// rows older than age, at most batch rows per transaction. The store
	// measures the age on the clock that wrote the rows' timestamps (the
	// database's, for PostgreSQL), so that a process whose clock is off
	// neither prunes dedup rows early nor keeps them late.
	PruneOlderThan(ctx context.Context, age time.Duration, batch int) (notify.PruneResult, error)
}

// Config tunes a Loop. No field has a meaningful zero, so a zero stands for
// the field's default.
type Config struct {
	// Retention is the age after which processed rows go. A zero retention
	// would prune the dedup rows (processed_messages) as soon as they are
	// written, so zero means the default, 168h; it must not be negative.
	Retention time.Duration
	// Interval is the time between passes. Zero means the default, 10m; it
	// must not be negative.
	Interval time.Duration
	// Batch is the number of rows deleted per transaction. Zero means the
	// default, 1000; it must not be negative.
	Batch int
	// Logger receives one record per pass that deleted something, and
	// failures. Default: discard.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	c.Retention = cmp.Or(c.Retention, 168*time.Hour)
	c.Interval = cmp.Or(c.Interval, 10*time.Minute)
	c.Batch = cmp.Or(c.Batch, 1000)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

func (c Config) validate() error {
	if c.Retention <= 0 || c.Interval <= 0 || c.Batch < 1 {
		return fmt.Errorf("retention, interval and batch must not be negative")
	}
	return nil
}

// Loop prunes on a schedule.
type Loop struct {
	p   Pruner
	cfg Config
}

// New returns a Loop over p.
func New(p Pruner, cfg Config) (*Loop, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Loop{p: p, cfg: cfg}, nil
}

// Once runs one pass now.
func (l *Loop) Once(ctx context.Context) (notify.PruneResult, error) {
	r, err := l.p.PruneOlderThan(ctx, l.cfg.Retention, l.cfg.Batch)
	if err != nil {
		return r, fmt.Errorf("prune: %w", err)
	}
	return r, nil
}

// Run prunes at start and then every Interval until ctx ends.
func (l *Loop) Run(ctx context.Context) error {
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		r, err := l.Once(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			l.cfg.Logger.Warn("retention pass failed", "err", err)
		case r.Outbox+r.ProcessedMessages+r.OutboxPartitions > 0:
			l.cfg.Logger.Info("retention pass", "outbox_deleted", r.Outbox, "outbox_partitions_dropped", r.OutboxPartitions,
				"processed_messages_deleted", r.ProcessedMessages)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
