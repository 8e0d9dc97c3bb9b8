// Package monitor watches the outbox backlog: it exports it as gauges and
// raises the OutboxBacklog alert (log record, and Telegram when configured)
// when the number of unprocessed rows stays above a threshold for a while.
package monitor

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/heraldhq/herald/internal/notify"
)

// AlertName is the name of the backlog alert, in log records, Telegram
// messages and the Prometheus rules under deploy/.
const AlertName = "OutboxBacklog"

// Stats reports the backlog. The stores implement it.
type Stats interface {
	// OutboxStats counts the unprocessed outbox rows, the age of the
	// oldest of them and the dead letters.
	OutboxStats(ctx context.Context) (notify.OutboxStats, error)
}

// Config tunes a Monitor. Threshold and For have no default of their own:
// zero is a meaningful value of each, so the caller passes what was
// configured (herald's defaults, 100 rows for 5m, live with the rest of its
// configuration in cmd/herald).
type Config struct {
	// Interval is the sampling period. Zero means the default, 15s; it must
	// not be negative.
	Interval time.Duration
	// Threshold is the number of unprocessed rows the backlog must stay
	// above to fire the alert. Zero is honoured: any backlog at all counts.
	// It must not be negative.
	Threshold int64
	// For is how long the backlog must stay above Threshold, measured from
	// the first sample above it, before the alert fires. Zero is honoured:
	// the first sample above Threshold fires. It must not be negative.
	For time.Duration
	// Logger receives the alert records and sampling failures. Default:
	// discard.
	Logger *slog.Logger
	// Registerer, when set, receives the backlog gauges.
	Registerer prometheus.Registerer
	// Telegram, when set, also sends every alert record to a Telegram chat.
	// Default nil: log only.
	Telegram *TelegramConfig
	// Now is the clock. Default time.Now; tests of the alert timing may
	// replace it.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	c.Interval = cmp.Or(c.Interval, 15*time.Second)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	if c.Telegram != nil {
		t := c.Telegram.withDefaults()
		c.Telegram = &t
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Interval <= 0:
		return fmt.Errorf("monitor interval must be positive, got %s", c.Interval)
	case c.Threshold < 0:
		return fmt.Errorf("alert threshold must not be negative, got %d", c.Threshold)
	case c.For < 0:
		return fmt.Errorf("alert duration must not be negative, got %s", c.For)
	}
	if c.Telegram != nil {
		if err := c.Telegram.validate(); err != nil {
			return err
		}
	}
	return nil
}

// Monitor samples the backlog, keeps the gauges current and raises the
// backlog alert.
type Monitor struct {
	stats    Stats
	cfg      Config
	log      *slog.Logger
	telegram *telegram
	rule     rule
	metrics  metrics
}

type metrics struct {
	unprocessed prometheus.Gauge
	oldest      prometheus.Gauge
	scheduled   prometheus.Gauge
	deadLetters prometheus.Gauge
}

// New returns a Monitor of stats.
func New(stats Stats, cfg Config) (*Monitor, error) {
	if stats == nil {
		return nil, errors.New("monitor: stats is required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	m := &Monitor{
		stats: stats,
		cfg:   cfg,
		log:   cfg.Logger,
		rule:  rule{threshold: cfg.Threshold, hold: cfg.For},
		metrics: metrics{
			unprocessed: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "herald_outbox_unprocessed",
				Help: "Outbox rows due and not yet handed on (processed_at NULL, available_at passed), at the last sample; rows scheduled for later are not counted.",
			}),
			oldest: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "herald_outbox_oldest_unprocessed_seconds",
				Help: "Seconds the due unprocessed outbox row due the longest has been due, at the last sample (0 when there is none).",
			}),
			scheduled: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "herald_outbox_scheduled",
				Help: "Unprocessed outbox rows not due yet (scheduled sends, retries waiting out their backoff, rows leased to a batch), at the last sample, counted up to 10000.",
			}),
			deadLetters: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "herald_dead_letters",
				Help: "Notifications given up on (status failed), at the last sample.",
			}),
		},
	}
	if cfg.Telegram != nil {
		m.telegram = newTelegram(*cfg.Telegram)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{m.metrics.unprocessed, m.metrics.oldest, m.metrics.scheduled, m.metrics.deadLetters} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register monitor metrics: %w", err)
			}
		}
	}
	return m, nil
}

// Run samples the backlog at once and then every Interval until ctx ends,
// then returns nil. A failed sample is logged once per failure streak and
// leaves the gauges and the alert state as they were: an unreachable store
// says nothing about the backlog, and flapping the alert on it would only
// add noise to the outage that is already being reported elsewhere.
func (m *Monitor) Run(ctx context.Context) error {
	ticker := time.NewTicker(m.cfg.Interval)
	defer ticker.Stop()
	failing := false
	for {
		err := m.sample(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil && !failing:
			failing = true
			m.log.Warn("backlog sample failed; keeping the last values", "err", err)
		case err == nil && failing:
			failing = false
			m.log.Info("backlog sampling recovered")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// sample takes one sample, updates the gauges and reports an alert
// transition.
func (m *Monitor) sample(ctx context.Context) error {
	st, err := m.stats.OutboxStats(ctx)
	if err != nil {
		return fmt.Errorf("outbox stats: %w", err)
	}
	m.metrics.unprocessed.Set(float64(st.Unprocessed))
	m.metrics.oldest.Set(st.OldestAge.Seconds())
	m.metrics.scheduled.Set(float64(st.Scheduled))
	m.metrics.deadLetters.Set(float64(st.DeadLetters))

	switch m.rule.observe(m.cfg.Now(), st.Unprocessed) {
	case fired:
		m.report(ctx, slog.LevelError, "alert firing", st.Unprocessed)
	case resolved:
		m.report(ctx, slog.LevelInfo, "alert resolved", st.Unprocessed)
	}
	return nil
}

// report logs one alert record and sends the same text to Telegram. A
// Telegram failure is only logged: the log record is the alert of record,
// and the monitor must keep sampling.
func (m *Monitor) report(ctx context.Context, level slog.Level, msg string, value int64) {
	m.log.Log(ctx, level, msg,
		slog.String("alert", AlertName),
		slog.Int64("value", value),
		slog.Int64("threshold", m.cfg.Threshold),
		slog.Duration("for", m.cfg.For))
	if m.telegram == nil {
		return
	}
	text := msg + " alert=" + AlertName +
		" value=" + strconv.FormatInt(value, 10) +
		" threshold=" + strconv.FormatInt(m.cfg.Threshold, 10) +
		" for=" + m.cfg.For.String()
	if err := m.telegram.send(ctx, text); err != nil {
		m.log.Warn("telegram alert not sent", "alert", AlertName, "err", err)
	}
}
