// Package relay moves outbox events to the broker: it claims unprocessed
// rows, publishes them, and marks processed only the rows the broker
// confirmed.
package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/heraldhq/herald/internal/notify"
	"github.com/heraldhq/herald/internal/tracing"
)

// Config tunes a Relay. No field has a meaningful zero (claiming no rows,
// or polling and retrying without a pause, would only spin), so a zero
// stands for the field's default.
type Config struct {
	// Batch is the number of rows claimed per transaction. Zero means the
	// default, 100; it must not be negative.
	Batch int
	// Interval is the longest idle wait between polls when no wake-up
	// arrives. Zero means the default, 500ms; it must not be negative.
	Interval time.Duration
	// MaxBackoff caps the wait after consecutive failures (store or broker
	// down). Zero means the default, 5s; it must not be negative.
	MaxBackoff time.Duration
	// BatchTimeout bounds one batch: the claim and the publish (a broker
	// that accepts the connection and never answers is given up on after
	// it). The store leases the claimed rows until then, plus a margin to
	// record the confirms, so another relay takes them over only once this
	// one has given up on them. Keep it above the publisher's own bounds
	// (RabbitMQ: 30s handshake, 15s confirms) so that those fire first.
	// Zero means the default, 1m; it must not be negative.
	BatchTimeout time.Duration
	// Types are the event types this relay hands on; the outbox rows of
	// other types are left to another relay. nil means every type (the
	// default); an empty non-nil list is refused. herald runs a second
	// relay for the status events when they go somewhere the notifications
	// do not (HERALD_STATUS_WEBHOOK_URL), so that a slow status sink never
	// delays a notification.
	Types []string
	// Name labels this relay's metrics (relay="..."), to tell two relays
	// of one process apart. Default: "outbox".
	Name string
	// Logger receives one record per failure streak. Default: discard.
	Logger *slog.Logger
	// Registerer, when set, receives the relay's metrics.
	Registerer prometheus.Registerer
	// TracerProvider, when set, gives every published event a publish span,
	// a child of the trace context stored with the event (its create), and
	// hands the span's context on in the event's Traceparent for the
	// broker's headers. Default: nil (no spans; events keep what the
	// outbox stored).
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	c.Batch = cmp.Or(c.Batch, 100)
	c.Interval = cmp.Or(c.Interval, 500*time.Millisecond)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, 5*time.Second)
	c.BatchTimeout = cmp.Or(c.BatchTimeout, time.Minute)
	c.Name = cmp.Or(c.Name, "outbox")
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	return c
}

func (c Config) validate() error {
	switch {
	case c.Batch < 1:
		return fmt.Errorf("relay batch must be at least 1, got %d", c.Batch)
	case c.Interval <= 0:
		return fmt.Errorf("relay interval must be positive, got %s", c.Interval)
	case c.MaxBackoff <= 0:
		return fmt.Errorf("relay max backoff must be positive, got %s", c.MaxBackoff)
	case c.BatchTimeout <= 0:
		return fmt.Errorf("relay batch timeout must be positive, got %s", c.BatchTimeout)
	case c.Types != nil && len(c.Types) == 0:
		return errors.New("relay types must not be an empty list (nil means every type)")
	}
	return nil
}

// Relay publishes outbox rows to the broker.
type Relay struct {
	src     Outbox
	pub     Publisher
	waker   Waker
	cfg     Config
	log     *slog.Logger
	metrics metrics
	tracer  trace.Tracer
	traced  bool
	// stopped holds the error Run stopped on, for Ping.
	stopped atomic.Pointer[error]
	// parked is the number of rows the last batch's publisher parked
	// (ParkedError): the next claim takes as many rows more.
	parked atomic.Int64
}

type metrics struct {
	published prometheus.Counter
	failures  prometheus.Counter
	// wait is the time an event spent in the outbox: from its create to
	// the broker's confirm of its publish.
	wait prometheus.Histogram
}

// New returns a Relay that claims from src and publishes with pub. waker may
// be nil; then the relay only polls.
func New(src Outbox, pub Publisher, waker Waker, cfg Config) (*Relay, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Relay{src: src, pub: pub, waker: waker, cfg: cfg, log: cfg.Logger,
		tracer: tracing.Tracer(cfg.TracerProvider), traced: cfg.TracerProvider != nil}
	r.metrics = metrics{
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "herald_relay_published_total",
			Help:        "Outbox events published and confirmed by the broker.",
			ConstLabels: prometheus.Labels{"relay": cfg.Name},
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "herald_relay_publish_failures_total",
			Help:        "Relay batches that failed (store or broker error, or events not confirmed).",
			ConstLabels: prometheus.Labels{"relay": cfg.Name},
		}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "herald_outbox_wait_seconds",
			Help:        "Time an event spent in the outbox: from its create to the broker's confirm of its publish.",
			Buckets:     []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
			ConstLabels: prometheus.Labels{"relay": cfg.Name},
		}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.metrics.published, r.metrics.failures, r.metrics.wait} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("register relay metrics: %w", err)
			}
		}
	}
	return r, nil
}

// ErrStopped wraps the error a Relay stopped on: the publisher reported a
// failure that retrying cannot cure (notify.IsPermanent), such as a broker
// topology declared with other arguments. The relay gives up rather than
// retry for ever while publishing nothing.
var ErrStopped = errors.New("relay stopped")

// Run relays until ctx ends. It never returns because the store or the
// broker is down: it backs off and tries again, and wake-ups do not cut a
// backoff short. It returns nil when ctx ends, and an error wrapping
// ErrStopped (after an ERROR log) when the publisher returns an error
// marked notify.Permanent: a relay that cannot publish must stop the
// process, not stall in silence.
func (r *Relay) Run(ctx context.Context) error {
	var wake <-chan struct{}
	if r.waker != nil {
		wake = r.waker.Subscribe(ctx)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		// While backing off, wake-ups are not taken: a commit says
		// nothing about the failing store or broker, and with creates
		// arriving every one of them would cost a claim and a dial. The
		// waker keeps at most one wake-up pending, so none piles up; the
		// next batch looks at the whole outbox anyway.
		woken := wake
		if failures > 0 {
			woken = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case _, ok := <-woken:
			if !ok {
				wake = nil
			}
		}
		// Drain full batches back to back; wait only when the outbox is
		// empty or something failed.
		for {
			b, err := r.runOnce(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrStopped) {
				r.stopped.Store(&err)
				// Logged as well as returned: the process prints the
				// returned error on stderr as plain text, the log is
				// what log shippers and alerts see.
				r.log.Error("relay stopped: the broker refuses what it is given, retrying cannot help; fix the configuration and restart",
					"err", err)
				return err
			}
			if err != nil {
				failures++
				if failures == 1 {
					r.log.Warn("relay batch failed; backing off", "err", err)
				}
				break
			}
			if failures > 0 {
				r.log.Info("relay recovered", "failed_batches", failures)
				failures = 0
			}
			// A batch whose rows all wait for their retry changed
			// nothing: the next one waits for the interval or a
			// wake-up, or it would claim the same rows at once.
			if b.claimed < b.limit || b.confirmed == 0 {
				break
			}
		}
		timer.Reset(r.wait(failures)) // since Go 1.23 Reset also drops a fire not yet received
	}
}

// Ping reports the relay's own readiness: nil while it runs, the error it
// stopped on once Run gave up (ErrStopped). It implements the API's Pinger,
// for the /readyz of a relay process; the broker's reachability is a check
// of its own.
func (r *Relay) Ping(context.Context) error {
	if err := r.stopped.Load(); err != nil {
		return *err
	}
	return nil
}

// wait is the next idle wait: the poll interval, or a capped exponential
// backoff after consecutive failures.
func (r *Relay) wait(failures int) time.Duration {
	if failures == 0 {
		return r.cfg.Interval
	}
	d := 100 * time.Millisecond
	for i := 1; i < failures && d < r.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, r.cfg.MaxBackoff)
}

// maxParkedClaim bounds how many rows more than Batch a claim takes to
// pass over the rows its publisher parked.
const maxParkedClaim = 10_000

// batch is what one relay batch did.
type batch struct {
	// claimed is the number of rows claimed, limit the most the claim
	// could take, confirmed the number the publisher confirmed.
	claimed, limit, confirmed int
}

// RunOnce relays one batch, within BatchTimeout, and returns the number of
// rows it claimed. An error the publisher marked notify.Permanent is
// returned wrapped in ErrStopped. Rows the publisher parked (ParkedError)
// are no failure; the next batch claims as many rows more than Batch.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	b, err := r.runOnce(ctx)
	return b.claimed, err
}

func (r *Relay) runOnce(ctx context.Context) (batch, error) {
	// The deadline is also the store's lease on the claimed rows (Batch).
	ctx, cancel := context.WithTimeout(ctx, r.cfg.BatchTimeout)
	defer cancel()
	b := batch{limit: r.cfg.Batch + int(min(r.parked.Load(), maxParkedClaim))}
	var pubErr error
	n, err := Batch(ctx, r.src, b.limit, r.cfg.Types, func(ctx context.Context, events []notify.Event) ([]int64, error) {
		events, spans := r.startPublish(ctx, events)
		confirmed, err := r.pub.Publish(ctx, events)
		r.endPublish(events, spans, confirmed, err)
		b.confirmed = len(confirmed)
		parked, err := splitParked(err)
		pubErr = err
		waiting, missing := 0, 0
		for _, e := range events {
			switch {
			case slices.Contains(confirmed, e.ID):
			case parked[e.ID]:
				waiting++
			default:
				missing++
			}
		}
		r.parked.Store(int64(waiting))
		if err == nil && missing > 0 {
			err = fmt.Errorf("broker confirmed %d of %d events", len(confirmed), len(events))
		}
		return confirmed, err
	})
	b.claimed = n
	r.metrics.published.Add(float64(b.confirmed))
	if err != nil {
		r.metrics.failures.Inc()
		// Only the publisher's own verdict stops the relay: the store's
		// errors are outages to wait out.
		if notify.IsPermanent(pubErr) {
			return b, fmt.Errorf("%w: %w", ErrStopped, err)
		}
		return b, fmt.Errorf("relay batch: %w", err)
	}
	if n == 0 {
		r.parked.Store(0)
	}
	return b, nil
}

// splitParked takes the ParkedErrors out of err (found as err itself or
// inside errors.Join, at any depth) and returns the ids they park and
// what is left of err (nil when nothing).
func splitParked(err error) (map[int64]bool, error) {
	parked := map[int64]bool{}
	var walk func(error) error
	walk = func(err error) error {
		if p, ok := err.(*ParkedError); ok {
			for _, id := range p.IDs {
				parked[id] = true
			}
			return nil
		}
		j, ok := err.(interface{ Unwrap() []error })
		if !ok {
			return err
		}
		var rest []error
		for _, e := range j.Unwrap() {
			if e = walk(e); e != nil {
				rest = append(rest, e)
			}
		}
		return errors.Join(rest...)
	}
	if err == nil {
		return parked, nil
	}
	rest := walk(err)
	if len(parked) == 0 {
		return parked, err // as it came, wrapping and all
	}
	return parked, rest
}

// startPublish starts one publish span per event, each a child of the
// context stored with its event (an event written untraced, by a reconcile
// or a redrive, starts a trace of its own), and returns copies of the
// events carrying their span's context. One span per event rather than one
// per batch with links: each notification's trace then runs unbroken from
// the POST to the send, and a batch's spans share their start and end.
// Without a tracer it returns events as they are.
func (r *Relay) startPublish(ctx context.Context, events []notify.Event) ([]notify.Event, []trace.Span) {
	if !r.traced {
		return events, nil
	}
	out := make([]notify.Event, len(events))
	spans := make([]trace.Span, len(events))
	base := trace.ContextWithSpanContext(ctx, trace.SpanContext{}) // the relay loop's own span, if any, is no parent
	for i, e := range events {
		pctx, span := r.tracer.Start(tracing.Extract(base, e.Traceparent), "publish "+e.Type,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("messaging.operation.type", "publish"),
				attribute.String("messaging.message.id", strconv.FormatInt(e.ID, 10)),
				attribute.Int("messaging.batch.message_count", len(events))))
		e.Traceparent = tracing.Traceparent(pctx)
		out[i], spans[i] = e, span
	}
	return out, spans
}

// endPublish ends the publish spans (an error on those the broker did not
// confirm) and records the outbox wait of the confirmed events, with the
// span's trace as exemplar.
func (r *Relay) endPublish(events []notify.Event, spans []trace.Span, confirmed []int64, err error) {
	now := time.Now()
	for i, e := range events {
		ok := slices.Contains(confirmed, e.ID)
		if ok && !e.OccurredAt.IsZero() {
			ctx := context.Background()
			if spans != nil {
				ctx = trace.ContextWithSpan(ctx, spans[i])
			}
			tracing.Observe(ctx, r.metrics.wait, now.Sub(e.OccurredAt).Seconds())
		}
		if spans == nil {
			continue
		}
		if !ok {
			if err != nil {
				spans[i].RecordError(err)
			}
			spans[i].SetStatus(codes.Error, "not confirmed by the broker")
		}
		spans[i].End()
	}
}
